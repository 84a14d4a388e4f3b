"""Tables of docs/notes/admission.md ("A token capacity from the KV pool") from the request rows
of hack/admission/share.sh. Per run folder and stage (means over seeds, then over policies):
goodput (TTFT <= 1 s and TPOT <= 100 ms), policies with the admitted TTFT p90 <= 1 s, shed share,
the lowest light flow's (t1...) ratio to its max-min fair share of good requests within a band
(min over policies; policies >= 0.8), the top band's (10) TTFT p90 against its p90 at the first
stage (capacity; median over policies; policies within 1.2x), and, against the folder's -noadm
twin, goodput with / without admission (min / median over policies).

Usage: python3 hack/admission/share.py OUT  (OUT as given to share.sh or work.sh)
"""
import csv, glob, os, re, sys, math, statistics as st
from collections import defaultdict

def p90(xs):
    if not xs: return float('nan')
    xs = sorted(xs); k = 0.9 * (len(xs) - 1); f = math.floor(k); c = min(f + 1, len(xs) - 1)
    return xs[f] + (xs[c] - xs[f]) * (k - f)

def maxmin(total, demands):
    order = sorted(range(len(demands)), key=lambda i: demands[i]); out = [0] * len(demands); left = total
    for k, i in enumerate(order):
        sh = left / (len(demands) - k); out[i] = min(demands[i], sh); left -= out[i]
    return out

def run(fn):
    """stage -> dict of n, shed, good, ttft (answered), top (band-10 TTFTs), flows {(band, flow): [n, good]}"""
    S = {}
    pol = None
    for r in csv.DictReader(open(fn)):
        pol = r['policy']; conv = r['conversation']
        stage = conv.split('/')[0]
        if stage == 'warmup': continue
        s = S.setdefault(stage, {'n': 0, 'shed': 0, 'good': 0, 'ttft': [], 'top': [], 'flows': defaultdict(lambda: [0, 0])})
        s['n'] += 1
        m = re.search(r'#band=(-?\d+)#flow=([^#]*)#', conv)
        fl = s['flows'][(m.group(1), m.group(2))] if m else [0, 0]
        fl[0] += 1
        if r['status'] != '200':
            s['shed'] += 1; continue
        t = float(r['ttft_ms']); lat = float(r['latency_ms']); n = int(r['predicted_n'] or 0)
        s['ttft'].append(t)
        if m and m.group(1) == '10': s['top'].append(t)
        if t <= 1000 and (n <= 1 or (lat - t) / (n - 1) <= 100):
            s['good'] += 1; fl[1] += 1
    return pol, S

def light_ratio(flows):
    bands = defaultdict(dict)
    for (b, f), v in flows.items(): bands[b][f] = v
    out = float('inf')
    for b, fl in bands.items():
        names = sorted(fl); fair = maxmin(sum(fl[n][1] for n in names), [fl[n][0] for n in names])
        for n, fs in zip(names, fair):
            if n != 't0' and fs > 0: out = min(out, fl[n][1] / fs)
    return out if out != float('inf') else float('nan')

def load(d):
    """(stage, policy) -> means over seeds of (goodput, ttft p90, shed, light ratio, top p90)"""
    acc = defaultdict(list)
    for fn in sorted(glob.glob(d + '/*-sim.csv')):
        pol, S = run(fn)
        for stage, s in S.items():
            acc[(stage, pol)].append((s['good'] / s['n'], p90(s['ttft']), s['shed'] / s['n'], light_ratio(s['flows']), p90(s['top'])))
    return {k: tuple(sum(x[i] for x in v) / len(v) for i in range(5)) for k, v in acc.items()}

def stage_key(s): return int(s.split('@')[0].replace('stage', ''))

if __name__ == '__main__':
    out = sys.argv[1]
    dirs = sorted(d for d in glob.glob(out + '/*') if os.path.isdir(d) and not d.endswith('-noadm'))
    print('| folder | rate | goodput | TTFT p90 ≤ 1 s | shed | light flow fair ratio (min; ≥ 0.8) | top p90 / at capacity (median; ≤ 1.2×) | goodput / no admission (min / median) |')
    print('|---|---|---|---|---|---|---|---|')
    for d in dirs:
        s = load(d); base = load(d[:d.rindex('-')] + '-noadm')  # the variant's name (after the last '-') has no '-'
        stages = sorted({k[0] for k in s}, key=stage_key); pols = sorted({k[1] for k in s})
        for stage in stages:
            rows = [s[(stage, p)] for p in pols]
            ratio = [s[(stage, p)][0] / base[(stage, p)][0] if base.get((stage, p), (0,))[0] > 0 else float('inf') for p in pols]
            top = [s[(stage, p)][4] / s[(stages[0], p)][4] for p in pols]
            lr = [r[3] for r in rows]
            top_s = '–' if stage == stages[0] else f"{st.median(top):.2f} ({sum(x <= 1.2 for x in top)}/{len(top)})"
            fin = [x for x in ratio if x != float('inf')]
            rat = f"{min(ratio):.2f} / {st.median(ratio):.2f}" if fin else 'no goodput without'
            print(f"| {os.path.basename(d)} | {stage.split('@')[1]} | {100*st.mean(r[0] for r in rows):.1f} % | "
                  f"{sum(r[1] <= 1000 for r in rows)}/{len(rows)} ({min(r[1] for r in rows):.0f}–{max(r[1] for r in rows):.0f} ms) | "
                  f"{100*st.mean(r[2] for r in rows):.1f} % | {min(lr):.2f} ({sum(x >= 0.8 for x in lr)}/{len(lr)}) | {top_s} | {rat} |")
