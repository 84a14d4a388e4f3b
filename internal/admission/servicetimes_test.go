package admission

import "testing"

// TestServiceQuantile: the 0.9 quantile of the last observed times, once
// 16 are known, is the least service time: an arrival whose deadline is
// nearer is shed at once. Off (0), observations change nothing.
func TestServiceQuantile(t *testing.T) {
	s := Defaults()
	s.Enabled, s.ServiceQuantile = true, 0.9
	c := New(s)
	for i := int64(1); i <= 15; i++ {
		c.ObserveService(i*1e6, 0)
	}
	if q := c.ServiceQuantile(); q != 0 {
		t.Fatalf("15 samples: quantile %d, want 0 (too few)", q)
	}
	for i := int64(16); i <= 20; i++ {
		c.ObserveService(i*1e6, 0)
	}
	// 1 … 20 ms: index int(0.9 × 20) = 18 of the sorted times: 19 ms.
	if q := c.ServiceQuantile(); q != 19e6 {
		t.Fatalf("quantile %d, want 19 ms", q)
	}
	v, _, _ := c.Offer(Item{ID: 1, Arrived: 0, Deadline: 10e6}, 0, false)
	if v.Outcome != Shed || v.Reason != Deadline {
		t.Fatalf("deadline in 10 ms with a 19 ms quantile: %+v, want shed (deadline)", v)
	}
	if v, _, _ := c.Offer(Item{ID: 2, Arrived: 0, Deadline: 30e6}, 0, false); v.Outcome != Admitted {
		t.Fatalf("deadline in 30 ms: %+v, want admitted", v)
	}
	// The window keeps the last 128: 200 more of 1 ms bring it down.
	for range 200 {
		c.ObserveService(1e6, 0)
	}
	if q := c.ServiceQuantile(); q != 1e6 {
		t.Fatalf("after 200 × 1 ms: quantile %d, want 1 ms", q)
	}
	// Samples older than 10 s no longer count: an Offer at 10.5 s drops
	// them all (under 16 left: no quantile), so a burst's quantile cannot
	// shed every later request.
	for range 20 {
		c.ObserveService(5e9, 1e9)
	}
	if q := c.ServiceQuantile(); q != 5e9 {
		t.Fatalf("after 20 × 5 s: quantile %d, want 5 s", q)
	}
	if v, _, _ := c.Offer(Item{ID: 3, Arrived: 11.5e9, Deadline: 12.5e9}, 11.5e9, false); v.Outcome != Admitted || c.ServiceQuantile() != 0 {
		t.Fatalf("10.5 s later: %+v, quantile %d; want admitted, no quantile", v, c.ServiceQuantile())
	}
	off := New(Defaults())
	for range 20 {
		off.ObserveService(5e9, 0)
	}
	if off.ServiceQuantile() != 0 {
		t.Fatal("ServiceQuantile off, yet a quantile was kept")
	}
	bad := Defaults()
	bad.ServiceQuantile = 1
	if bad.Validate() == nil {
		t.Fatal("service_quantile 1 accepted")
	}
}
