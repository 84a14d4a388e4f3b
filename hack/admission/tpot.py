"""The admitted requests' time per output token (docs/notes/admission-criteria.md, "Session of
2026-12-06: a decode term"): per run folder, stage and band, over every policy and seed pooled,
the answered requests, their TPOT p50 / p90 / p99 (ms; (latency - TTFT) / (output tokens - 1)),
the share over 100 ms and the share with TTFT over 1 s.

Usage: python3 hack/admission/tpot.py FOLDER...   (folders of hack/admission/work.sh)
"""
import csv, glob, re, sys
from collections import defaultdict


def main():
    for d in sys.argv[1:]:
        S = defaultdict(lambda: defaultdict(list))
        for fn in sorted(glob.glob(d + '/*-sim.csv')):
            for r in csv.DictReader(open(fn)):
                stage = r['conversation'].split('/')[0]
                if stage == 'warmup' or r['status'] != '200':
                    continue
                m = re.search(r'#band=(-?\d+)', r['conversation'])
                n = int(r['predicted_n'] or 0); t = float(r['ttft_ms']); lat = float(r['latency_ms'])
                S[stage][m.group(1) if m else '-'].append(((lat - t) / (n - 1) if n > 1 else 0, t))
        print(d.rstrip('/').split('/')[-1])
        for stage in sorted(S, key=lambda s: int(s.split('@')[0].replace('stage', ''))):
            out = []
            for b in sorted(S[stage], key=lambda x: int(x) if x != '-' else 0):
                v = sorted(x[0] for x in S[stage][b]); k = len(v)
                out.append('band %s: %d answered, TPOT p50 %.0f p90 %.0f p99 %.0f ms, over 100 ms %.1f %%, TTFT over 1 s %.1f %%' % (
                    b, k, v[k // 2], v[int(.9 * k)], v[int(.99 * k)], 100 * sum(x > 100 for x in v) / k,
                    100 * sum(x[1] > 1000 for x in S[stage][b]) / k))
            print('  ' + stage + ': ' + ' | '.join(out))


main()
