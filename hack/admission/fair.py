"""Per-flow fairness of sim runs with admission (docs/notes/admission.md): for each run folder and
policy, the lowest light flow's (t1...) ratio to its max-min fair share, within each band, of the
good requests and of the admitted ones, t0's (the flooder's) band-0 ratios, the lowest over all
bands together, and goodput; means over seeds.

Usage: [STAGE=stage1@64] python3 hack/admission/fair.py DIR...  (STAGE: only that stage's rows)
"""
import csv, glob, sys, re, math
from collections import defaultdict
import os
STAGE = os.environ.get('STAGE', '')
from share import maxmin  # the max-min fair split of share.py (the same folder)
def run_stats(fn):
    g=defaultdict(lambda: defaultdict(float))  # (band, flow) -> n, adm, good
    pol=seed=None
    for r in csv.DictReader(open(fn)):
        pol,seed=r['policy'],r['seed']
        conv=r['conversation']
        if conv.startswith('warmup/'): continue
        if STAGE and not conv.startswith(STAGE + '/'): continue
        m=re.search(r'#band=(-?\d+)#flow=([^#]*)#wait_ms=([\d.]+)',conv)
        a=g[(m.group(1),m.group(2))]; a['n']+=1
        if r['status']=='200':
            a['adm']+=1
            t=float(r['ttft_ms']); lat=float(r['latency_ms']); n=int(r['predicted_n'] or 0)
            tpot=(lat-t)/(n-1) if n>1 else 0
            if t<=1000 and tpot<=100: a['good']+=1
    return pol,seed,g
def ratios(g, what, bands_sep=True):
    # returns {(band or '*', flow): ratio}
    out={}
    groups=defaultdict(dict)
    for (b,f),a in g.items():
        if bands_sep: groups[b][f]=a
        else:
            d=groups['*'].setdefault(f,defaultdict(float))
            for k,v in a.items(): d[k]+=v
    for b,fl in groups.items():
        names=sorted(fl); tot=sum(fl[n][what] for n in names)
        fair=maxmin(tot,[fl[n]['n'] for n in names])
        for n,fs in zip(names,fair): out[(b,n)]=fl[n][what]/fs if fs>0 else float('nan')
    return out
if __name__=='__main__':
    res=defaultdict(list)
    gps=defaultdict(list)
    for d in sys.argv[1:]:
        for fn in sorted(glob.glob(d+'/*-sim.csv')):
            pol,seed,g=run_stats(fn)
            rg=ratios(g,'good'); ra=ratios(g,'adm'); rall=ratios(g,'good',False)
            light=lambda r: min(v for (b,f),v in r.items() if f!='t0')
            res[(d,pol)].append((light(rg),light(ra),light(rall), rg.get(('0','t0')), ra.get(('0','t0'))))
            gps[(d,pol)].append(sum(a['good'] for a in g.values())/sum(a['n'] for a in g.values()))
    for k in sorted(res):
        v=res[k]; m=lambda i: sum(x[i] for x in v)/len(v)
        print(f"{k[0]:22s} {k[1]:12s} band-flow good min {m(0):.2f} (t0 b0 {m(3):.2f}) | band-flow admitted min {m(1):.2f} (t0 b0 {m(4):.2f}) | flow good min {m(2):.2f} | goodput {100*sum(gps[k])/len(gps[k]):.1f}%")
