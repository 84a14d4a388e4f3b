package admission

// The prefill model (WorkPrefill; docs/admission.md "work_model"): a
// replica's work is the uncached prompt tokens of its requests whose first
// token has not come yet, at its prefill throughput:
//
//	work(r) = Σ tokens of r's entries not past their first token ÷ rate(r)
//
// The drivers say when a request's first token comes (First): the router's
// observer at the answer's first byte (internal/router/observe.go), the
// simulator at the model's first-token event, at its virtual time. Its
// prefill then leaves the work at once, where the backlog model drains a
// fluid queue at the learned rate (which does not see when a slot engine's
// prefill of a missed prompt ends) and the in-flight model keeps it until
// the answer ends. The entry itself stays until the answer ends (Ended,
// Answered): the flow gate's counts and the in-flight sum are the other
// models' and unchanged. The rate learns from the first token too: the
// prefill [dispatch, first token] is over then, with the entry's tokens
// (the estimate; its answer's count replaces them when it ends), so that a
// rate is known after LedgerMinAnswers first tokens instead of as many
// answers — on long outputs the answers come 5–12 s after a cold start,
// and until then the work term is off and everything is admitted. The
// other models learn from answers only, as before.
//
// Which cached figure of the pick a request's work leaves out (Expected) is
// a setting of its own, WorkCached: placement memory's expectation
// (Ticket.ExpectCached), the prefix index's match on the picked replica
// (Ticket.Match), or the smaller.

// First records that request id's first token came at now: its tokens
// leave its replica's prefilling sum, its time from arrival (Arrived)
// teaches the headroom (Settings.WorkTarget) and, with WorkPrefill, its prefill
// teaches the rate. False when it has no entry or its first token came
// already (a driver may tell it twice; it counts once).
func (l *Ledger) First(id uint64, now int64) bool {
	e, ok := l.reqs[id]
	if !ok || e.prefilled {
		return false
	}
	e.prefilled = true
	w := l.reps[e.rep]
	w.count(now)
	e.decAt, e.decInt = now, w.nInt // its decode starts (ledger_decode.go)
	l.reqs[id] = e
	l.head.observe(now - e.arrived) // its time to first token (ledger_headroom.go)
	w.prefilling -= e.tokens
	if l.model == WorkPrefill {
		l.settle(w, now)
		w.firstAt(e.seq, now, e.tokens)
		w.measure()
	}
	return true
}

// firstAt settles prefill number seq (if kept and in flight) as over at
// first with tokens, the entry's estimate (state firstTok).
func (w *repWork) firstAt(seq uint64, first, tokens int64) {
	if seq < w.base || seq-w.base >= uint64(len(w.recs)) {
		return
	}
	if r := &w.recs[seq-w.base]; r.state == pending && tokens > 0 && first > r.start {
		r.end, r.tokens, r.state = first, tokens, firstTok
	}
}

// Prefilling is replica's sum of the tokens of its entries not yet past
// their first token (0: none, or an unknown replica).
func (l *Ledger) Prefilling(replica string) int64 {
	if i, ok := l.byName[replica]; ok {
		return l.reps[i].prefilling
	}
	return 0
}

// ahead is the prefill work ahead of a new request on replica at now
// (tokens): with WorkPrefill its prefilling sum, else its backlog.
func (l *Ledger) ahead(replica string, now int64) float64 {
	if l.model == WorkPrefill {
		return float64(l.Prefilling(replica))
	}
	_, bl := l.Tokens(replica, now)
	return bl
}

// Expected is the cached tokens the ledger takes a routed request to have
// on its replica, by Settings.WorkCached, from the pick's two figures:
// placement memory's expectation (Ticket.ExpectCached) and the prefix
// index's match on the picked replica (Ticket.Match). The driver passes
// it to Ledger.Uncached and Ledger.Dispatched as their expectCached.
func (c *Controller) Expected(expectCached, match int) int {
	switch c.s.WorkCached {
	case CachedMatch:
		return match
	case CachedMin:
		return min(expectCached, match)
	}
	return expectCached
}

// FirstToken tells the ledger that request id's first token came at now; it
// reports whether that changed the pool's work (the prefill model's
// entry left the prefilling sum): the driver then lets waiting requests
// go (Dispatch), as after an answer.
func (c *Controller) FirstToken(id uint64, now int64) bool {
	return c.ledger.First(id, now) && c.s.WorkModel == WorkPrefill
}
