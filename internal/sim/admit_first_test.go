package sim

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/llm-ring/llm-ring/internal/admission"
	"github.com/llm-ring/llm-ring/internal/record"
)

// TestAdmissionFirstToken: the simulator tells the work ledger of a
// request's first token at the model's first-token event, at its virtual
// time. Two requests at t = 0 on one replica whose learned rate (10,000
// tok/s, taught before the run) makes any prefill work saturate the pool
// (work limit 1 µs): c0 goes at once, c1 waits. With the prefill model c1
// is let go when c0's first token comes — its wait is c0's TTFT, before
// c0's answer ends; with the in-flight model only when c0's answer ends
// (its wait is c0's latency). Afterwards the ledger is empty.
func TestAdmissionFirstToken(t *testing.T) {
	for _, model := range []string{admission.WorkPrefill, admission.WorkInflight} {
		st := admSettings(4)
		st.QueueThreshold, st.WorkModel, st.WorkLimitNs = 100, model, int64(time.Microsecond)
		sp, _ := burstSpec(2, &Admission{Settings: st})
		longAnswers(&sp) // a decode long after the first token
		s, got := runBurst(t, &sp, true)
		l := s.adm.c.Ledger()
		c0, c1 := got["c0"], got["c1"]
		if c0.Status != 200 || c1.Status != 200 || wait(t, c0) != 0 {
			t.Fatalf("%s: statuses %d %d, c0 waited %v ms", model, c0.Status, c1.Status, wait(t, c0))
		}
		want := c0.TTFTMS
		if model == admission.WorkInflight {
			want = c0.LatencyMS
		}
		if !(c0.TTFTMS < c0.LatencyMS-1) || math.Abs(wait(t, c1)-want) > 1e-3 {
			t.Errorf("%s: c1 waited %.3f ms, want %.3f (c0's TTFT %.3f, latency %.3f)", model, wait(t, c1), want, c0.TTFTMS, c0.LatencyMS)
		}
		if l.InFlight() != 0 || l.Prefilling("llm-0") != 0 {
			t.Errorf("%s: after the run %d entries, %d prefilling", model, l.InFlight(), l.Prefilling("llm-0"))
		}
	}
}

// longAnswers makes a burstSpec's two answers 32 tokens long.
func longAnswers(sp *Spec) {
	sp.Model.AnswerMin, sp.Model.AnswerMax = 32, 32
	sp.Source.(fixed)[0].Turns[0].MaxTokens = 32
	sp.Source.(fixed)[1].Turns[0].MaxTokens = 32
}

// runBurst runs sp to its end and returns the simulation and its rows by
// conversation; with learn, the ledger is first taught 10,000 tok/s on
// llm-0 (1,000 tokens in 100 ms each, disjoint: times only make the rate).
func runBurst(t *testing.T, sp *Spec, learn bool) (*sim, map[string]record.Request) {
	t.Helper()
	var rows rowsOf
	s, err := newSim(sp, &rows)
	if err != nil {
		t.Fatal(err)
	}
	if learn {
		l := s.adm.c.Ledger()
		for i := range 8 {
			start := int64(i) * int64(200*time.Millisecond)
			l.Learn("llm-0", start, start+int64(100*time.Millisecond), 0, 1000, 0)
		}
	}
	if err := s.loop(context.Background()); err != nil {
		t.Fatal(err)
	}
	s.finish()
	return s, byConv(t, rows)
}
