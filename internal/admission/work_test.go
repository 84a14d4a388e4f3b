package admission

import (
	"math"
	"strings"
	"testing"

	"github.com/llm-ring/llm-ring/internal/policy"
)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// TestWorkTerm: in-flight tokens priced at the replica's learned prefill
// rate against the work limit, hand-computed; the pool's mean rate for a
// replica that has none; off while no rate is learned.
func TestWorkTerm(t *testing.T) {
	s := Defaults()
	s.WorkLimitNs = int64(sec / 2) // 0.5 s
	rows := []policy.Row{
		{Load: policy.Load{Requests: 1, Tokens: 2000}, Speed: policy.Speed{Prefill: 8000}}, // 0.25 s / 0.5 s = 0.5
		{Load: policy.Load{Requests: 1, Tokens: 6000}, Speed: policy.Speed{Prefill: 4000}}, // 1.5 s / 0.5 s = 3
		{Load: policy.Load{Requests: 1, Tokens: 3000}},                                     // the pool's mean, 6000/s: 0.5 s → 1
	}
	v := &policy.View{Names: []string{"a", "b", "c"}, Rows: rows}
	if got := PoolScore(v, &s, 0); !near(got, (0.5+3+1)/3) {
		t.Fatalf("pool %v, want %v", got, (0.5+3+1)/3)
	}
	if got := ReplicaScore(&rows[2], 0, &s, 0); got != 0 { // alone, c has no rate: the term is off
		t.Fatalf("c alone: %v, want 0", got)
	}
	v.Exclude = []uint64{1 << 1} // without b, the mean rate is 8000: c 3000/8000 = 0.375 s → 0.75
	if got := PoolScore(v, &s, 0); !near(got, (0.5+0.75)/2) {
		t.Fatalf("without b: pool %v, want %v", got, (0.5+0.75)/2)
	}
	for i := range rows {
		rows[i].Speed = policy.Speed{}
	}
	v.Exclude = nil
	if got := PoolScore(v, &s, 0); got != 0 { // nothing learned: no guess
		t.Fatalf("no rates: pool %v, want 0", got)
	}
	s.WorkLimitNs = 0 // off: the other terms only
	rows[1].Speed.Prefill = 1
	if got := PoolScore(v, &s, 0); got != 0 {
		t.Fatalf("term off: pool %v, want 0", got)
	}
}

// TestSetSLO: work_share × the default SLO; a configured work_limit wins.
func TestSetSLO(t *testing.T) {
	s := on()
	s.WorkShare = 4
	c := New(s)
	if c.Settings().WorkLimitNs != 0 {
		t.Fatalf("before the SLO: %d, want 0", c.Settings().WorkLimitNs)
	}
	if c.SetSLO(int64(sec)); c.Settings().WorkLimitNs != int64(4*sec) {
		t.Fatalf("SLO 1 s: %d, want 4 s", c.Settings().WorkLimitNs)
	}
	if c.SetSLO(0); c.Settings().WorkLimitNs != 0 {
		t.Fatalf("no SLO: %d, want 0", c.Settings().WorkLimitNs)
	}
	s.WorkLimitNs = int64(sec / 4)
	c = New(s)
	if c.SetSLO(int64(sec)); c.Settings().WorkLimitNs != int64(sec/4) {
		t.Fatalf("configured 250 ms: %d", c.Settings().WorkLimitNs)
	}
	for _, bad := range []float64{-1, math.NaN(), math.Inf(1)} {
		s := on()
		s.WorkShare = bad
		if err := s.Validate(); err == nil || !strings.Contains(err.Error(), "work_share") {
			t.Errorf("work_share %v: %v, want an error naming work_share", bad, err)
		}
	}
	s = on()
	s.WorkLimitNs = -1
	if err := s.Validate(); err == nil || !strings.Contains(err.Error(), "work_limit") {
		t.Errorf("work_limit −1: %v", err)
	}
}
