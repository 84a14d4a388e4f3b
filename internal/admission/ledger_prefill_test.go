package admission

import (
	"testing"

	"github.com/llm-ring/llm-ring/internal/policy"
)

// TestLedgerPrefill: the prefill model's work is the tokens of the entries
// not yet past their first token, at the rate; a first token takes its
// entry's tokens out of that sum once, leaves the in-flight sum and the
// backlog as they were, and an entry that ends before its first token
// takes them out then. Hand-computed at 10,000 tok/s.
func TestLedgerPrefill(t *testing.T) {
	l := NewLedger()
	teach(l, "a", 8, 0, 200*ms, 100*ms, sec) // 10,000 tok/s
	l.Dispatched(1, "a", 4000, 0, sec)
	l.Dispatched(2, "a", 2000, 0, sec)
	l.Dispatched(3, "b", 1000, 0, sec) // b: no rate of its own
	work := func(model string, want float64) {
		t.Helper()
		if ns, ok := l.Work("a", model, sec, 0); !ok || !near(ns, want*1e9) {
			t.Fatalf("%s work %v s (%v), want %v s", model, ns/1e9, ok, want)
		}
	}
	work(WorkPrefill, 0.6)
	if !l.First(1, sec) || l.First(1, sec) { // once: a second telling changes nothing
		t.Fatalf("First(1): not once")
	}
	if l.First(99, sec) {
		t.Fatalf("First of an id without an entry")
	}
	if got := l.Prefilling("a"); got != 2000 {
		t.Fatalf("after 1's first token: prefilling %d, want 2000", got)
	}
	work(WorkPrefill, 0.2)
	work(WorkInflight, 0.6) // the other models do not see first tokens
	work(WorkBacklog, 0.6)
	if !l.Ended(1, sec) || l.Prefilling("a") != 2000 { // its prefill had left already
		t.Fatalf("1 ended: prefilling %d, want 2000", l.Prefilling("a"))
	}
	work(WorkInflight, 0.2)
	l.Ended(2, sec) // before its first token: its tokens leave with it
	if got := l.Prefilling("a"); got != 0 {
		t.Fatalf("2 ended: prefilling %d, want 0", got)
	}
	if got, ok := l.Work("b", WorkPrefill, sec, 10000); !ok || !near(got, 0.1e9) {
		t.Fatalf("b at the pool's mean: %v, want 100 ms", got)
	}
	// A re-dispatched id counts once in the prefilling sum.
	l.Dispatched(3, "b", 700, 0, sec)
	if got := l.Prefilling("b"); got != 700 {
		t.Fatalf("b re-dispatched: prefilling %d, want 700", got)
	}
}

// TestLedgerPrefillService: with the prefill model a request's predicted
// service is (the prefilling tokens ahead + its uncached prompt) ÷ the
// rate on the best replica; with the backlog model the backlog ahead, as
// before. a: 10,000 tok/s with 6,000 prefilling, 1,000 of which has its
// first token; c: 10,000 tok/s with 2,000 prefilling. A prompt of 3,000
// (nothing cached learned): a (5,000 + 3,000) ÷ 10,000 = 0.8 s, c
// (2,000 + 3,000) ÷ 10,000 = 0.5 s: 0.5 s; the backlog (2,000 on c, not
// drained at the same instant) gives the same on c, and 6,000 on a
// (first tokens do not drain it).
func TestLedgerPrefillService(t *testing.T) {
	for _, c := range []struct {
		model string
		want  float64
	}{{WorkPrefill, 0.5}, {WorkBacklog, 0.5}} {
		s := on()
		s.WorkModel, s.WorkLimitNs = c.model, sec
		ctl := New(s)
		l := ctl.Ledger()
		teach(l, "a", 8, 0, 200*ms, 100*ms, sec)
		teach(l, "c", 8, 0, 200*ms, 100*ms, sec)
		l.Dispatched(1, "a", 5000, 0, sec)
		l.Dispatched(2, "a", 1000, 0, sec)
		l.Dispatched(3, "c", 2000, 0, sec)
		if freed := ctl.FirstToken(2, sec); freed != (c.model == WorkPrefill) {
			t.Fatalf("%s: FirstToken freed %v", c.model, freed)
		}
		v := &policy.View{Names: []string{"a", "c"}, Rows: make([]policy.Row, 2), Now: sec}
		if got := l.Service(v, 3000); !near(float64(got), c.want*1e9) {
			t.Fatalf("%s: service %v s, want %v s", c.model, float64(got)/1e9, c.want)
		}
		v.Exclude = []uint64{1 << 1} // only a: 0.8 s prefilling, 0.9 s backlog
		want := map[string]float64{WorkPrefill: 0.8, WorkBacklog: 0.9}[c.model]
		if got := l.Service(v, 3000); !near(float64(got), want*1e9) {
			t.Fatalf("%s on a: service %v s, want %v s", c.model, float64(got)/1e9, want)
		}
	}
}

