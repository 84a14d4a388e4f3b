"""share.py's fairness column split by band (docs/notes/admission.md, "Fairness at twice capacity"):
per run folder and stage, the policies whose lightest light flow (t1...) gets >= 0.8 of its max-min
fair share of its band's good requests (means over seeds, as share.py), counted over every band
(share.py's column), over band 0 only and over band 10 only; and in band 10 the good share of the
light flows' requests and of the flooder's (t0), means over policies and seeds: when the light
flows' band-10 requests are as good as the flooder's, a band-10 miss is the top band's latency
(TTFT or TPOT of admitted requests), not an unfair share; and the lightest light flow's ratio in
band 0 over the requests of every policy and seed pooled (per policy and seed a flow has few good
requests under overload, and the minimum of three flows' ratios of such counts falls below 0.8 by
chance alone).

Usage: python3 hack/admission/fairbands.py OUT [SUFFIX...]  (folders OUT/*-SUFFIX; all without)
"""
import csv, glob, os, re, sys
from collections import defaultdict


from share import maxmin  # the max-min fair split of share.py (the same folder)


def run(fn):
    """policy, stage -> (band, flow) -> [n, good]"""
    S = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    pol = None
    for r in csv.DictReader(open(fn)):
        pol = r['policy']; conv = r['conversation']; stage = conv.split('/')[0]
        if stage == 'warmup': continue
        m = re.search(r'#band=(-?\d+)#flow=([^#]*)#', conv)
        a = S[stage][(m.group(1), m.group(2))]
        a[0] += 1
        if r['status'] != '200': continue
        t = float(r['ttft_ms']); lat = float(r['latency_ms']); n = int(r['predicted_n'] or 0)
        if t <= 1000 and (n <= 1 or (lat - t) / (n - 1) <= 100): a[1] += 1
    return pol, S


def light(flows, bands):
    out = float('inf')
    for b in bands:
        names = sorted(f for (bb, f) in flows if bb == b)
        fair = maxmin(sum(flows[(b, f)][1] for f in names), [flows[(b, f)][0] for f in names])
        for f, fs in zip(names, fair):
            if f != 't0' and fs > 0: out = min(out, flows[(b, f)][1] / fs)
    return out


def main():
    out, sufs = sys.argv[1], sys.argv[2:]
    print('| folder | rate | fair, all bands | band 0 | band 10 | band 10 good: light / t0 | band 0 pooled: min ratio (good per flow and run) |')
    print('|---|---|---|---|---|---|---|')
    for d in sorted(glob.glob(out + '/*')):
        if not os.path.isdir(d) or (sufs and not any(d.endswith('-' + s) for s in sufs)): continue
        acc = defaultdict(lambda: defaultdict(list))  # stage -> policy -> [(all, b0, b10, lg, ln, tg, tn)]
        pool = defaultdict(lambda: defaultdict(lambda: [0, 0]))  # stage -> (band, flow) -> [n, good]
        runs = 0
        for fn in sorted(glob.glob(d + '/*-sim.csv')):
            pol, S = run(fn)
            runs += 1
            for stage, fl in S.items():
                for k, v in fl.items():
                    pool[stage][k][0] += v[0]; pool[stage][k][1] += v[1]
                bands = sorted({b for b, _ in fl})
                b10 = [v for (b, f), v in fl.items() if b == '10']
                lg = sum(v[1] for (b, f), v in fl.items() if b == '10' and f != 't0')
                ln = sum(v[0] for (b, f), v in fl.items() if b == '10' and f != 't0')
                t0 = fl.get(('10', 't0'), [0, 0])
                acc[stage][pol].append((light(fl, bands), light(fl, ['0']), light(fl, ['10']), lg, ln, t0[1], t0[0]))
        for stage in sorted(acc, key=lambda s: int(s.split('@')[1])):
            pols = acc[stage]
            def count(i):
                ok = sum(1 for v in pols.values() if sum(x[i] for x in v) / len(v) >= 0.8)
                return f'{ok}/{len(pols)}'
            lg = sum(x[3] for v in pols.values() for x in v); ln = sum(x[4] for v in pols.values() for x in v)
            tg = sum(x[5] for v in pols.values() for x in v); tn = sum(x[6] for v in pols.values() for x in v)
            print(f'| {os.path.basename(d)} | {stage.split("@")[1]} | {count(0)} | {count(1)} | {count(2)} | '
                  f'{100 * lg / max(ln, 1):.0f} % / {100 * tg / max(tn, 1):.0f} % | '
                  f'{light(pool[stage], ["0"]):.2f} ({sum(v[1] for (b, f), v in pool[stage].items() if b == "0" and f != "t0") / 3 / runs:.0f}) |')


main()
