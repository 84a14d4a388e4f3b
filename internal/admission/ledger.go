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
//     rate = Σ processed ÷ |∪ [dispatch, first token]|
//
//     over the last LedgerWindow answers of those dispatched before its oldest request
//     still in flight (or of all, when that gives more): a rate of the whole replica, which does not fall as its batch
//     fills, where the per-request rate (prompt ÷ time to first token) does. The union,
//     not the sum of the intervals; and only the dispatches before the oldest one still
//     in flight, all of them answered: answers end out of their prefill order (outputs
//     differ in length), and a later dispatch still decoding did prefill work inside the
//     union that no answer has counted yet — measured over every answer, the rate falls
//     short of the replica's and the backlog, drained too slowly, grows without end;
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
// term is off); with WorkPrefill, the sum of its entries not yet past their first token
// (ledger_prefill.go). Everything is a function of the calls and their times: no clock.

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
	// The flow gate's in-flight counts (flowgate.go): per tagged flow and band.
	flows   map[flowKey]*flowCount
	bandsIn map[int]*bandFlight
	// model is the controller's work model: Service's work ahead is the
	// prefill model's (ledger_prefill.go) with WorkPrefill, else the backlog.
	model string
	// head is the score's headroom from the first tokens' times
	// (ledger_headroom.go; Settings.WorkTarget).
	head headroom
	// dec is the pool's TPOT against the requests in flight
	// (ledger_decode.go; Settings.DecodeShare).
	dec decodeFit
}

type ledgerEntry struct {
	rep   int
	seq   uint64 // its prefill's number at its replica
	start int64  // when it was dispatched
	// arrived is when it reached the router (Arrived; its dispatch until
	// told): the headroom's times run from it (ledger_headroom.go).
	arrived int64
	tokens  int64
	expect  int // the cached tokens the pick expected (Uncached's argument)
	// class is its band and flow, once tagged (Controller.Flow).
	class   flowKey
	classed bool
	// prefilled: its first token has come (First); its tokens no longer
	// count in its replica's prefilling sum.
	prefilled bool
	// decAt and decInt mark its decode's start (its first token, else its
	// dispatch) and its replica's count integral then (ledger_decode.go).
	decAt  int64
	decInt float64
}

// repWork is one replica's part of the ledger.
type repWork struct {
	name     string
	inflight int64 // Σ tokens of its entries
	// prefilling is Σ tokens of its entries not yet past their first
	// token (First): the prefill model's work (ledger_prefill.go).
	prefilling int64
	backlog    float64 // the fluid prefill backlog at at (tokens)
	at         int64
	recs       []prefill // its recent prefills in dispatch order; recs[0] is number base
	base       uint64
	rateNow    float64     // the throughput (tokens/s; 0: none)
	cached     CachedShare // answers that expected nothing cached
	hit        CachedShare // of the expected tokens, the share found cached
	// n is its entries in flight, nInt ∫ n dt (request·ns) up to nAt
	// (ledger_decode.go).
	n    int
	nInt float64
	nAt  int64
}

// prefill is one request's prefill: dispatched at start, first token at
// end (once answered), tokens processed.
type prefill struct {
	start, end int64
	tokens     int64
	state      uint8
}

// prefill states.
const (
	pending uint8 = iota // in flight
	done                 // answered with a prompt count and a first token
	dropped              // ended without one: counts for nothing
	// firstTok: its first token came (the prefill model, Ledger.First):
	// its tokens are the entry's estimate until its answer counts them.
	firstTok
)

// ledgerRecs bounds a replica's kept prefills (the oldest go first).
const ledgerRecs = 4 * LedgerWindow

