package admission

import "math"

// The decode term (Settings.DecodeShare; docs/admission.md "decode_share"):
// the prefill model counts the prompts ahead of a new request, but a slot
// engine (llama.cpp) steps every busy slot together, its prefill chunks
// inside the same steps, so the time per output token of the requests it
// admits grows with how many it runs — on the llama.cpp model at twice
// capacity the admitted requests' TPOT reached the 100 ms SLO while their
// first tokens were in time. The headroom's decode guard (Decoded,
// ledger_headroom.go) only takes a loosened multiplier back to 1, never
// below the configured thresholds, and is off without a work target.
//
// The ledger learns the pool's time per output token as a function of a
// replica's requests in flight, from the answers themselves: for each
// answer the mean number x of requests in flight on its replica over its
// decode (from its first token to its end: the time integral of the
// replica's count, kept exactly), and its TPOT y (Decoded, which the drivers
// call right after the answer's Answered). A weighted least-squares line
// over the recent answers (each older one's weight × (1 − 1/LedgerWindow)
// per answer):
//
//	tpot(x) = a + b·x,   b = max(cov(x, y) / var(x), 0),   a = ȳ − b·x̄
//
// or, while the answers' counts spread by less than one request (var(x) <
// 1), the proportional tpot(x) = ȳ·x/x̄, which overestimates above x̄ (an
// engine's step has a fixed part). A replica's decode score is the
// predicted TPOT with one more request than it has in flight, against the
// share of the TPOT SLO:
//
//	decode(r) = tpot(n(r) + 1) ÷ (DecodeShare × TPOT SLO)
//
// n(r) its ledger entries (every request in flight there: on a slot engine
// each decodes once its prompt is in). The pool's score is the larger of
// the mean of the replicas' other scores and the mean of their decode
// terms (saturation.go): the pool is saturated for a band when its mean
// predicted TPOT reaches the band's limit × the share of the SLO. The
// line is the pool's (its replicas are taken to be alike, as the TPOT SLO
// is the pool's); the count is the replica's. The term is off until LedgerMinAnswers answers
// have taught the line, without a TPOT SLO (SetTPOT) and with DecodeShare
// 0. The headroom (WorkTarget) does not divide it: the multiplier holds
// first tokens, not decode steps. The line fits what the engine did,
// prefill chunks included: where admission holds the prefill work at its
// limit, the prefill steps interleaved with decoding grow with the
// replica's count too, and the slope carries them.

// With DecodeQuantile q the limit also follows the outcome: a gain g on
// it, g ← g · e^(−step) for an answer whose TPOT is over the SLO and
// g ← g · e^(step·(1−q)/q) for one within (the headroom's quantile tracker,
// ledger_headroom.go, with its own step decodeStep), g in [1/headroomMax,
// headroomMax]: at equilibrium a share 1 − q of the answers misses the
// SLO. The line predicts a mean where the SLO is per request: where fewer
// than 1 − q of the answers miss, the limit loosens (up to 4 × the share),
// where more miss, it tightens (down to a quarter of it). The step is 0.2,
// four times the headroom's: a pool answers 10–30 requests a second, and
// with q = 0.95 the headroom's 0.05 moved the gain by 5 % a second at
// most, too slow for a 20 s stage (measured: no better than no tracker).

// decodeFit is the pool's weighted sums of (x, y) = (mean requests in
// flight over an answer's decode, its TPOT in ns).
type decodeFit struct {
	w, x, y, xx, xy float64
	n               int // answers learned (capped at LedgerWindow)
	// last is the x of the answer Answered ended last, for the Decoded
	// that follows it (lastOK: not yet consumed).
	last   float64
	lastOK bool
	// q is Settings.DecodeQuantile (0: no tracker), g the limit's gain
	// (0 until the first update: 1).
	q, g float64
}

// gain is the limit's gain (1 without a tracker or before an answer).
func (f *decodeFit) gain() float64 {
	if !(f.g > 0) {
		return 1
	}
	return f.g
}

// track updates the gain with one answer's TPOT against the SLO (ns).
func (f *decodeFit) track(tpot, slo int64) {
	if !(f.q > 0) || slo <= 0 {
		return
	}
	f.g = quantileStep(f.gain(), tpot > slo, decodeStep, decodeStep*(1-f.q)/f.q, 1/headroomMax, headroomMax)
}

// decodeStep is the gain's step per answer over the SLO (above).
const decodeStep = 0.2

// decodeDecay is the weight an older answer keeps per new one.
const decodeDecay = 1 - 1.0/LedgerWindow

// learn adds one answer: x requests in flight over its decode, y its TPOT.
func (f *decodeFit) learn(x, y float64) {
	if !(x > 0) || !(y >= 0) || math.IsInf(x, 0) || math.IsInf(y, 0) {
		return
	}
	f.w, f.x, f.y = f.w*decodeDecay+1, f.x*decodeDecay+x, f.y*decodeDecay+y
	f.xx, f.xy = f.xx*decodeDecay+x*x, f.xy*decodeDecay+x*y
	f.n = min(f.n+1, LedgerWindow)
}

// predict is the TPOT (ns) at x requests in flight; ok false while fewer
// than LedgerMinAnswers answers are known.
func (f *decodeFit) predict(x float64) (ns float64, ok bool) {
	if f.n < LedgerMinAnswers || !(f.w > 0) {
		return 0, false
	}
	mx, my := f.x/f.w, f.y/f.w
	v := f.xx/f.w - mx*mx
	if !(v >= 1) {
		if !(mx > 0) {
			return 0, false
		}
		return my * x / mx, true
	}
	b := max((f.xy/f.w-mx*my)/v, 0)
	return max(my+b*(x-mx), 0), true
}

// count advances replica w's integral of its requests in flight to now.
func (w *repWork) count(now int64) {
	if now > w.nAt {
		w.nInt += float64(w.n) * float64(now-w.nAt)
		w.nAt = now
	}
}

// meanCount is the mean number of requests in flight on e's replica from
// e's decode mark (its first token, else its dispatch) to now; 0 when no
// time has passed.
func (l *Ledger) meanCount(e ledgerEntry, now int64) float64 {
	w := l.reps[e.rep]
	w.count(now)
	if now <= e.decAt {
		return 0
	}
	return (w.nInt - e.decInt) / float64(now-e.decAt)
}

// DecodeTPOT is the ledger's predicted time per output token (ns) on
// replica with one more request than it has in flight (the line above);
// ok false while the line is unknown.
func (l *Ledger) DecodeTPOT(replica string, pending float64) (ns float64, ok bool) {
	n := 0
	if i, found := l.byName[replica]; found {
		n = l.reps[i].n
	}
	return l.dec.predict(float64(n) + max(pending, 0) + 1)
}

// decodeTerm is replica's decode score (0: the term off or unknown).
func decodeTerm(led *Ledger, s *Settings, replica string, pending float64) float64 {
	if led == nil || !(s.DecodeShare > 0) || led.head.tpot <= 0 {
		return 0
	}
	ns, ok := led.DecodeTPOT(replica, pending)
	if !ok {
		return 0
	}
	return ns / (s.DecodeShare * float64(led.head.tpot) * led.dec.gain())
}

// DecodeGain is the decode limit's gain (1: none; DecodeQuantile).
func (l *Ledger) DecodeGain() float64 { return l.dec.gain() }

// DecodeAnswers is the number of answers the decode line learned from
// (capped at LedgerWindow).
func (l *Ledger) DecodeAnswers() int { return l.dec.n }
