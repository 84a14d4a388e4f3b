package admission

import (
	"math"
	"sort"
)

// The flow gate's rate share (Settings.FlowShare = FlowShareRate;
// docs/admission.md, "flow_share"): a flow is over its share when it has
// been admitted more often, recently, than its max-min fair share of the
// band's recent admissions, by the flows' recent demand:
//
//	over(f) ⇔ (a_f − s_f) · k > ½,   s = maxmin(A = Σ a, demands d, weights w)
//
// a_f are the band's admissions (at once or from the queue) of flow f and
// d_f its offers (every request that reached the queue's decision: shed,
// queued or admitted), each counted 1 and decayed with the time constant
// FlowWindowNs (all flows of a band at once: k is the common factor from
// the last count to now, e^(−Δt/τ)); s is the water-filling of A over the
// demands by weight — a flow that asks for less than an equal part gets all
// it asks, the rest is split among the others. The slack (rateSlack, half an
// admission) lets a flow at its share go.
//
// The in-flight share (FlowShareInflight, flowgate.go) compares a flow's
// requests in flight with an equal part of the band's: a light flow that
// asks for little holds its part and the flooder is held at the light
// flows' mean, which costs goodput wherever the gate applies
// (docs/notes/admission.md). The rate share knows each flow's demand, so
// a light flow below its part does not hold the flooder back, and the
// gate may apply at any score. The outcome it is measured by, the flows'
// good requests against their max-min fair shares over a stage, is a
// count over time, as this is; requests in flight are a count at one
// instant, skewed by how long each is in flight.

// rateBand is a band's decayed counts, in the order flows were first seen
// (every sum over them is in this order).
type rateBand struct {
	priority int
	flows    []*rateFlow
	at       int64 // the counts are decayed to this time
	// shares caches the water-filling (parallel to flows) until a count
	// changes.
	shares []float64
	fresh  bool
	order  []int // waterfill's scratch: the flows by demand per weight
}

type rateFlow struct {
	name           string
	weight         float64
	offers, admits float64
}

// rateForget is the decayed offer count under which a flow is forgotten.
const rateForget = 1e-3

// rateMaxFlows bounds the flows a band's rate share tracks: the fairness
// id comes from a request header, so a client that sends a new one with
// each request would otherwise grow the band's list (and the linear scans
// and the water-filling over it) without bound for the ~28 s a flow takes
// to be forgotten (rateForget at the default window). A flow first seen
// while the band tracks this many is not counted and is never over its
// share (it fails open, as a flow the gate does not know); it is counted
// once a tracked flow is forgotten.
const rateMaxFlows = 256

// rateSlack is how many admissions beyond its share a flow may have before
// it is over. Measured (docs/notes/admission.md, "Fairness at twice
// capacity"): 1 and 2 let the flooder take a third more than its share at
// three times capacity, where a band's share in a window is two or three
// admissions; 0 and 0.25 hold the capacity back (1× goodput 2–3 points
// lower); 0.5 keeps the capacity stage's goodput and the fairness of 0.
const rateSlack = 0.5

// rateOn reports whether the flow gate counts by rate.
func (c *Controller) rateOn() bool { return c.s.FlowGate > 0 && c.s.FlowShareMode() == FlowShareRate }

// noteOffer counts a request of band p and flow fl offered at now.
func (c *Controller) noteOffer(p int, fl string, now int64) {
	if c.rateOn() {
		if f := c.rateFlow(p, fl, now); f != nil {
			f.offers++
		}
	}
}

// noteAdmit counts a request of band p and flow fl admitted at now.
func (c *Controller) noteAdmit(p int, fl string, now int64) {
	if c.rateOn() {
		if f := c.rateFlow(p, fl, now); f != nil {
			f.admits++
		}
	}
}

