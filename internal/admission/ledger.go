package admission

import (
	"math"

	"github.com/llm-ring/llm-ring/internal/policy"
)

// The ledger: the work term's inputs, kept by admission itself (docs/admission.md, "The
// work ledger"). Per replica:
//
//   - the uncached prompt tokens of the requests in flight there, one entry per request
//     (Dispatched, Ended): the pick's expected cached tokens do not count as work;
//   - its prefill throughput: prompt tokens processed per second while the replica had a
//     prompt to process, from the answers' counts and timings (Learn):
//
//     rate = Σ processed ÷ |∪ [dispatch, first token]|   over its last LedgerWindow answers
//
//     a rate of the whole replica, which does not fall as its batch fills, where the
//     per-request rate (prompt ÷ time to first token) does. The union, not the sum of the
//     intervals, and over a window sorted by dispatch: answers end out of their prefill
//     order (outputs differ in length), and a running "covered until" would count the
//     busy time of a late answer as already seen;
//   - what of the pick's expectation its answers found cached: cached ÷ expected (at most
//     1) of its answers that expected some (a CachedShare of the expected tokens), and its
//     cached share cached ÷ (cached + processed) of those that expected none: the part of
//     an expectation, or of a prompt, taken as cached (Uncached). Placement memory expects
//     a conversation's whole last prompt where a slot engine may have lost it (llama.cpp
//     keeps a prefix per slot): the ratio learns how far to trust it;
//   - its prefill backlog: a fluid queue that grows by each dispatched request's uncached
//     tokens and drains at the rate, never above the in-flight entries' sum (WorkBacklog).
//
// The work of a replica (Work) is its backlog, or with WorkInflight its in-flight sum,
// divided by its rate (the mean of the pool's rates for a replica without one; none: the
// term is off). Everything is a function of the calls and their times: no clock.

// LedgerWindow is the number of a replica's recent answers its throughput
// is measured over; LedgerMinAnswers the least that make a rate (the
// first answers after a cold start waited behind requests that have not
// answered yet, whose tokens the window lacks: too few answers make the
// rate far too low).
const (
	LedgerWindow     = 64
	LedgerMinAnswers = 8
)

// Ledger is a pool's work ledger. The zero value is not usable: NewLedger.
type Ledger struct {
	reqs   map[uint64]ledgerEntry
	byName map[string]int
	reps   []*repWork // in order of first sight: every sum over them is in this order
}

type ledgerEntry struct {
	rep    int
	tokens int64
	expect int // the cached tokens the pick expected (Uncached's argument)
}

// repWork is one replica's part of the ledger.
type repWork struct {
	name     string
	inflight int64   // Σ tokens of its entries
	backlog  float64 // the fluid prefill backlog at at (tokens)
	at       int64
	win      [LedgerWindow]prefill // the last answers' prefills (a ring)
	winN     int
	winPos   int
	rateNow  float64     // the throughput over win (tokens/s; 0: none)
	cached   CachedShare // answers that expected nothing cached
	hit      CachedShare // of the expected tokens, the share found cached
}

// prefill is one answer's prefill: dispatched at start, first token at end.
type prefill struct {
	start, end int64
	tokens     int64
}

// NewLedger returns an empty ledger.
func NewLedger() *Ledger {
	return &Ledger{reqs: map[uint64]ledgerEntry{}, byName: map[string]int{}}
}

func (l *Ledger) rep(name string) *repWork {
	i, ok := l.byName[name]
	if !ok {
		i = len(l.reps)
		l.byName[name] = i
		l.reps = append(l.reps, &repWork{name: name})
	}
	return l.reps[i]
}

// rate is the replica's own prefill throughput (tokens/s; 0: none yet).
func (w *repWork) rate() float64 { return w.rateNow }

// measure recomputes rateNow from the window: Σ tokens ÷ the union of the
// prefills (sorted by start; insertion sort of at most LedgerWindow).
func (w *repWork) measure() {
	var iv [LedgerWindow]prefill
	n := copy(iv[:], w.win[:w.winN])
	for i := 1; i < n; i++ {
		for j := i; j > 0 && iv[j].start < iv[j-1].start; j-- {
			iv[j], iv[j-1] = iv[j-1], iv[j]
		}
	}
	var tokens, busy, end int64
	for i := 0; i < n; i++ {
		tokens += iv[i].tokens
		if s := max(iv[i].start, end); iv[i].end > s {
			busy += iv[i].end - s
		}
		end = max(end, iv[i].end)
	}
	w.rateNow = 0
	if busy > 0 && n >= LedgerMinAnswers {
		w.rateNow = float64(tokens) / float64(busy) * 1e9
	}
}

