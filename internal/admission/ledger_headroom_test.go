package admission

import (
	"math"
	"testing"

	"github.com/llm-ring/llm-ring/internal/policy"
)

// TestHeadroomTracker: hand-computed steps of the quantile tracker at a
// 500 ms target: a time within it multiplies m by e^(0.05/9), one over it
// by e^(−0.05); m never falls below 1 nor rises above 4; no target, no
// change.
func TestHeadroomTracker(t *testing.T) {
	h := headroom{m: 1}
	h.observe(1) // no target: m stays 1
	if h.m != 1 {
		t.Fatalf("without a target m = %v, want 1", h.m)
	}
	h.setTarget(500 * ms)
	h.observe(400 * ms)
	if want := math.Exp(0.05 / 9); !near(h.m, want) {
		t.Fatalf("after one time within: m = %v, want %v", h.m, want)
	}
	h.observe(500 * ms) // at the target counts as within
	if want := math.Exp(0.1 / 9); !near(h.m, want) {
		t.Fatalf("after two within: m = %v, want %v", h.m, want)
	}
	h.observe(501 * ms) // 1.0111 × 0.9512 = 0.9618: clamped to 1
	if h.m != 1 {
		t.Fatalf("after one over: m = %v, want 1 (never tighter than configured)", h.m)
	}
	for range 300 { // e^(300 × 0.05/9) = 5.29: clamped to 4
		h.observe(100 * ms)
	}
	if h.m != headroomMax {
		t.Fatalf("after 300 within: m = %v, want %v", h.m, headroomMax)
	}
	h.observe(900 * ms)
	if want := 4 * math.Exp(-0.05); !near(h.m, want) {
		t.Fatalf("then one over: m = %v, want %v", h.m, want)
	}
	// Nine within and one over leave m where it was: the tracker's
	// equilibrium is the p90 at the target.
	before := h.m
	for range 9 {
		h.observe(100 * ms)
	}
	h.observe(900 * ms)
	if !near(h.m, before) {
		t.Fatalf("nine within, one over: m = %v, want %v", h.m, before)
	}
	h.setTarget(0)
	if h.m != 1 {
		t.Fatalf("target off: m = %v, want 1", h.m)
	}
}

// TestWorkTargetFor: the target is the share of the SLO; off without a
// share or an SLO; the settings check its range.
func TestWorkTargetFor(t *testing.T) {
	s := Defaults()
	if got := s.WorkTargetFor(sec); got != 0 {
		t.Fatalf("no share: %d, want 0", got)
	}
	s.WorkTarget = 0.5
	if got := s.WorkTargetFor(sec); got != 500*ms {
		t.Fatalf("0.5 of 1 s: %d, want 500 ms", got)
	}
	if got := s.WorkTargetFor(0); got != 0 {
		t.Fatalf("no SLO: %d, want 0", got)
	}
	for _, bad := range []float64{-0.1, 1.5, math.NaN()} {
		s.WorkTarget = bad
		if err := s.Validate(); err == nil {
			t.Fatalf("work_target %v: no error", bad)
		}
	}
}

// TestHeadroomScore: the controller's target follows SetSLO; a first
// token's time from the ledger's dispatch teaches the multiplier, and the
// pool score is each fresh replica's score divided by it, a stale one's 1
// left as it is. Three replicas: KV use 0.4 (0.5 at kv_threshold 0.8),
// 0.8 (1.0) and a stale report (1): mean 2.5/3; with m = 2, (0.25 + 0.5
// + 1)/3 = 1.75/3.
func TestHeadroomScore(t *testing.T) {
	s := on()
	s.WorkModel, s.WorkLimitNs, s.WorkTarget = WorkPrefill, 200*ms, 0.5
	c := New(s)
	c.SetSLO(sec)
	if got := c.Ledger().Target(); got != 500*ms {
		t.Fatalf("target %d, want 500 ms", got)
	}
	now := 10 * sec
	v := &policy.View{Names: []string{"a", "b", "c"}, Rows: []policy.Row{
		{Reported: policy.Reported{KVUse: 0.4, HasKV: true, At: now}},
		{Reported: policy.Reported{KVUse: 0.8, HasKV: true, At: now}},
		{Reported: policy.Reported{KVUse: 0.1, HasKV: true, At: now - 3*sec}}, // stale → 1
	}, Now: now}
	if got := c.Score(v, 0); !near(got, 2.5/3) {
		t.Fatalf("before any first token: score %v, want %v", got, 2.5/3)
	}
	l := c.Ledger()
	l.Dispatched(1, "a", 100, 0, sec)
	if !c.FirstToken(1, sec+100*ms) { // 100 ms ≤ 500 ms: m = e^(0.05/9)
		t.Fatalf("first token: the prefill model's work did not change")
	}
	if want := math.Exp(0.05 / 9); !near(l.Headroom(), want) {
		t.Fatalf("headroom %v, want %v", l.Headroom(), want)
	}
	l.head.m = 2
	if got := c.Score(v, 0); !near(got, 1.75/3) {
		t.Fatalf("m = 2: score %v, want %v", got, 1.75/3)
	}
	// Without a target the same ledger state scores as before.
	s.WorkTarget = 0
	c2 := New(s)
	c2.SetSLO(sec)
	c2.Ledger().Dispatched(1, "a", 100, 0, sec)
	c2.FirstToken(1, sec+100*ms)
	if got := c2.Score(v, 0); !near(got, 2.5/3) || c2.Ledger().Headroom() != 1 {
		t.Fatalf("no target: score %v headroom %v, want %v and 1", got, c2.Ledger().Headroom(), 2.5/3)
	}
}

// TestHeadroomDecodeGuard: with a TPOT SLO (SetTPOT) an answer over it
// takes the multiplier down by e^(−0.05), as a late first token does; one
// within it, or any without a work target or a TPOT SLO, changes nothing;
// m stays at least 1.
func TestHeadroomDecodeGuard(t *testing.T) {
	s := on()
	s.WorkModel, s.WorkLimitNs, s.WorkTarget = WorkPrefill, 200*ms, 0.5
	c := New(s)
	c.SetSLO(sec)
	l := c.Ledger()
	l.head.m = 2
	l.Decoded(150 * ms) // no TPOT SLO yet: no guard
	if l.Headroom() != 2 {
		t.Fatalf("without a TPOT SLO: m = %v, want 2", l.Headroom())
	}
	c.SetTPOT(100 * ms)
	l.Decoded(100 * ms) // at the SLO: within
	l.Decoded(50 * ms)
	if l.Headroom() != 2 {
		t.Fatalf("answers within the SLO: m = %v, want 2", l.Headroom())
	}
	l.Decoded(101 * ms)
	if want := 2 * math.Exp(-0.05); !near(l.Headroom(), want) {
		t.Fatalf("one answer over: m = %v, want %v", l.Headroom(), want)
	}
	for range 20 { // 2 × e^(−1) = 0.74: clamped to 1
		l.Decoded(sec)
	}
	if l.Headroom() != 1 {
		t.Fatalf("twenty over: m = %v, want 1", l.Headroom())
	}
	s.WorkTarget = 0 // no target: the guard is off too
	c2 := New(s)
	c2.SetSLO(sec)
	c2.SetTPOT(100 * ms)
	c2.Ledger().head.m = 1.5 // (a state the tracker would not reach without a target)
	c2.Ledger().Decoded(sec)
	if c2.Ledger().Headroom() != 1.5 {
		t.Fatalf("no target: m = %v, want 1.5", c2.Ledger().Headroom())
	}
}