// NewLedger returns an empty ledger.
func NewLedger() *Ledger {
	return &Ledger{reqs: map[uint64]ledgerEntry{}, byName: map[string]int{}, head: headroom{m: 1}}
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

// measure recomputes rateNow: Σ tokens ÷ the union of the prefills of the
// last LedgerWindow answered ones before the first still pending, or, when
// larger (that set is too old or too small: a request decoding for long
// holds it back), of the last LedgerWindow answered ones.
func (w *repWork) measure() {
	end := len(w.recs)
	for i, r := range w.recs {
		if r.state == pending {
			end = i
			break
		}
	}
	w.rateNow = max(unionRate(w.recs[:end]), unionRate(w.recs))
}

// unionRate is Σ tokens ÷ the union of the last LedgerWindow answered
// prefills of recs (sorted by start: insertion sort of at most
// LedgerWindow); 0 with fewer than LedgerMinAnswers.
func unionRate(recs []prefill) float64 {
	var iv [LedgerWindow]prefill
	n := 0
	for i := len(recs) - 1; i >= 0 && n < LedgerWindow; i-- {
		if recs[i].state == done || recs[i].state == firstTok {
			iv[n] = recs[i]
			n++
		}
	}
	for i := 1; i < n; i++ {
		for j := i; j > 0 && iv[j].start < iv[j-1].start; j-- {
			iv[j], iv[j-1] = iv[j-1], iv[j]
		}
	}
	var tokens, busy, last int64
	for i := 0; i < n; i++ {
		tokens += iv[i].tokens
		if s := max(iv[i].start, last); iv[i].end > s {
			busy += iv[i].end - s
		}
		last = max(last, iv[i].end)
	}
	if busy <= 0 || n < LedgerMinAnswers {
		return 0
	}
	return float64(tokens) / float64(busy) * 1e9
}

// record appends a prefill (the oldest kept go when there are too many)
// and returns its number.
func (w *repWork) record(p prefill) uint64 {
	if len(w.recs) >= ledgerRecs {
		w.recs = w.recs[1:]
		w.base++
	}
	w.recs = append(w.recs, p)
	return w.base + uint64(len(w.recs)-1)
}

// finish settles prefill number seq (if still kept) as answered at first
// with tokens processed, or dropped.
func (w *repWork) finish(seq uint64, start, first int64, tokens int, ok bool) {
	if seq < w.base || seq-w.base >= uint64(len(w.recs)) {
		return
	}
	r := &w.recs[seq-w.base]
	answered := ok && tokens > 0 && first > start
	if r.state != pending && (r.state != firstTok || !answered) {
		return // settled already; a first token's estimate stays unless an answer counts it
	}
	r.state = dropped
	if ok && tokens > 0 && first > start {
		r.start, r.end, r.tokens, r.state = start, first, int64(tokens), done
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
	w.prefilling += tokens
	w.backlog += float64(tokens)
	w.count(now)
	w.n++
	seq := w.record(prefill{start: now, state: pending})
	l.reqs[id] = ledgerEntry{rep: l.byName[replica], seq: seq, start: now, arrived: now, tokens: tokens, expect: max(expectCached, 0),
		decAt: now, decInt: w.nInt}
}

// Ended removes request id's entry (answered, failed or cancelled); false
// when it had none.
func (l *Ledger) Ended(id uint64, now int64) bool {
	e, ok := l.reqs[id]
	if !ok {
		return false
	}
	delete(l.reqs, id)
	l.unclass(e)
	w := l.reps[e.rep]
	l.settle(w, now)
	w.finish(e.seq, 0, 0, 0, false)
	w.measure()
	w.inflight -= e.tokens
	w.count(now)
	w.n--
	if !e.prefilled {
		w.prefilling -= e.tokens
	}
	w.backlog = min(w.backlog, float64(w.inflight))
	return true
}

// Answered ends request id's entry (as Ended does) and learns its answer:
// its prefill, dispatched at start (the driver's clock, ns) with its first
// token at first, processed prompt tokens; cached, the answer's cached
// count (< 0: not reported), against what its pick expected cached,
// teaches the replica how far to trust an expectation, or, when it
// expected none, its cached share. An answer without a prompt count or a
// first token teaches no rate.
func (l *Ledger) Answered(id uint64, replica string, start, first int64, cached, processed int, now int64) {
	e, ok := l.reqs[id]
	l.dec.lastOK = false
	if !ok {
		l.Learn(replica, start, first, cached, processed, now)
		return
	}
	w := l.reps[e.rep]
	l.settle(w, now)
	w.finish(e.seq, start, first, processed, true)
	x := l.meanCount(e, now) // its decode's mean count, for the Decoded that follows (ledger_decode.go)
	l.Ended(id, now)
	l.dec.last, l.dec.lastOK = x, x > 0
	switch {
	case cached < 0:
	case e.expect > 0:
		got := min(cached, e.expect)
		w.hit.Learn(got, e.expect-got)
	default:
		w.cached.Learn(cached, processed)
	}
}

// Learn adds an answer of replica that had no entry (nothing in flight
// known of it), as Answered learns one that expected nothing cached.
func (l *Ledger) Learn(replica string, start, first int64, cached, processed int, now int64) {
	w := l.rep(replica)
	l.settle(w, now)
	if cached >= 0 {
		w.cached.Learn(cached, processed)
	}
	if processed > 0 && first > start {
		w.record(prefill{start: start, end: first, tokens: int64(processed), state: done})
		w.measure()
	}
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
// backlog; WorkInflight: the in-flight sum; WorkPrefill: the sum of those
// not yet past their first token) at its rate, or the pool's mean
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
	switch model {
	case WorkBacklog:
		tokens = w.backlogAt(now, rate)
	case WorkPrefill:
		tokens = float64(w.prefilling)
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
// to first token (ns): on the best of v's replicas that may be picked, the
// prefill work ahead at v.Now (its backlog; with WorkPrefill, the tokens of
// its requests not yet past their first token) and the request's uncached
// prompt (Uncached, nothing expected) at its rate (the pool's mean for one
// without a rate):
//
//	service = min over r of (ahead(r) + Uncached(r, prompt)) ÷ rate(r)
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
		best = min(best, (l.ahead(name, v.Now)+float64(l.Uncached(name, prompt, 0)))/rate*1e9)
	}
	if math.IsInf(best, 0) {
		return 0
	}
	return int64(min(best, math.MaxInt64/2))
}

// LedgerService reports whether the controller's work model is one of the
// ledger's: its drivers predict Item.Service with Ledger.Service.
func (c *Controller) LedgerService() bool { return !c.s.workCharges() }
