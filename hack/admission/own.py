"""Issue 22's four criteria at each policy's own capacity, from the folders of
hack/admission/own.sh (docs/notes/admission-criteria.md, "Every criterion at each policy's own
capacity"). A policy's capacity C is the highest rate of its no-admission sweep (ENG-PRESET-WL-sweep)
with goodput >= 90 % (TTFT <= 1 s and TPOT <= 100 ms; mean over seeds); where no rate reaches
it, the lowest swept rate (marked *). At 2C, per policy (means over seeds, share.py's columns):
goodput with the variant / without admission (>= 1.5; the -cC-noadm folder), the admitted TTFT
p90 (<= 1 s), the top band's (10) TTFT p90 at 2C / at C in the same run (<= 1.2), the lightest
light flow's ratio to its max-min fair share of its band's good requests (>= 0.8).

Usage: python3 hack/admission/own.py OUT             (the tables)
       python3 hack/admission/own.py wide OUT        (per case, a row per policy, a cell per variant)
       python3 hack/admission/own.py caps SWEEPDIR [POLICIES]   (own.sh: lines "C POLICY,...")
"""
import glob, math, os, sys
from collections import defaultdict

from share import load, stage_key  # the same folder

GOOD = 0.9
TARGETS = ('ratio ≥ 1.5', 'TTFT p90 ≤ 1 s', 'top p90 2C/C ≤ 1.2', 'lightest flow ≥ 0.8')


def by_rate(s):
    """(rate, policy) -> share.load's tuple"""
    return {(int(st.split('@')[1]), p): v for (st, p), v in s.items()}


def caps(sweep, only=''):
    """policy -> (C, found, [goodput per swept rate])"""
    s = by_rate(load(sweep))
    pols = sorted({p for _, p in s})
    if only and only != 'all':
        pols = [p for p in pols if p in only.replace(' ', ',').split(',')]
    rates = sorted({r for r, _ in s})
    out = {}
    for p in pols:
        g = [s[(r, p)][0] for r in rates]
        ok = [r for r, x in zip(rates, g) if x >= GOOD]
        out[p] = (max(ok) if ok else rates[0], bool(ok), g)
    return out, rates


def crit(v, base, p, c):
    """the four figures at 2C and whether each passes"""
    at1, at2 = v.get((c, p)), v.get((2 * c, p))
    b2 = base.get((2 * c, p))
    if at1 is None or at2 is None:
        return None
    g0 = b2[0] if b2 else float('nan')
    ratio = at2[0] / g0 if g0 > 0 else (float('inf') if at2[0] > 0 else float('nan'))
    top = at2[4] / at1[4] if at1[4] > 0 else float('nan')
    figs = (ratio, at2[1], top, at2[3])
    ok = (ratio >= 1.5, at2[1] <= 1000, top <= 1.2, at2[3] >= 0.8)  # nan fails each
    return figs, ok, (g0, at2[0])


def fmt(x, d=2):
    return '∞' if x == float('inf') else ('–' if math.isnan(x) else f'{x:.{d}f}')


def case_tables(out, tag, summary):
    cp, rates = caps(f'{out}/{tag}-sweep')
    print(f'\n#### {tag}\n')
    print('capacity sweep (goodput % at ' + ' / '.join(map(str, rates)) + ' /s → C):\n')
    for p, (c, found, g) in cp.items():
        print(f'- {p}: ' + ' / '.join(f'{100 * x:.1f}' for x in g) + f' → C = {c}' + ('' if found else '*'))
    names = sorted({d.rsplit('-', 1)[1] for d in glob.glob(f'{out}/{tag}-c*-*')} - {'noadm'})
    base = {}
    for d in glob.glob(f'{out}/{tag}-c*-noadm'):
        base.update(by_rate(load(d)))
    for name in names:
        v = {}
        for d in glob.glob(f'{out}/{tag}-c*-{name}'):
            v.update(by_rate(load(d)))
        print(f'\n{tag}, {name}, at 2C:\n')
        print('| policy | C | goodput 2C: no adm. / with | ratio (≥ 1.5) | admitted TTFT p90 (≤ 1 s) | top p90 2C/C (≤ 1.2) | lightest flow (≥ 0.8) | all four |')
        print('|---|---:|---|---|---|---|---|---|')
        cnt = [0] * 5
        for p, (c, found, _) in cp.items():
            r = crit(v, base, p, c)
            if r is None:
                print(f'| {p} | {c} | not run | | | | | |')
                continue
            figs, ok, (g0, g1) = r
            mark = lambda i, s: f'**{s}**' if not ok[i] else s
            for i in range(4): cnt[i] += ok[i]
            cnt[4] += all(ok)
            print(f'| {p} | {c}{"" if found else "*"} | {100 * g0:.1f} / {100 * g1:.1f} % | {mark(0, fmt(figs[0]))} | '
                  f'{mark(1, fmt(figs[1], 0))} ms | {mark(2, fmt(figs[2]))} | {mark(3, fmt(figs[3]))} | {"yes" if all(ok) else "no"} |')
        n = len(cp)
        print(f'\npasses: ' + ', '.join(f'{t} {k}/{n}' for t, k in zip(TARGETS, cnt)) + f'; all four {cnt[4]}/{n}')
        summary[(tag, name)] = (cnt, n)


