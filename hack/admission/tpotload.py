"""What an admitted request's TPOT grows with (docs/notes/admission-criteria.md, "Session of
2026-12-06: a decode term"): for one run's request rows and one stage, each answer of two tokens
or more with its TPOT, the requests decoding on its replica at its first token (first token
reached, not ended) and the prompt tokens its replica processed per second of its decode (the
prompts whose first token fell inside it); the TPOT median and p90 by bins of the first and the
median of the second by bins of the latter.

Usage: python3 hack/admission/tpotload.py RUN-sim.csv [STAGE-PREFIX, default stage1]
"""
import csv, statistics as st, sys
from collections import defaultdict


def main():
    fn, stage = sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else 'stage1')
    R = [r for r in csv.DictReader(open(fn)) if r['status'] == '200']
    by = defaultdict(list)
    for r in R:
        r['s'] = float(r['start_ms']); r['e'] = float(r['end_ms']); r['f'] = r['s'] + float(r['ttft_ms'])
        r['n'] = int(r['predicted_n'] or 0); r['p'] = int(r['prompt_n'] or 0)
        by[r['replica']].append(r)
    out = []
    for r in R:
        if not r['conversation'].startswith(stage) or r['n'] < 2 or r['e'] <= r['f']:
            continue
        rs = by[r['replica']]
        dec = sum(1 for q in rs if q['f'] <= r['f'] < q['e'])
        pf = sum(q['p'] for q in rs if r['f'] < q['f'] <= r['e']) / ((r['e'] - r['f']) / 1000)
        out.append(((r['e'] - r['f']) / (r['n'] - 1), dec, pf))
    print(f"{len(out)} answers, {sum(o[0] > 100 for o in out)} over 100 ms")
    for name, key, width in (('decoding at its first token', 1, 20), ('prompt tok/s during its decode', 2, 5000)):
        bins = defaultdict(list)
        for o in out:
            bins[int(o[key] // width * width)].append(o)
        for b in sorted(bins):
            v = bins[b]; t = sorted(x[0] for x in v)
            other = st.median(x[3 - key] for x in v)
            print(f"  {name} {b}-{b + width}: {len(v)} answers, TPOT median {st.median(t):.0f} p90 {t[int(.9 * (len(t) - 1))]:.0f} ms; "
                  f"median {'prompt tok/s' if key == 1 else 'decoding'} {other:.0f}")


main()