// rateFlow returns fl's counts in band p, decayed to now (created when
// new; nil when new and the band tracks rateMaxFlows already); the band's
// shares are to be recomputed.
func (c *Controller) rateFlow(p int, fl string, now int64) *rateFlow {
	b := c.rateBand(p)
	if b == nil {
		b = &rateBand{priority: p, at: now}
		c.rates = append(c.rates, b)
	}
	b.decay(now, c.window())
	b.fresh = false
	for _, f := range b.flows {
		if f.name == fl {
			return f
		}
	}
	if len(b.flows) >= rateMaxFlows {
		return nil
	}
	f := &rateFlow{name: fl, weight: c.weight(fl)}
	b.flows = append(b.flows, f)
	return f
}

// window is the rate share's time constant (ns).
func (c *Controller) window() float64 { return float64(c.s.FlowWindow()) }

// FlowWindow is the rate share's time constant in effect (ns):
// FlowWindowNs, or DefaultFlowWindowNs when it is 0.
func (s *Settings) FlowWindow() int64 {
	if s.FlowWindowNs > 0 {
		return s.FlowWindowNs
	}
	return DefaultFlowWindowNs
}

// FlowShareMode is the flow gate's share in effect: FlowShare, or
// FlowShareInflight when it is empty.
func (s *Settings) FlowShareMode() string {
	if s.FlowShare == "" {
		return FlowShareInflight
	}
	return s.FlowShare
}

func (c *Controller) rateBand(p int) *rateBand {
	for _, b := range c.rates {
		if b.priority == p {
			return b
		}
	}
	return nil
}

// decay brings the band's counts to now (time constant tau ns) and
// forgets the flows that have asked for nothing for long.
func (b *rateBand) decay(now int64, tau float64) {
	if now <= b.at {
		return
	}
	k := math.Exp(-float64(now-b.at) / tau)
	b.at = now
	kept := b.flows[:0]
	for _, f := range b.flows {
		f.offers *= k
		f.admits *= k
		if f.offers >= rateForget || f.admits >= rateForget {
			kept = append(kept, f)
		}
	}
	clear(b.flows[len(kept):])
	b.flows = kept
}

// waterfill sets b.shares: the band's admissions split max-min by weight
// over the flows' demands.
func (b *rateBand) waterfill() {
	if b.fresh {
		return
	}
	n := len(b.flows)
	b.shares = append(b.shares[:0], make([]float64, n)...)
	idx := b.order[:0]
	left, weights := 0.0, 0.0
	for i, f := range b.flows {
		idx = append(idx, i)
		left += f.admits
		weights += f.weight
	}
	b.order = idx
	sort.SliceStable(idx, func(x, y int) bool {
		fx, fy := b.flows[idx[x]], b.flows[idx[y]]
		return fx.offers/fx.weight < fy.offers/fy.weight
	})
	for _, i := range idx {
		f := b.flows[i]
		s := min(f.offers, left*f.weight/weights)
		b.shares[i] = s
		left -= s
		weights -= f.weight
	}
	b.fresh = true
}

// rateOver reports whether flow fl of band p has been admitted more than
// rateSlack requests beyond its share, at the controller's last time (see
// the top of the file).
func (c *Controller) rateOver(p int, fl string) bool {
	b := c.rateBand(p)
	if b == nil {
		return false
	}
	b.waterfill()
	k := 1.0
	if c.flowNow > b.at {
		k = math.Exp(-float64(c.flowNow-b.at) / c.window())
	}
	for i, f := range b.flows {
		if f.name == fl {
			return (f.admits-b.shares[i])*k > rateSlack
		}
	}
	return false
}

// RateShare is flow fl of band p's decayed admissions and its max-min share
// of the band's, at the time of the last count (FlowShareRate; 0, 0 when
// not counted).
func (c *Controller) RateShare(p int, fl string) (admits, share float64) {
	b := c.rateBand(p)
	if b == nil {
		return 0, 0
	}
	b.waterfill()
	for i, f := range b.flows {
		if f.name == fl {
			return f.admits, b.shares[i]
		}
	}
	return 0, 0
}
