"""Summary tables of docs/notes/admission.md from share.py's per-folder table: per case (engine,
preset, workload) and variant, at 2x and 3x "TTFT policies, goodput; fair policies; top-band
policies" and at 1x "goodput / shed".

Usage: python3 hack/admission/share.py OUT > T.md; python3 hack/admission/summary.py T.md VAR...
"""
import re, sys
from collections import defaultdict

rows = defaultdict(list)  # (case, variant) -> cells per stage, in rate order
for line in open(sys.argv[1]):
    c = [x.strip() for x in line.strip().strip('|').split('|')]
    if len(c) < 8 or not c[1].isdigit():
        continue
    case, var = c[0].rsplit('-', 1)
    rows[(case, var)].append((int(c[1]), c))
variants = sys.argv[2:]
cases = sorted({k[0] for k in rows})
cnt = lambda s: re.match(r'[\d.]+ \((\d+/\d+)\)', s).group(1) if re.match(r'[\d.]+ \(', s) else '–'
for k in range(3):
    print(f"\n{k + 1}× capacity:\n")
    print('| case | ' + ' | '.join(variants) + ' |')
    print('|---' * (len(variants) + 1) + '|')
    for case in cases:
        cells = []
        for v in variants:
            st = sorted(rows.get((case, v), []))
            if len(st) <= k:
                cells.append('–')
                continue
            c = st[k][1]
            ttft = c[3].split(' ')[0]
            if k == 0:
                cells.append(f"{c[2]} / {c[4]}; TTFT {ttft}")
            else:
                cells.append(f"{ttft}, {c[2]}; {cnt(c[5])}; {cnt(c[6])}")
        print(f"| {case} | " + ' | '.join(cells) + ' |')
