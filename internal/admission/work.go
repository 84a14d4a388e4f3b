package admission

import (
	"math"

	"github.com/llm-ring/llm-ring/internal/policy"
)

// The work term: a capacity in time instead of tokens (docs/admission.md,
// "A capacity in time"). A replica's in-flight work, in seconds, is its
// in-flight token load priced at its learned prefill rate:
//
//	work(r) = Load.Tokens(r) ÷ pf(r)
//
// pf(r) is the replica's learned prefill rate (policy.Speed.Prefill:
// llama.cpp's prompt_per_second, else prompt tokens ÷ time to first token;
// measured under the replica's batching, so it falls as the replica fills),
// else the mean of the pool's learned rates (a new replica is most likely
// like the others); while no replica has one, the term is off (a guessed
// rate would shed on a guess). The replica scores 1 on this term when
// work(r) reaches WorkLimitNs: the work ahead of a new request would take
// longer than that share of its TTFT SLO. Being relative to the SLO and to
// the replica's own measured speed, one share may serve replicas of any
// speed and pool, where a token capacity is the replica's.

// WorkLimitFor is the in-flight work (ns) at which a replica scores 1 on
// the work term, for a default TTFT SLO of sloNs:
//
//	WorkLimitNs              when configured (> 0): it wins
//	⌊WorkShare × sloNs⌋ (≥1) when WorkShare > 0 and the SLO is known (> 0)
//	0 (the term off)         otherwise
func (s *Settings) WorkLimitFor(sloNs int64) int64 {
	if s.WorkLimitNs > 0 {
		return s.WorkLimitNs
	}
	if !(s.WorkShare > 0) || sloNs <= 0 {
		return 0
	}
	return max(int64(min(s.WorkShare*float64(sloNs), math.MaxInt64/2)), 1)
}

// SetSLO tells the controller the default TTFT SLO (ns; 0: none) its
// driver gives a request that names none: the work limit its saturation
// score uses (Settings().WorkLimitNs) becomes WorkLimitFor(sloNs) of the
// settings it was made with. A configured work_limit is kept. The
// headroom's target (WorkTargetFor, ledger_headroom.go) follows the SLO.
func (c *Controller) SetSLO(sloNs int64) {
	base := c.s
	base.WorkLimitNs = c.workLimit
	c.s.WorkLimitNs = base.WorkLimitFor(sloNs)
	c.ledger.head.setTarget(c.s.WorkTargetFor(sloNs))
}

// workTerm is row's work score: Load.Tokens ÷ rate in seconds, against
// the limit; 0 when the limit is off or no rate is known (rate is the
// pool's mean, used when the row has none of its own).
func workTerm(tokens int64, own, mean float64, limitNs int64) float64 {
	if limitNs <= 0 || tokens <= 0 {
		return 0
	}
	pf := mean
	if own > 0 && !math.IsInf(own, 0) {
		pf = own
	}
	if !(pf > 0) || math.IsInf(pf, 0) {
		return 0
	}
	return float64(tokens) / pf * 1e9 / float64(limitNs)
}

// meanPrefill is the mean of the learned prefill rates of the replicas
// of v that may be picked (0: none learned).
func meanPrefill(v *policy.View) float64 {
	sum, n := 0.0, 0
	for r := range v.Rows {
		if pf := v.Rows[r].Speed.Prefill; !v.Excluded(r) && pf > 0 && !math.IsInf(pf, 0) {
			sum += pf
			n++
		}
	}
	if n == 0 || math.IsInf(sum, 0) {
		return 0
	}
	return sum / float64(n)
}
