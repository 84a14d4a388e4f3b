"""Per stage and policy, from the request rows of sim runs with admission: goodput (TTFT ≤ 1 s and
TPOT ≤ 100 ms), TTFT p90 of the answered (admitted) requests, shed share; means over seeds; and a
summary line per stage over policies.

Usage: python3 hack/admission/stages.py DIR [DIR...]
"""
import csv, glob, sys, re, math
from collections import defaultdict

def p90(xs):
    if not xs: return float('nan')
    xs = sorted(xs); k = 0.9 * (len(xs) - 1); f = math.floor(k); c = min(f + 1, len(xs) - 1)
    return xs[f] + (xs[c] - xs[f]) * (k - f)

def runs(d):
    for fn in sorted(glob.glob(d + '/*-sim.csv')):
        st = defaultdict(lambda: {'n': 0, 'shed': 0, 'good': 0, 'ttft': []})
        pol = None
        for r in csv.DictReader(open(fn)):
            pol = r['policy']
            stage = r['conversation'].split('/')[0]
            if stage == 'warmup': continue
            s = st[stage]; s['n'] += 1
            if r['status'] != '200':
                s['shed'] += 1; continue
            t = float(r['ttft_ms']); lat = float(r['latency_ms']); n = int(r['predicted_n'] or 0)
            s['ttft'].append(t)
            if t <= 1000 and (n <= 1 or (lat - t) / (n - 1) <= 100): s['good'] += 1
        yield pol, st

def summary(d):
    agg = defaultdict(list)
    for pol, st in runs(d):
        for stage, s in st.items():
            agg[(stage, pol)].append((s['good'] / s['n'], p90(s['ttft']), s['shed'] / s['n']))
    out = {}
    for (stage, pol), v in agg.items():
        out[(stage, pol)] = tuple(sum(x[i] for x in v) / len(v) for i in range(3))
    return out

if __name__ == '__main__':
    for d in sys.argv[1:]:
        s = summary(d)
        for stage in sorted({k[0] for k in s}):
            rows = {p: v for (st, p), v in s.items() if st == stage}
            g = [v[0] for v in rows.values()]; t = [v[1] for v in rows.values()]
            print(f"{d} {stage}: goodput {100*min(g):.1f}–{100*max(g):.1f} % (mean {100*sum(g)/len(g):.1f}), "
                  f"admitted TTFT p90 {min(t):.0f}–{max(t):.0f} ms, ≤ 1 s: {sum(x <= 1000 for x in t)}/{len(t)}")
            if '-v' in sys.argv[0:1]: pass
