package admission

import "slices"

// serviceWindow is how many recent dispatch-to-first-token times a pool
// keeps for Settings.ServiceQuantile.
const serviceWindow = 128

// minServiceSamples: fewer observed times than this predict nothing.
const minServiceSamples = 16

// serviceTimes is a ring of the pool's recent dispatch-to-first-token times
// (ns) and their quantile, recomputed on each observation (a sort of at most
// serviceWindow values, no allocation).
type serviceTimes struct {
	ring    [serviceWindow]int64
	scratch [serviceWindow]int64
	n, next int
	q       int64 // the quantile of ring[:n]; 0 until minServiceSamples
}

func (t *serviceTimes) observe(ns int64, quantile float64) {
	t.ring[t.next] = ns
	t.next = (t.next + 1) % serviceWindow
	t.n = min(t.n+1, serviceWindow)
	if t.n < minServiceSamples {
		return
	}
	s := t.scratch[:t.n]
	copy(s, t.ring[:t.n])
	slices.Sort(s)
	t.q = s[min(t.n-1, int(quantile*float64(t.n)))]
}

// ObserveService records one admitted request's time from dispatch to its
// first token (the driver measures it: time to first token less the wait in
// the queue). With Settings.ServiceQuantile set, the quantile of the last
// 128 such times (once 16 are known) is the least service time assumed for
// every request, as ServiceFloorNs is: a prediction that is a mean-like
// estimate is raised to what the pool's recent requests took at that
// quantile. Without the setting it does nothing.
func (c *Controller) ObserveService(ns int64) {
	if c.s.ServiceQuantile <= 0 || ns <= 0 {
		return
	}
	c.times.observe(ns, c.s.ServiceQuantile)
}

// ServiceQuantile is the quantile ObserveService keeps (0: none yet, or the
// setting is off).
func (c *Controller) ServiceQuantile() int64 { return c.times.q }
