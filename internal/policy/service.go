package policy

import "math"

// ServiceTime predicts the time, in ns, from dispatching a request of
// promptTokens prompt tokens to its first token on the best replica of v,
// from what predictive's model knows (predictive.go: the learned prefill
// rates, the settings' slots and report freshness): for each replica r that
// may be picked,
//
//	service(r) = queue(r) + prefill(r)
//	queue(r)   = q(r) × mean(r) ÷ pf(r)
//	prefill(r) = new ÷ pf(r),  new = max(1, prompt − Match(r))
//
// q(r) is the requests that must end before this one gets a slot, n −
// slots + 1 as in predictive's queue term, or, when the replica's fresh
// report says more requests wait there, those; mean(r) is the mean charge
// of the requests in flight (work ÷ n), n and work raised by what a fresh
// report counts beyond the router's own requests, as predictive does. pf
// is the replica's learned prefill rate, else the mean of the learned rates.
//
// Two differences from predictive's T(r): only what comes before the first
// token (no decode, no move), and no share of the batch: the learned prefill
// rate is measured under the replica's batching (llama.cpp's prompt_ms, or
// prompt tokens ÷ time to first token), so it already carries the slow-down
// of sharing the replica, and predictive's term for it, which prices every
// request in flight at the prefill rate, would count it again.
//
// The result is the least over the replicas (admission's Item.Service: the
// pick is not known yet); 0 when none may be picked, and 0 (unknown) while
// no replica has a learned prefill rate: predictive's prior is a guess for
// choosing between replicas, and a request shed on it would never let the
// pool learn (admission sheds nothing on a guess). Admission reads it from a
// view without a request (state.Table.LoadView: Match 0), so the whole
// prompt counts as new, an upper bound for a prompt partly cached. Pure and
// allocation-free.
func ServiceTime(p *Predictive, v *View, promptTokens int) int64 {
	learned := false
	for r := range v.Rows {
		if pf := v.Rows[r].Speed.Prefill; pf > 0 && finite(pf) {
			learned = true
			break
		}
	}
	if !learned {
		return 0
	}
	prior := p.prior(v) // the mean of the learned rates
	prompt := max(promptTokens, 1)
	best := -1.0
	for r := range v.Rows {
		if v.Excluded(r) {
			continue
		}
		if t := p.firstToken(v, r, prompt, prior.pf); best < 0 || t < best {
			best = t
		}
	}
	if !(best > 0) {
		return 0
	}
	return int64(min(best*1e9, math.MaxInt64/2))
}

// firstToken is service(r) in seconds (ServiceTime).
func (p *Predictive) firstToken(v *View, r, prompt int, prior float64) float64 {
	row := &v.Rows[r]
	pf := prior
	if row.Speed.Prefill > 0 && finite(row.Speed.Prefill) {
		pf = row.Speed.Prefill
	}
	newTok := float64(max(prompt-min(max(row.Match, 0), prompt), 1))
	n, work := float64(max(row.Load.Requests, 0)), float64(max(row.Load.Tokens, 0))
	waiting := 0.0
	if rep := &row.Reported; rep.HasQueue && p.fresh(v.Now, rep.At) {
		if extra := rep.Running + rep.Waiting - n; extra > 0 && finite(extra) {
			mean := newTok
			if n > 0 {
				mean = work / n
			}
			n, work = n+extra, work+extra*mean
		}
		if finite(rep.Waiting) {
			waiting = rep.Waiting
		}
	}
	q := max(n-float64(p.Slots)+1, waiting, 0)
	queue := 0.0
	if q > 0 && n > 0 {
		queue = q * work / n
	}
	return (queue + newTok) / pf
}
