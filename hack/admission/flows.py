"""Where each flow's requests go (docs/notes/admission.md, "Fairness at twice capacity"): per run
folder, stage, band and flow (sums over the folder's policies and seeds, or one policy with
POLICY=name): offered, admitted at once / after a wait, shed at arrival / after waiting (by
reason), answered but late (TTFT > 1 s), answered with TPOT > 100 ms, good, the flow's max-min
fair share of its band's good requests and the ratio; the uncached prompt tokens (prompt_n) of
its answered requests, mean.

Usage: [STAGE=stage1@32] [POLICY=round-robin] python3 hack/admission/flows.py DIR...
"""
import csv, glob, os, re, sys
from collections import defaultdict

STAGE = os.environ.get('STAGE', '')
POLICY = os.environ.get('POLICY', '')
TAG = re.compile(r'#band=(-?\d+)#flow=([^#]*)#wait_ms=([\d.]+)')


from share import maxmin  # the max-min fair split of share.py (the same folder)


def rows(d):
    for fn in sorted(glob.glob(d + '/*-sim.csv')):
        for r in csv.DictReader(open(fn)):
            if POLICY and r['policy'] != POLICY: continue
            yield r


def count(d):
    """(stage, band, flow) -> counters"""
    g = defaultdict(lambda: defaultdict(float))
    for r in rows(d):
        conv = r['conversation']; stage = conv.split('/')[0]
        if stage == 'warmup' or (STAGE and stage != STAGE): continue
        m = TAG.search(conv)
        a = g[(stage, m.group(1), m.group(2))]
        a['n'] += 1
        if r['status'] != '200':
            waited = float(r['end_ms']) - float(r['start_ms']) > 0
            reason = r['error'].rsplit(': ', 1)[-1]
            a['shed-' + ('queue-' if waited else 'arrival-') + reason] += 1
            continue
        wait = float(m.group(3))
        a['adm-wait' if wait > 0 else 'adm-once'] += 1
        t = float(r['ttft_ms']); lat = float(r['latency_ms']); n = int(r['predicted_n'] or 0)
        a['uncached'] += int(r['prompt_n'] or 0)
        if t > 1000: a['late'] += 1
        elif n > 1 and (lat - t) / (n - 1) > 100: a['slow'] += 1
        else: a['good'] += 1
    return g


def main():
    for d in sys.argv[1:]:
        g = count(d)
        reasons = sorted({k for a in g.values() for k in a if k.startswith('shed-')})
        cols = ['n', 'adm-once', 'adm-wait'] + reasons + ['late', 'slow', 'good', 'fair', 'ratio', 'uncached/adm']
        print(f'\n{d}' + (f' ({POLICY})' if POLICY else ''))
        print('| stage | band | flow | ' + ' | '.join(cols) + ' |')
        print('|' + '---|' * (len(cols) + 3))
        for stage in sorted({k[0] for k in g}, key=lambda s: int(s.split('@')[0][5:] or 0)):
            for band in sorted({k[1] for k in g if k[0] == stage}, key=int, reverse=True):
                names = sorted(f for (s, b, f) in g if s == stage and b == band)
                fair = maxmin(sum(g[(stage, band, f)]['good'] for f in names), [g[(stage, band, f)]['n'] for f in names])
                for f, fs in zip(names, fair):
                    a = g[(stage, band, f)]
                    adm = a['adm-once'] + a['adm-wait']
                    vals = [f'{a[c]:.0f}' for c in cols[:-3]]
                    vals += [f'{fs:.1f}', f'{a["good"] / fs:.2f}' if fs else '-', f'{a["uncached"] / adm:.0f}' if adm else '-']
                    print(f'| {stage} | {band} | {f} | ' + ' | '.join(vals) + ' |')


main()
