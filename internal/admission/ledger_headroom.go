package admission

import "math"

// The headroom (Settings.WorkTarget; docs/admission.md "work_target"): the
// saturation score's thresholds (queue_threshold, kv_threshold, the work
// limit) are proxies for whether a new request's first token comes in
// time. An engine that batches its prefills (a paged engine's chunked
// prefill next to its decoding) keeps its first tokens fast with far more
// work ahead of them than a slot engine does; a limit that holds the slot
// engine's TTFT sheds what the paged one would have served. So the ledger
// measures the outcome itself: each admitted request's time to first
// token, from its arrival at the router (Arrived: its wait in the queue
// included; from its dispatch when the driver does not tell it) to its
// first token (First), and keeps a multiplier m ≥ 1 of the score's
// thresholds such that the headroomQuantile of those times sits at the
// target T = WorkTarget × the default TTFT SLO:
//
//	a time > T:  m ← m · e^(−step)
//	a time ≤ T:  m ← m · e^(step · (1−q)/q)        (q = headroomQuantile)
//	m clamped to [1, headroomMax]
//
// the stochastic-approximation tracker of a quantile (at equilibrium a
// share 1−q of the times is above T); the score is divided by m
// (Controller.Score), except a stale replica's 1. Never tighter than the
// configured thresholds (m ≥ 1): where the times are above T the
// configured setting is what admits. With no target (0) m stays 1. The
// SLO shedding (Item.Service, the deadline) is unchanged. An answer whose
// time per output token is over the TPOT SLO takes m down as a late first
// token does (the decode guard, Decoded; SetTPOT).

// The tracker's constants: the quantile the target holds (the issue's
// TTFT p90), the step per time over the target (5 %: from headroomMax
// back to 1 in 28 late first tokens), and the largest multiplier.
const (
	headroomQuantile = 0.9
	headroomStep     = 0.05
	headroomMax      = 4.0
)

// headroom is a ledger's multiplier state.
type headroom struct {
	target int64   // T (ns); 0: off
	tpot   int64   // the TPOT SLO (ns; 0: no decode guard)
	m      float64 // the multiplier (1 until a time is seen)
}

// setTarget sets T (ns; ≤ 0: off, the multiplier back to 1).
func (h *headroom) setTarget(ns int64) {
	h.target = max(ns, 0)
	if h.target == 0 || h.m < 1 {
		h.m = 1
	}
}

// observe updates the multiplier with one time to first token (from the
// arrival, or the dispatch when none was told).
func (h *headroom) observe(ns int64) {
	if h.target <= 0 {
		return
	}
	const up = headroomStep * (1 - headroomQuantile) / headroomQuantile
	h.m = quantileStep(h.m, ns > h.target, headroomStep, up, 1, headroomMax)
}

// quantileStep is one step of a multiplicative quantile tracker: g falls
// by e^(−down) for a time over its target and rises by e^(up) for one
// within; with up = down·(1−q)/q a share 1 − q is over at equilibrium. The
// result is kept in [lo, hi]. The headroom (q: the TTFT p90) and the
// decode term's gain (q: decode_quantile, ledger_decode.go) both track
// with it.
func quantileStep(g float64, over bool, down, up, lo, hi float64) float64 {
	if over {
		g *= math.Exp(-down)
	} else {
		g *= math.Exp(up)
	}
	return min(max(g, lo), hi)
}

// decoded is the decode guard: an answer whose time per output token was
// over the TPOT SLO counts as a late first token (m ← m · e^(−step)); one
// within it changes nothing. The first token alone does not see a decode
// batch too large to step in time (a loosened KV term lets it in): the
// guard takes m down when answers say so. Later than a first token (an
// answer ends seconds after it), so it only shrinks m, never grows it.
func (h *headroom) decoded(tpotNs int64) {
	if h.target <= 0 || h.tpot <= 0 || tpotNs <= h.tpot {
		return
	}
	h.m = max(h.m*math.Exp(-headroomStep), 1)
}

// Decoded tells the ledger an answer's time per output token (ns: from its
// first token to its end over its output tokens after the first; the
// driver calls it for answers of more than one token, right after that
// answer's Answered): the headroom's decode guard, and the decode term's
// line (ledger_decode.go), which pairs it with the requests in flight over
// the decode of the answer Answered ended last.
func (l *Ledger) Decoded(tpotNs int64) {
	l.head.decoded(tpotNs)
	l.dec.track(tpotNs, l.head.tpot)
	if l.dec.lastOK {
		l.dec.learn(l.dec.last, float64(tpotNs))
		l.dec.lastOK = false
	}
}

// SetTPOT tells the controller the default TPOT SLO (ns; 0: none) its
// driver gives requests: with a work target, an answer over it takes the
// headroom down (Ledger.Decoded).
func (c *Controller) SetTPOT(tpotNs int64) { c.ledger.head.tpot = max(tpotNs, 0) }

// Headroom is the multiplier of the score's thresholds (1: none; see
// above).
func (l *Ledger) Headroom() float64 { return max(l.head.m, 1) }

// WorkTargetFor is the target T (ns) for a default TTFT SLO of sloNs:
// ⌊WorkTarget × sloNs⌋ (≥ 1), or 0 (off) without a target or an SLO.
func (s *Settings) WorkTargetFor(sloNs int64) int64 {
	if !(s.WorkTarget > 0) || sloNs <= 0 {
		return 0
	}
	return max(int64(min(s.WorkTarget*float64(sloNs), math.MaxInt64/2)), 1)
}

// Target is the ledger's target T (ns; 0: off).
func (l *Ledger) Target() int64 { return l.head.target }

// Arrived tells the ledger when request id, in flight, reached the router
// (at ≤ its dispatch; the driver's clock): its time to first token runs
// from then. False when it has no entry or its first token came already.
func (l *Ledger) Arrived(id uint64, at int64) bool {
	e, ok := l.reqs[id]
	if !ok || e.prefilled {
		return false
	}
	e.arrived = min(at, e.start)
	l.reqs[id] = e
	return true
}