// meanRate is the mean of the known rates (0: none).
func (l *Ledger) meanRate() float64 {
	sum, n := 0.0, 0
	for _, w := range l.reps {
		if r := w.rate(); r > 0 {
			sum, n = sum+r, n+1
		}
	}
	if n == 0 {
		return 0
	}
	return sum / float64(n)
}

// drainRate is the rate w's backlog drains at: its own, else the pool's mean.
func (l *Ledger) drainRate(w *repWork) float64 {
	if r := w.rate(); r > 0 {
		return r
	}
	return l.meanRate()
}

// backlogAt is w's backlog at now, drained at rate since it was last settled.
func (w *repWork) backlogAt(now int64, rate float64) float64 {
	b := w.backlog
	if now > w.at && rate > 0 {
		b = max(0, b-rate*float64(now-w.at)/1e9)
	}
	return min(b, float64(w.inflight))
}

// settle drains w's backlog up to now (before its rate or entries change).
// While no rate is known nothing drains and the backlog's start is kept:
// the replica has worked on it since then, so the first rate learned
// drains it from there (the fluid queue has been busy all along).
func (l *Ledger) settle(w *repWork, now int64) {
	rate := l.drainRate(w)
	if rate <= 0 && w.backlog > 0 {
		return
	}
	w.backlog = w.backlogAt(now, rate)
	w.at = max(w.at, now)
}

// Uncached is the work of a prompt of prompt tokens routed to replica: the
// prompt less the cached tokens the pick expected there (expectCached)
// times the share of expectations its answers found true (all of it before
// any), or, when it expected none, less the replica's recent cached share
// of such answers; at least 1.
func (l *Ledger) Uncached(replica string, prompt, expectCached int) int64 {
	i, known := l.byName[replica]
	switch {
	case expectCached > 0 && known && l.reps[i].hit.seen:
		return int64(max(1, prompt-int(float64(min(expectCached, prompt))*l.reps[i].hit.Share()+0.5)))
	case expectCached > 0:
		return int64(max(1, prompt-expectCached))
	case known:
		return int64(l.reps[i].cached.New(prompt))
	}
	return int64(max(1, prompt))
}

// Dispatched records request id in flight on replica with tokens of work
// (Uncached of its prompt and expectCached) at now. An id already in flight
// is ended first (a driver that reuses ids never counts one twice).
func (l *Ledger) Dispatched(id uint64, replica string, tokens int64, expectCached int, now int64) {
	l.Ended(id, now)
	w := l.rep(replica)
	l.settle(w, now)
	tokens = max(tokens, 0)
	w.inflight += tokens
	w.backlog += float64(tokens)
	l.reqs[id] = ledgerEntry{rep: l.byName[replica], tokens: tokens, expect: max(expectCached, 0)}
}

// Ended removes request id's entry (answered, failed or cancelled); false
// when it had none.
func (l *Ledger) Ended(id uint64, now int64) bool {
	e, ok := l.reqs[id]
	if !ok {
		return false
	}
	delete(l.reqs, id)
	w := l.reps[e.rep]
	l.settle(w, now)
	w.inflight -= e.tokens
	w.backlog = min(w.backlog, float64(w.inflight))
	return true
}

// Answered ends request id's entry (Ended) and learns its answer (Learn),
// with what its pick expected cached: the answer's cached tokens against
// that expectation teach the replica how far to trust one.
func (l *Ledger) Answered(id uint64, replica string, start, first int64, cached, processed int, now int64) {
	e, ok := l.reqs[id]
	l.Ended(id, now)
	if ok && e.expect > 0 && cached >= 0 {
		got := min(cached, e.expect)
		l.rep(replica).hit.Learn(got, e.expect-got)
		l.learn(replica, start, first, -1, processed, now)
		return
	}
	l.Learn(replica, start, first, cached, processed, now)
}

// Learn adds an answer of replica that expected nothing cached: its prompt
// was dispatched at start and its first token came at first (the driver's
// clock, ns); cached and processed are the answer's prompt counts (cached
// < 0: not reported, no share learned). An answer without a prompt count or
// a first token teaches no rate.
func (l *Ledger) Learn(replica string, start, first int64, cached, processed int, now int64) {
	l.learn(replica, start, first, cached, processed, now)
}

