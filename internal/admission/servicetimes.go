package admission

import "slices"

// serviceWindow is how many recent dispatch-to-first-token times a pool
// keeps for Settings.ServiceQuantile.
const serviceWindow = 128

// minServiceSamples: fewer observed times than this predict nothing.
const minServiceSamples = 16

// serviceMaxAge: an observed time older than this (ns) no longer counts.
// Without it a quantile learned in a burst would shed every later request
// at once, and with nothing admitted nothing would bring it down again.
const serviceMaxAge = 10e9

// serviceTimes is a ring of the pool's recent dispatch-to-first-token times
// (ns) with when they were observed, oldest first, and their quantile,
// recomputed when the samples change (a sort of at most serviceWindow
// values, no allocation).
type serviceTimes struct {
	ring    [serviceWindow]int64
	at      [serviceWindow]int64
	scratch [serviceWindow]int64
	n, next int
	q       int64 // the quantile of the samples; 0 under minServiceSamples
}

func (t *serviceTimes) observe(ns, now int64, quantile float64) {
	t.ring[t.next], t.at[t.next] = ns, now
	t.next = (t.next + 1) % serviceWindow
	t.n = min(t.n+1, serviceWindow)
	t.age(now, quantile)
	t.recompute(quantile)
}

// age drops the samples older than serviceMaxAge at now.
func (t *serviceTimes) age(now int64, quantile float64) {
	dropped := false
	for t.n > 0 {
		oldest := (t.next - t.n + serviceWindow) % serviceWindow
		if now-t.at[oldest] <= serviceMaxAge {
			break
		}
		t.n--
		dropped = true
	}
	if dropped {
		t.recompute(quantile)
	}
}

func (t *serviceTimes) recompute(quantile float64) {
	if t.n < minServiceSamples {
		t.q = 0
		return
	}
	s := t.scratch[:t.n]
	for i := range t.n {
		s[i] = t.ring[(t.next-t.n+i+serviceWindow)%serviceWindow]
	}
	slices.Sort(s)
	t.q = s[min(t.n-1, int(quantile*float64(t.n)))]
}

// ObserveService records, at now, one admitted request's time from dispatch
// to its first token (the driver measures it: time to first token less the
// wait in the queue). With Settings.ServiceQuantile set, the quantile of the
// last 128 such times of the last 10 s (once 16 are known) is the least
// service time assumed for every request, as ServiceFloorNs is: a
// prediction that is a mean-like estimate is raised to what the pool's
// recent requests took at that quantile. Without the setting it does
// nothing.
func (c *Controller) ObserveService(ns, now int64) {
	if c.s.ServiceQuantile <= 0 || ns <= 0 {
		return
	}
	c.times.observe(ns, now, c.s.ServiceQuantile)
}

// ageService drops observed service times too old at now (every step that
// judges a deadline calls it).
func (c *Controller) ageService(now int64) {
	if c.s.ServiceQuantile > 0 {
		c.times.age(now, c.s.ServiceQuantile)
	}
}

// ServiceQuantile is the quantile ObserveService keeps (0: none yet, or the
// setting is off).
func (c *Controller) ServiceQuantile() int64 { return c.times.q }
