package admission

// The queue's bookkeeping: bands, flows, the dispatch record.

// admit charges an admitted request to its flow's budget.
func (c *Controller) admit(it *Item, now int64) {
	c.budgets.Charge(it.Flow, it.Tokens, now)
}

// recordDispatch keeps the moving mean of the time between dispatches from
// the queue and the window of recent dispatch bands.
func (c *Controller) recordDispatch(priority int, now int64) {
	c.pace(now)
	c.noteBand(priority)
}

// noteBand records an admission of band priority in the window of recent
// admissions while requests wait (min-share accounting).
func (c *Controller) noteBand(priority int) {
	c.recent[c.recentPos] = priority
	c.recentPos = (c.recentPos + 1) % shareWindow
	if c.recentN < shareWindow {
		c.recentN++
	}
}

// LimitOf is the pool score at which band p counts as saturated: the least
// of Limit and the BandLimits of p and of every band above it (so a lower
// band's limit is never above a higher one's).
func (c *Controller) LimitOf(p int) float64 {
	l := c.s.Limit
	for _, bl := range c.limits {
		if bl.priority < p {
			break
		}
		l = min(l, bl.limit)
	}
	return l
}

// atOnce reports whether a request of band p and flow fl may skip the
// queue at score: below its band's limit, with nobody waiting of its band
// or above, and no lower band due its minimum share. While the flow gate
// applies (flowgate.go), fl must not be above its share, and the waiting
// flows of its own band do not hold it back when each of them is.
func (c *Controller) atOnce(p int, fl string, score float64) bool {
	if score >= c.LimitOf(p) {
		return false
	}
	gate := c.gated(p, score)
	if gate && c.over(p, fl) {
		return false
	}
	for _, b := range c.bands {
		if b.n == 0 {
			continue
		}
		switch {
		case b.priority == p && gate:
			if !c.allOver(b) {
				return false
			}
		case b.priority >= p || c.shortfall(b) > 0:
			return false
		}
	}
	return true
}

// expectedWait estimates how long a request of band p and flow fl joining
// now, at score, waits: the requests that go before it, plus itself, times
// the mean interval between admissions; 0 before any was seen. Before it go
// every request of a higher band and, in its own band, what fair queuing
// serves first (aheadOf).
func (c *Controller) expectedWait(p int, fl string, score float64) int64 {
	if c.interval == 0 {
		return 0
	}
	ahead := 0.0
	for _, b := range c.bands {
		switch {
		case b.priority > p:
			ahead += float64(b.n)
		case b.priority == p:
			ahead += c.aheadOf(b, fl, score)
		}
	}
	return int64((ahead + 1) * c.interval)
}

// aheadOf is how many of band b's waiting requests fair queuing serves
// before a new request of flow fl (weight w): the k requests of its own
// flow ahead of it, and of every other flow g at most (k+1)·w_g/w (a light
// flow does not wait behind a flooder's whole backlog). While the flow
// gate applies at score and fl is not over its share, the flows over
// theirs are passed over (flowgate.go) and none of theirs is ahead.
func (c *Controller) aheadOf(b *band, fl string, score float64) float64 {
	w := c.weight(fl)
	gate := c.gated(b.priority, score) && !c.over(b.priority, fl)
	k := 0.0
	if f := b.flows[fl]; f != nil {
		k = float64(len(f.items))
	}
	ahead := k
	for _, g := range b.active {
		if g.name != fl && !(gate && c.over(b.priority, g.name)) {
			ahead += min(float64(len(g.items)), (k+1)*g.weight/w)
		}
	}
	return ahead
}

// weight is flow fl's weight within its band (1 unless configured).
func (c *Controller) weight(fl string) float64 {
	if w, ok := c.s.FlowWeights[fl]; ok {
		return w
	}
	return 1
}

// admitted at once also counts in the interval between admissions: it is
// the pool's pace, whether the request waited or not.
func (c *Controller) pace(now int64) {
	if c.lastAt > 0 && now >= c.lastAt {
		d := float64(now - c.lastAt)
		if c.interval == 0 {
			c.interval = d
		} else {
			c.interval = 0.8*c.interval + 0.2*d
		}
	}
	c.lastAt = now
}

// nextBand is the band to serve at score: the highest with requests
// waiting, if score is below its limit, unless a lower band with a
// guaranteed share has had less than it over the last admissions (then the
// one furthest below its share, while score is below Limit); nil: none may
// go.
func (c *Controller) nextBand(score float64) *band {
	var top, starved *band
	worst := 0.0
	for _, b := range c.bands {
		if b.n == 0 {
			continue
		}
		if top == nil {
			top = b
			continue
		}
		if due := c.shortfall(b); due > 0 && (starved == nil || due > worst) {
			starved, worst = b, due
		}
	}
	switch {
	case starved != nil && score < c.s.Limit:
		return starved
	case top != nil && score < c.LimitOf(top.priority):
		return top
	}
	return nil
}

// shortfall is how many admissions band b is short of its minimum share over the
// recent window (≤ 0: none).
func (c *Controller) shortfall(b *band) float64 {
	share := c.s.MinShare[b.priority]
	if share <= 0 {
		return 0
	}
	got := 0
	for i := 0; i < c.recentN; i++ {
		if c.recent[i] == b.priority {
			got++
		}
	}
	return share*float64(c.recentN) - float64(got)
}

// push adds it to its band and flow.
func (c *Controller) push(it Item) {
	b := c.band(it.Priority)
	f := b.flows[it.Flow]
	if f == nil {
		w := 1.0
		if v, ok := c.s.FlowWeights[it.Flow]; ok {
			w = v
		}
		f = &flow{name: it.Flow, weight: w}
		b.flows[it.Flow] = f
	}
	if len(f.items) == 0 {
		f.tag = max(f.tag, b.vtime)
		f.order = c.seq
		b.active = append(b.active, f)
	}
	e := &entry{it: it, seq: c.seq, fl: f, bd: b}
	c.seq++
	at := len(f.items)
	if c.s.Order == OrderEDF {
		for at > 0 && c.due(f.items[at-1]) > c.due(e) {
			at--
		}
	}
	f.items = append(f.items, nil)
	copy(f.items[at+1:], f.items[at:])
	f.items[at] = e
	c.byID[it.ID] = e
	b.n++
	c.n++
	c.bytes += it.Bytes
}

// due is an item's deadline for EDF order (no deadline: its wait limit).
func (c *Controller) due(e *entry) int64 {
	if e.it.Deadline > 0 {
		return e.it.Deadline
	}
	return e.it.Arrived + c.s.MaxWaitNs
}

// band returns the band of priority p, creating it in order.
func (c *Controller) band(p int) *band {
	at := len(c.bands)
	for i, b := range c.bands {
		if b.priority == p {
			return b
		}
		if b.priority < p {
			at = i
			break
		}
	}
	b := &band{priority: p, flows: map[string]*flow{}}
	c.bands = append(c.bands, nil)
	copy(c.bands[at+1:], c.bands[at:])
	c.bands[at] = b
	return b
}

// remove takes e out of the queue.
func (c *Controller) remove(e *entry) {
	f, b := e.fl, e.bd
	for i, x := range f.items {
		if x == e {
			f.items = append(f.items[:i], f.items[i+1:]...)
			break
		}
	}
	if len(f.items) == 0 {
		for i, x := range b.active {
			if x == f {
				b.active = append(b.active[:i], b.active[i+1:]...)
				break
			}
		}
	}
	delete(c.byID, e.it.ID)
	b.n--
	c.n--
	c.bytes -= e.it.Bytes
}
