"""Tables of docs/notes/admission.md ("Band limits") from the request rows of hack/admission/run.sh.

Usage: python3 hack/admission/bands.py OUT  (OUT as given to run.sh; TOTALS, LIMS and TOP as
given to it, in the environment: the first total is the capacity stage, the next two 2x and 3x)
"""
import csv, glob, os, sys, statistics as st, re, math
TOTALS=[int(x) for x in os.environ.get('TOTALS','32 64 96').split()]
LIMS=os.environ.get('LIMS','none 0.6 0.4 0.2').split()
TOP=os.environ.get('TOP','8')
def p90(xs):
    if not xs: return float('nan')
    xs=sorted(xs); k=0.9*(len(xs)-1); f=math.floor(k); c=min(f+1,len(xs)-1)
    return xs[f]+(xs[c]-xs[f])*(k-f)
def load(d):
    out={}  # (policy, seed) -> stats
    for fn in glob.glob(d+'/*-sim.csv'):
        rows=list(csv.DictReader(open(fn)))
        if not rows: continue
        pol, seed = rows[0]['policy'], rows[0]['seed']
        B={}
        for r in rows:
            conv=r['conversation']
            if conv.startswith('warmup/'): continue
            m=re.search(r'#band=(-?\d+)#flow=([^#]*)#wait_ms=([\d.]+)',conv)
            band=int(m.group(1)); flow=m.group(2)
            b=B.setdefault(band,{'n':0,'shed':0,'ttft':[],'good':0})
            b['n']+=1
            if r['status']!='200':
                b['shed']+=1; continue
            t=float(r['ttft_ms']); lat=float(r['latency_ms']); n=int(r['predicted_n'] or 0)
            b['ttft'].append(t)
            tpot=(lat-t)/(n-1) if n>1 else 0
            if t<=1000 and tpot<=100: b['good']+=1
        out[(pol,seed)]=B
    return out
def mean(xs):
    xs=[x for x in xs if not math.isnan(x)]
    return sum(xs)/len(xs) if xs else float('nan')
def perpol(data, band, f):
    # mean over seeds of f(band stats)
    res={}
    for (pol,seed),B in data.items():
        if band in B: res.setdefault(pol,[]).append(f(B[band]))
    return {p:mean(v) for p,v in res.items()}
def table(base):
    for eng in ['llamacpp','vllm']:
        alone=load(f'{base}/{eng}-alone')
        a90=perpol(alone,10,lambda b:p90(b['ttft']))
        print(f'\n## {eng}: top band alone ({TOP}/s) TTFT p90 by policy: ' + ', '.join(f'{p} {v:.0f}' for p,v in sorted(a90.items())))
        print('| total rate | band-0 limit | top p90 ms (min–max over policies) | top p90 / alone (min / median / max) | policies within 1.2× | top p90 ≤ 1 s | top shed max | band 0 good / req | goodput |')
        print('|---|---|---|---|---|---|---|---|---|')
        for tot in TOTALS:
            for lim in LIMS:
                d=load(f'{base}/{eng}-{tot}-{lim}')
                t90=perpol(d,10,lambda b:p90(b['ttft']))
                ratio={p:t90[p]/a90[p] for p in t90}
                tshed=perpol(d,10,lambda b:b['shed']/b['n'])
                lowgood=perpol(d,0,lambda b:b['good']/b['n'])
                gp={}
                for (pol,seed),B in d.items():
                    gp.setdefault(pol,[]).append(sum(b['good'] for b in B.values())/sum(b['n'] for b in B.values()))
                gp={p:mean(v) for p,v in gp.items()}
                rs=sorted(ratio.values())
                print(f'| {tot} | {lim} | {min(t90.values()):.0f}–{max(t90.values()):.0f} | {rs[0]:.2f} / {st.median(rs):.2f} / {rs[-1]:.2f} | {sum(r<=1.2 for r in rs)}/{len(rs)} | {sum(v<=1000 for v in t90.values())}/{len(rs)} | {100*max(tshed.values()):.1f} % | {100*mean(list(lowgood.values())):.1f} % | {100*mean(list(gp.values())):.1f} % |')

def flat(base):
    for eng in ['llamacpp','vllm']:
        alone=perpol(load(f'{base}/{eng}-alone'),10,lambda b:p90(b['ttft']))
        c1,c2,c3=TOTALS[:3]
        print(f'\n{eng}: top-band p90 at 2x / 3x capacity against at capacity ({c1}/s), same setting')
        print(f'| band-0 limit | p90 @{c1} median (ms) | @{c2} / @{c1} (min / median / max) | @{c3} / @{c1} (min / median / max) | policies within 1.2× at both | @{c1} / alone median |')
        print('|---|---|---|---|---|---|')
        for lim in LIMS:
            t={tot:perpol(load(f'{base}/{eng}-{tot}-{lim}'),10,lambda b:p90(b['ttft'])) for tot in (c1,c2,c3)}
            r64=sorted(t[c2][p]/t[c1][p] for p in t[c1]); r96=sorted(t[c3][p]/t[c1][p] for p in t[c1])
            ok=sum(1 for p in t[c1] if t[c2][p]/t[c1][p]<=1.2 and t[c3][p]/t[c1][p]<=1.2)
            ra=sorted(t[c1][p]/alone[p] for p in t[c1])
            print(f'| {lim} | {st.median(t[c1].values()):.0f} | {r64[0]:.2f} / {st.median(r64):.2f} / {r64[-1]:.2f} | {r96[0]:.2f} / {st.median(r96):.2f} / {r96[-1]:.2f} | {ok}/{len(r64)} | {st.median(ra):.2f} |')

if __name__=='__main__':
    table(sys.argv[1])
    flat(sys.argv[1])
