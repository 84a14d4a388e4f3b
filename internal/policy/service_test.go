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
		// r0: 2 in flight, a slot free (4 slots): no queue, 400 new at
		// 1000 tok/s = 0.4 s; r1: idle, 400 at 500 tok/s = 0.8 s.
		{"a slot free", serviceView(one(2, 600, 1000), one(0, 0, 500)), 4, 400, 0.4},
		// One slot, two in flight (mean 500): q = 2 − 1 + 1 = 2 end before
		// it: (2 × 500 + 100) / 1000.
		{"slots full", serviceView(one(2, 1000, 1000)), 1, 100, 1.1},
		// The same beside an idle replica at 500 tok/s: 100 / 500.
		{"least", serviceView(one(2, 1000, 1000), one(0, 0, 500)), 1, 100, 0.2},
		// An unlearned idle replica takes the mean of the learned rates
		// (1000): 100 / 1000.
		{"mean rate", serviceView(one(2, 1000, 1000), Row{}), 1, 100, 0.1},
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
	p := DefaultPredictive() // 4 slots
	row := Row{Load: Load{Requests: 1, Tokens: 200}, Speed: Speed{Prefill: 1000},
		Reported: Reported{Running: 1, Waiting: 3, HasQueue: true, At: 9.5e9}}
	// Fresh: 4 requests there, 3 more than the router's: n = 4, work =
	// 200 + 3 × 200 = 800 (mean 200); q = max(4 − 4 + 1, 3 waiting) = 3:
	// (3 × 200 + 100) / 1000 = 0.7 s.
	if got := ServiceTime(p, serviceView(row), 100); !nearNs(got, 700e6) {
		t.Errorf("fresh report: %d ns, want 700 ms", got)
	}
	// Stale (2 s old, stale after 1 s): n = 1, a slot free: 100 / 1000.
	stale := row
	stale.Reported.At = 8e9
	if got := ServiceTime(p, serviceView(stale), 100); !nearNs(got, 100e6) {
		t.Errorf("stale report: %d ns, want 100 ms", got)
	}
	idle := Row{Speed: Speed{Prefill: 2000}}
	v := serviceView(idle, row)
	v.Exclude = []uint64{1} // the idle one may not be picked
	if got := ServiceTime(p, v, 100); !nearNs(got, 700e6) {
		t.Errorf("idle replica excluded: %d ns, want the other's 700 ms", got)
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
