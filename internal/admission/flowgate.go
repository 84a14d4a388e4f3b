package admission

// The flow gate (Settings.FlowGate; docs/admission.md, "flow_gate"): while
// the pool's score is at least FlowGate × a band's limit, a flow whose
// share of the band's requests in flight is above its fair share waits in
// the queue instead of being admitted at once, and the queue's dispatch
// passes it over, so that the capacity left between the gate and the
// band's limit goes to the band's other flows first.
//
// The in-flight counts are the work ledger's: the drivers tag each routed
// request's entry with its band and flow (Controller.Flow, right after
// Ledger.Dispatched), and the entry's end (Ended, Answered) releases it.
// A flow's fair share is max-min by weight over the band's active flows
// (those with requests in flight or waiting, and the one asking):
//
//	over(f) ⇔ n_f / w_f > N / W
//
// with n_f the flow's requests in flight, N the band's, W the sum of the
// active flows' weights: a flow with nothing in flight is never over.

// flowKey names a flow within its band.
type flowKey struct {
	priority int
	flow     string
}

// bandFlight is a band's part of the ledger's in-flight counts.
type bandFlight struct {
	n      int     // requests in flight
	flows  int     // flows with requests in flight
	weight float64 // the sum of those flows' weights
}

// flowCount is one flow's requests in flight.
type flowCount struct {
	n      int
	weight float64
}

// Flow tags request id's ledger entry (Ledger.Dispatched) with its band
// and flow, counting it in flight for the flow gate until the entry ends.
// No entry: nothing is counted.
func (c *Controller) Flow(id uint64, priority int, flow string) {
	c.ledger.class(id, flowKey{priority, flow}, c.weight(flow))
}

// FlowInFlight is the requests of band priority and flow in flight (those
// tagged by Flow whose entries have not ended).
func (c *Controller) FlowInFlight(priority int, flow string) int {
	if f := c.ledger.flows[flowKey{priority, flow}]; f != nil {
		return f.n
	}
	return 0
}

func (l *Ledger) class(id uint64, k flowKey, weight float64) {
	e, ok := l.reqs[id]
	if !ok || e.classed {
		return
	}
	e.class, e.classed = k, true
	l.reqs[id] = e
	if l.flows == nil {
		l.flows, l.bandsIn = map[flowKey]*flowCount{}, map[int]*bandFlight{}
	}
	f := l.flows[k]
	if f == nil {
		f = &flowCount{weight: weight}
		l.flows[k] = f
	}
	b := l.bandsIn[k.priority]
	if b == nil {
		b = &bandFlight{}
		l.bandsIn[k.priority] = b
	}
	if f.n == 0 {
		b.flows++
		b.weight += f.weight
	}
	f.n++
	b.n++
}

// unclass releases an ended entry's count.
func (l *Ledger) unclass(e ledgerEntry) {
	if !e.classed {
		return
	}
	f, b := l.flows[e.class], l.bandsIn[e.class.priority]
	f.n--
	b.n--
	if f.n == 0 {
		delete(l.flows, e.class)
		b.flows--
		b.weight -= f.weight
		if b.flows == 0 {
			delete(l.bandsIn, e.class.priority)
		}
	}
}

// gated reports whether the flow gate applies to band p at score.
func (c *Controller) gated(p int, score float64) bool {
	return c.s.FlowGate > 0 && score >= c.s.FlowGate*c.LimitOf(p)
}

// over reports whether flow fl of band p is above its fair share of the
// band's requests in flight (see the top of the file).
func (c *Controller) over(p int, fl string) bool {
	if c.rateOn() {
		return c.rateOver(p, fl)
	}
	k := flowKey{p, fl}
	f := c.ledger.flows[k]
	if f == nil {
		return false
	}
	bf := c.ledger.bandsIn[p]
	weight := bf.weight
	if b := c.find(p); b != nil {
		for _, g := range b.active { // waiting flows with nothing in flight are active too
			if c.ledger.flows[flowKey{p, g.name}] == nil {
				weight += g.weight
			}
		}
	}
	return float64(f.n)*weight > float64(bf.n)*f.weight
}

// find returns the band of priority p, or nil.
func (c *Controller) find(p int) *band {
	for _, b := range c.bands {
		if b.priority == p {
			return b
		}
	}
	return nil
}

// allOver reports whether every flow of band b that waits is above its
// share (held by the gate, not waiting for capacity).
func (c *Controller) allOver(b *band) bool {
	for _, g := range b.active {
		if !c.over(b.priority, g.name) {
			return false
		}
	}
	return true
}

// pick is the flow of band b to serve next: the least virtual start tag
// (ties: activation order), passing over flows above their share while the
// gate applies (nil: every waiting flow is).
func (c *Controller) pick(b *band, score float64) *flow {
	gate := c.gated(b.priority, score)
	var f *flow
	for _, g := range b.active {
		if gate && c.over(b.priority, g.name) {
			continue
		}
		if f == nil || g.tag < f.tag || (g.tag == f.tag && g.order < f.order) {
			f = g
		}
	}
	return f
}

// forfeit brings the virtual start tag of every flow of band b that the
// gate passed over while served was dispatched up to the band's virtual
// time: a flow held back by the gate saves no credit, as a flow that was
// idle saves none. Without it a flooder held back for a while has the
// least tag once the gate lifts and fair queuing hands it a burst of
// dispatches, one for each round it was passed over: the light flows'
// share taken back below the gate.
func (c *Controller) forfeit(b *band, served *flow, score float64) {
	if !c.gated(b.priority, score) {
		return
	}
	for _, g := range b.active {
		if g != served && g.tag < b.vtime && c.over(b.priority, g.name) {
			g.tag = b.vtime
		}
	}
}
