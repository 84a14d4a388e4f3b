package policy

import "math"

// ServiceTime predicts the time, in ns, from dispatching a request of
// promptTokens prompt tokens to its first token on the best replica of v,
// with predictive's model (predictive.go) and settings p: for each replica
// r that may be picked,
//
//	service(r) = queue(r) + prefill(r)
//	queue(r)   = queueTokens(n, work, new) ÷ pf(r)
//	prefill(r) = new ÷ pf(r),  new = max(1, prompt − Match(r))
//
// the parts of predictive's T(r) that come before the first token: the
// work in flight there that delays this prompt (the requests that must
// end before it gets a slot in full, the others sharing the replica up to
// this prompt's own work — its prefill only: the decode comes after the
// first token) and its prefill, at the replica's learned prefill rate, else
// the mean of the learned rates; work and n include what a fresh report
// counts beyond the router's own in-flight requests, as predictive's do.
// No decode and no move term. The result is the least over the replicas
// (admission's Item.Service: the pick is not known yet), 0 when none may be
// picked, and 0 (unknown) while no replica has a learned prefill rate:
// predictive's prior is a guess for picking between replicas, and a request
// shed on it would never let the pool learn (admission sheds nothing on a
// guess; its expected wait is 0 before the first admission too).
//
// Admission reads it from a view without a request (state.Table.LoadView:
// Match 0), so the whole prompt counts as new: an upper bound for a prompt
// that is partly cached. Pure and allocation-free.
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
	req := Request{PromptTokens: max(promptTokens, 1), Last: -1} // output 0: up to the first token
	prior := p.prior(v)                                          // the mean of the learned rates
	best := -1.0
	for r := range v.Rows {
		if v.Excluded(r) {
			continue
		}
		x := p.predict(&req, v, r, -1, 0, &prior)
		if t := x.queue() + x.prefill(); best < 0 || t < best {
			best = t
		}
	}
	if !(best > 0) {
		return 0
	}
	return int64(min(best*1e9, math.MaxInt64/2))
}
