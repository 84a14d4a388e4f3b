package admission

import "math"

// The tests' pools are saturated for every band or for none: Offer and
// Dispatch take that as a boolean (the drivers pass the score itself).

// Offer is OfferScore for a pool that is saturated for every band, or for
// none.
func (c *Controller) Offer(it Item, now int64, saturated bool) (v Verdict, displaced Item, ok bool) {
	return c.OfferScore(it, now, boolScore(saturated))
}

// boolScore is a pool score above every limit (saturated) or below all.
func boolScore(saturated bool) float64 {
	if saturated {
		return math.Inf(1)
	}
	return 0
}

// Dispatch is DispatchScore for a pool that is saturated for every band, or
// for none.
func (c *Controller) Dispatch(now int64, saturated bool) (Item, bool) {
	return c.DispatchScore(now, boolScore(saturated))
}
