package router

import (
	"context"
	"sync"
	"testing"
)

// ledger returns the work ledger's entries over all pools, whether id has
// one, and llm-0's in-flight tokens and learned rate.
func (a *admitter) ledger(id uint64) (entries int, has bool, tokens int64, rate float64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, p := range a.order {
		l := p.c.Ledger()
		entries += l.InFlight()
		has = has || l.Has(id)
		in, _ := l.Tokens("llm-0", 0)
		tokens += in
		rate += l.Rate("llm-0")
	}
	return entries, has, tokens, rate
}

// flowInFlight is the flow gate's count of the default band, flow "" (the default
// class) in flight over all pools.
func (a *admitter) flowInFlight() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, p := range a.order {
		n += p.c.FlowInFlight(a.cfg.DefaultPriority, "")
	}
	return n
}

// TestAdmissionLedgerLive: the router feeds admission's work ledger as
// the simulator does (internal/sim/admit.go): a request routed to a
// replica has an entry with its uncached prompt estimate until its answer
// ends; a queued one has none (never both queued and sent); the answers'
// timings teach the replica's prefill throughput; the flow gate counts the
// routed requests of their flow until they end.
func TestAdmissionLedgerLive(t *testing.T) {
	h, f := admissionHarness(t)
	adm := h.rt.adm
	var wg sync.WaitGroup
	out := make(chan [2]int, 32)
	bg := context.Background()
	h.send(bg, &wg, 1, "", out)
	h.send(bg, &wg, 2, "", out)
	waitFor(t, "two requests at the replica", func() bool { return f.calls.Load() == 2 })
	waitFor(t, "two ledger entries", func() bool { n, _, _, _ := adm.ledger(0); return n == 2 })
	if _, _, tokens, _ := adm.ledger(0); tokens <= 0 {
		t.Fatalf("two requests in flight, %d tokens in the ledger", tokens)
	}
	if n := adm.flowInFlight(); n != 2 {
		t.Fatalf("two requests in flight, the flow counts %d", n)
	}
	h.send(bg, &wg, 3, "", out)
	waitFor(t, "request 3 queued", func() bool { return adm.queued() == 1 })
	if n, has, _, _ := adm.ledger(3); n != 2 || has {
		t.Fatalf("request 3 queued: %d entries, its own %v; want 2, false", n, has)
	}
	close(f.hold)
	wg.Wait()
	waitFor(t, "the ledger empty", func() bool { n, _, tokens, _ := adm.ledger(0); return n == 0 && tokens == 0 })
	if n := adm.flowInFlight(); n != 0 {
		t.Fatalf("nothing in flight, the flow counts %d", n)
	}
	for i := 4; i <= 12; i++ { // one at a time: enough answers for a rate
		h.send(bg, &wg, i, "", out)
		wg.Wait()
	}
	close(out)
	for r := range out {
		if r[1] != 200 {
			t.Errorf("request %d: status %d", r[0], r[1])
		}
	}
	waitFor(t, "a rate learned", func() bool { n, _, _, rate := adm.ledger(0); return n == 0 && rate > 0 })
}