// learn is Learn; cached < 0 leaves the cached share alone.
func (l *Ledger) learn(replica string, start, first int64, cached, processed int, now int64) {
	w := l.rep(replica)
	l.settle(w, now)
	if cached >= 0 {
		w.cached.Learn(cached, processed)
	}
	if processed <= 0 || first <= start {
		return
	}
	w.win[w.winPos] = prefill{start: start, end: first, tokens: int64(processed)}
	w.winPos = (w.winPos + 1) % LedgerWindow
	w.winN = min(w.winN+1, LedgerWindow)
	w.measure()
}

// InFlight is the number of requests with an entry.
func (l *Ledger) InFlight() int { return len(l.reqs) }

// Tokens is replica's in-flight sum and its backlog at now (tokens).
func (l *Ledger) Tokens(replica string, now int64) (inflight int64, backlog float64) {
	i, ok := l.byName[replica]
	if !ok {
		return 0, 0
	}
	w := l.reps[i]
	return w.inflight, w.backlogAt(now, l.drainRate(w))
}

// Rate is replica's prefill throughput (tokens/s; 0: none learned).
func (l *Ledger) Rate(replica string) float64 {
	if i, ok := l.byName[replica]; ok {
		return l.reps[i].rate()
	}
	return 0
}

// Work is replica's work at now in ns, the model's tokens (WorkBacklog: the
// backlog; WorkInflight: the in-flight sum) at its rate, or the pool's mean
// rate meanRate when it has none; ok false while no rate is known.
func (l *Ledger) Work(replica string, model string, now int64, meanRate float64) (ns float64, ok bool) {
	var w *repWork
	if i, found := l.byName[replica]; found {
		w = l.reps[i]
	}
	rate := meanRate
	if w != nil && w.rate() > 0 {
		rate = w.rate()
	}
	if !(rate > 0) || math.IsInf(rate, 0) {
		return 0, false
	}
	if w == nil {
		return 0, true
	}
	tokens := float64(w.inflight)
	if model == WorkBacklog {
		tokens = w.backlogAt(now, rate)
	}
	return tokens / rate * 1e9, true
}

// meanRateOf is the mean of the ledger's rates of v's replicas that may be
// picked (0: none known).
func (l *Ledger) meanRateOf(v *policy.View) float64 {
	sum, n := 0.0, 0
	for r := range v.Rows {
		if v.Excluded(r) {
			continue
		}
		if rate := l.Rate(v.Names[r]); rate > 0 {
			sum, n = sum+rate, n+1
		}
	}
	if n == 0 {
		return 0
	}
	return sum / float64(n)
}

// Share is replica's recent cached share of prompt tokens (0: none seen).
func (l *Ledger) Share(replica string) float64 {
	if i, ok := l.byName[replica]; ok {
		return l.reps[i].cached.Share()
	}
	return 0
}

// Has reports whether request id has an entry (is in flight).
func (l *Ledger) Has(id uint64) bool {
	_, ok := l.reqs[id]
	return ok
}

// Service is the ledger's prediction of a new request's time from dispatch
// to first token (ns): on the best of v's replicas that may be picked, its
// backlog at v.Now and the request's uncached prompt (Uncached, nothing
// expected) at its rate (the pool's mean for one without a rate):
//
//	service = min over r of (backlog(r) + Uncached(r, prompt)) ÷ rate(r)
//
// 0 while no rate is known (nothing is predicted on a guess). With a
// ledger work model the drivers use it instead of policy.ServiceTime: the
// same backlog and rate as the work term, where ServiceTime prices the
// queue at the per-request rates learned under load, which, once a flood
// has taught them, shed every request on arrival and, with nothing
// admitted, are never corrected.
func (l *Ledger) Service(v *policy.View, prompt int) int64 {
	mean := l.meanRateOf(v)
	best := math.Inf(1)
	for r := range v.Rows {
		if v.Excluded(r) {
			continue
		}
		name := v.Names[r]
		rate := mean
		if own := l.Rate(name); own > 0 {
			rate = own
		}
		if !(rate > 0) {
			continue
		}
		_, bl := l.Tokens(name, v.Now)
		best = min(best, (bl+float64(l.Uncached(name, prompt, 0)))/rate*1e9)
	}
	if math.IsInf(best, 0) {
		return 0
	}
	return int64(min(best, math.MaxInt64/2))
}

// LedgerService reports whether the controller's work model is one of the
// ledger's: its drivers predict Item.Service with Ledger.Service.
func (c *Controller) LedgerService() bool { return !c.s.workCharges() }