def wide(out):
    """per case, one row per policy: C and per variant ratio / TTFT p90 / top ratio / flow ratio at 2C"""
    tags = sorted(os.path.basename(d)[:-len('-sweep')] for d in glob.glob(f'{out}/*-sweep') if os.path.isdir(d))
    for tag in tags:
        cp, _ = caps(f'{out}/{tag}-sweep')
        names = sorted({d.rsplit('-', 1)[1] for d in glob.glob(f'{out}/{tag}-c*-*')} - {'noadm'})
        base, v = {}, defaultdict(dict)
        for d in glob.glob(f'{out}/{tag}-c*-*'):
            (base if d.endswith('-noadm') else v[d.rsplit('-', 1)[1]]).update(by_rate(load(d)))
        print(f'\n{tag} (at 2C: goodput ratio / admitted TTFT p90 ms / top p90 2C/C / lightest flow; misses in bold):\n')
        print('| policy | C | no adm. at 2C | ' + ' | '.join(names) + ' |')
        print('|---|---:|---:|' + '---|' * len(names))
        for p, (c, found, _) in cp.items():
            cells, g0 = [], float('nan')
            for name in names:
                r = crit(v[name], base, p, c)
                if r is None:
                    cells.append('–'); continue
                figs, ok, (g0, _) = r
                fs = [fmt(figs[0], 2 if figs[0] < 10 else (1 if figs[0] < 100 else 0)), fmt(figs[1], 0), fmt(figs[2]), fmt(figs[3])]
                cells.append(' / '.join(x if k else f'**{x}**' for x, k in zip(fs, ok)))
            print(f'| {p} | {c}{"" if found else "*"} | {100 * g0:.1f} % | ' + ' | '.join(cells) + ' |')


def main(out):
    summary = {}
    tags = sorted(os.path.basename(d)[:-len('-sweep')] for d in glob.glob(f'{out}/*-sweep') if os.path.isdir(d))
    for tag in tags:
        case_tables(out, tag, summary)
    names = sorted({k[1] for k in summary})
    print('\nSummary at each policy\'s own 2C (policies passing: ' + '; '.join(TARGETS) + '; all four):\n')
    print('| case | ' + ' | '.join(names) + ' |')
    print('|---' * (len(names) + 1) + '|')
    for tag in tags:
        cells = []
        for name in names:
            if (tag, name) not in summary:
                cells.append('–'); continue
            cnt, n = summary[(tag, name)]
            cells.append(' / '.join(str(k) for k in cnt[:4]) + f'; **{cnt[4]}/{n}**')
        print(f'| {tag} | ' + ' | '.join(cells) + ' |')
    tot = []
    for name in names:
        rows = [summary[k] for k in summary if k[1] == name]
        sums = [sum(c[i] for c, _ in rows) for i in range(5)]
        tot.append(' / '.join(map(str, sums[:4])) + f'; **{sums[4]}/{sum(n for _, n in rows)}**')
    print('| total | ' + ' | '.join(tot) + ' |')


if __name__ == '__main__':
    if sys.argv[1] == 'caps':
        cp, _ = caps(sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else '')
        groups = defaultdict(list)
        for p, (c, _, _) in cp.items():
            groups[c].append(p)
        for c in sorted(groups):
            print(c, ','.join(groups[c]))
    elif sys.argv[1] == 'wide':
        wide(sys.argv[2])
    else:
        main(sys.argv[1])