// TestExpected: work_cached picks the pick's figure the ledger leaves out.
func TestExpected(t *testing.T) {
	for _, c := range []struct {
		set           string
		expect, match int
		want          int
	}{
		{"", 7176, 1200, 7176}, {CachedExpect, 7176, 1200, 7176},
		{CachedMatch, 7176, 1200, 1200}, {CachedMatch, 0, 1200, 1200},
		{CachedMin, 7176, 1200, 1200}, {CachedMin, 0, 1200, 0}, {CachedMin, 300, 1200, 300},
	} {
		s := on()
		s.WorkCached = c.set
		if err := s.Validate(); err != nil {
			t.Fatal(err)
		}
		if got := New(s).Expected(c.expect, c.match); got != c.want {
			t.Errorf("%q (%d, %d): %d, want %d", c.set, c.expect, c.match, got, c.want)
		}
	}
	s := on()
	s.WorkCached = "index"
	if s.Validate() == nil {
		t.Errorf("work_cached %q validated", s.WorkCached)
	}
	s.WorkCached, s.WorkModel = "", WorkPrefill
	if err := s.Validate(); err != nil {
		t.Errorf("work_model prefill: %v", err)
	}
}

// TestLedgerPrefillRate: with the prefill model the rate learns from first
// tokens, before any answer: eight prefills of 1,000 estimated tokens, each
// dispatched 200 ms after the last and first token 100 ms later, make
// 8,000 tokens over 0.8 s of busy time, 10,000 tok/s; an answer's count
// then replaces its estimate (2,000 processed: 9,000 over 0.8 s, 11,250
// tok/s), and a failure after the first token keeps it. The backlog model
// learns nothing from first tokens (no rate before the answers).
func TestLedgerPrefillRate(t *testing.T) {
	for _, model := range []string{WorkPrefill, WorkBacklog} {
		s := on()
		s.WorkModel = model
		l := New(s).Ledger()
		for i := range 8 {
			start := int64(i) * 200 * ms
			l.Dispatched(uint64(i), "a", 1000, 0, start)
			l.First(uint64(i), start+100*ms)
		}
		want := map[string]float64{WorkPrefill: 10000, WorkBacklog: 0}[model]
		if r := l.Rate("a"); !near(r, want) {
			t.Fatalf("%s: rate %v from first tokens, want %v", model, r, want)
		}
		if model != WorkPrefill {
			continue
		}
		l.Answered(0, "a", 0, 100*ms, 0, 2000, 2*sec)
		if r := l.Rate("a"); !near(r, 11250) {
			t.Fatalf("an answer's count: rate %v, want 11250", r)
		}
		l.Ended(1, 2*sec) // failed after its first token: its prefill still counts
		if r := l.Rate("a"); !near(r, 11250) {
			t.Fatalf("a failure after the first token: rate %v, want 11250", r)
		}
	}
}
