package policy

import "testing"

// serviceView is a view of rows (names r0, r1, …) at now = 10 s.
func serviceView(rows ...Row) *View {
	v := &View{Rows: rows, Now: 10e9}
	for i := range rows {
		v.Names = append(v.Names, string(rune('a'+i)))
	}
	return v
}

// TestServiceTime: hand-computed predictions, in seconds, of the time
// from dispatch to the first token.
func TestServiceTime(t *testing.T) {
	p := DefaultPredictive() // slots 4, prior prefill 80 tok/s, stale after 1 s
	one := func(n, work int64, pf float64) Row {
		return Row{Load: Load{Requests: n, Tokens: work}, Speed: Speed{Prefill: pf}}
	}
	cases := []struct {
		name   string
		v      *View
		slots  int
		prompt int
		want   float64 // seconds
	}{
		// No replica has answered: unknown (predictive's prior, 80 tok/s,
		// is not used: 10 s would shed every request with a shorter SLO).
		{"nothing learned", serviceView(Row{}, Row{Load: Load{Requests: 3, Tokens: 900}}), 4, 800, 0},
		// r0: 2 in flight, 600 tokens (mean 300), a slot free: each shares
		// up to min(300, 400) → 600 + 400 new at 1000 tok/s = 1.0 s;
		// r1: idle, 400 at 500 tok/s = 0.8 s. The least: 0.8 s.
		{"least", serviceView(one(2, 600, 1000), one(0, 0, 500)), 4, 400, 0.8},
		// One slot, two in flight (mean 500): both end before it: 1000 +
		// 100 new at 1000 tok/s.
		{"slots full", serviceView(one(2, 1000, 1000)), 1, 100, 1.1},
		// An unlearned idle replica takes the mean of the learned rates
		// (1000): 100 / 1000 against r0's (2·min(500,100) + 100) / 1000.
		{"mean rate", serviceView(one(2, 1000, 1000), Row{}), 4, 100, 0.1},
		// A prompt of no tokens counts as one: 1 / 1000 s.
		{"empty prompt", serviceView(one(0, 0, 1000)), 4, 0, 0.001},
	}
	for _, c := range cases {
		q := *p
		q.Slots = c.slots
		got := float64(ServiceTime(&q, c.v, c.prompt)) / 1e9
		if d := got - c.want; d > 1e-6 || d < -1e-6 {
			t.Errorf("%s: %.6f s, want %.6f s", c.name, got, c.want)
		}
	}
}

// TestServiceTimeReports: a fresh report of more requests than the router
// has in flight (other routers' traffic) adds them at the mean charge; a
// stale one is ignored; excluded replicas do not count.
func TestServiceTimeReports(t *testing.T) {
	p := DefaultPredictive()
	row := Row{Load: Load{Requests: 1, Tokens: 200}, Speed: Speed{Prefill: 1000},
		Reported: Reported{Running: 3, Waiting: 2, HasQueue: true, At: 9.5e9}}
	// Fresh: n = 5, work = 1000 (mean 200); q = 5 − 4 + 1 = 2 in full (400),
	// the other 3 up to the prompt's 100 (300): (700 + 100) / 1000 = 0.8 s.
	if got := ServiceTime(p, serviceView(row), 100); !nearNs(got, 800e6) {
		t.Errorf("fresh report: %d ns, want 800 ms", got)
	}
	// Stale (2 s old, stale after 1 s): n = 1: (min(200, 100) + 100) / 1000.
	row.Reported.At = 8e9
	if got := ServiceTime(p, serviceView(row), 100); !nearNs(got, 200e6) {
		t.Errorf("stale report: %d ns, want 200 ms", got)
	}
	idle := Row{Speed: Speed{Prefill: 1000}}
	v := serviceView(idle, row)
	v.Exclude = []uint64{1} // the idle one may not be picked
	if got := ServiceTime(p, v, 100); !nearNs(got, 200e6) {
		t.Errorf("idle replica excluded: %d ns, want the other's 200 ms", got)
	}
	v.Exclude = []uint64{3}
	if got := ServiceTime(p, v, 100); got != 0 {
		t.Errorf("all excluded: %d ns, want 0", got)
	}
}

// TestServiceTimeAllocs: no allocation (admission calls it per request).
func TestServiceTimeAllocs(t *testing.T) {
	p := DefaultPredictive()
	v := serviceView(Row{Load: Load{Requests: 3, Tokens: 900}, Speed: Speed{Prefill: 900}}, Row{})
	if n := testing.AllocsPerRun(100, func() { ServiceTime(p, v, 500) }); n != 0 {
		t.Fatalf("%v allocations per call", n)
	}
}

// nearNs: within a microsecond (float rounding of the seconds).
func nearNs(ns int64, want float64) bool { d := float64(ns) - want; return d < 1e3 && d > -1e3 }
