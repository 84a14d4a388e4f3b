package admission

import (
	"sort"
)

// Item is one request as admission sees it.
type Item struct {
	ID       uint64 // the driver's request id (unique among live items)
	Priority int    // band: higher is served first (GIE InferenceObjective priority)
	Flow     string // fairness id (tenant); "" is a flow too
	Arrived  int64  // when it reached the router (ns)
	// Deadline is when its first token is due (Arrived + its TTFT SLO), or 0
	// when it has none: then it waits at most Settings.MaxWaitNs.
	Deadline int64
	// Service is the predicted time (ns) from dispatch to its first token on
	// the best replica (queue there + prefill); 0 when unknown.
	Service int64
	Bytes   int64 // body bytes held while it waits
	Tokens  int64 // prompt + expected output tokens (budgets)
}

// Outcome is what became of an item at one step.
type Outcome uint8

// Outcomes.
const (
	Admitted  Outcome = iota // go on to routing now
	Queued                   // wait; Dispatch will hand it back
	Shed                     // refused (Reason says why)
	Cancelled                // its client went away while it waited
)

// Reason says why an item was shed. Its String is the metric label and the
// `reason` of the JSON error.
type Reason uint8

// Reasons to shed.
const (
	NoReason  Reason = iota
	QueueFull        // saturated and the queue is full (or has no room: capacity 0)
	Displaced        // queued, then pushed out by a higher band's request
	Deadline         // its TTFT deadline can no longer be met
	Timeout          // waited MaxWaitNs without a deadline of its own
	Budget           // its flow's token budget is spent
)

var reasonNames = [...]string{"", "queue-full", "displaced", "deadline", "timeout", "budget"}

func (r Reason) String() string {
	if int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return "unknown"
}

// Reasons lists every shed reason (metric label values).
func Reasons() []Reason { return []Reason{QueueFull, Displaced, Deadline, Timeout, Budget} }

// Verdict is the answer to Offer.
type Verdict struct {
	Outcome Outcome
	Reason  Reason
	// RetryAfterNs is a hint for a shed request's client (Retry-After).
	RetryAfterNs int64
}

// Controller is the admission state of one pool. Not safe for concurrent
// use: the driver serialises every call.
type Controller struct {
	s       Settings
	budgets *Budgets
	bands   []*band // sorted by priority, highest first
	byID    map[uint64]*entry
	n       int
	bytes   int64
	seq     uint64
	// recent holds the bands of the last dispatches (min-share accounting).
	recent    [shareWindow]int
	recentN   int
	recentPos int
	// interval is a moving mean of the time between dispatches (ns): the
	// expected wait of a request is its place in line times this.
	interval  float64
	lastAt    int64
	times     serviceTimes // recent dispatch-to-first-token times (ServiceQuantile)
	limits    []bandLimit  // Settings.BandLimits, highest band first
	tokenCap  int64        // the configured TokenCapacity (SetKVTokens derives the one in use)
	workLimit int64        // the configured WorkLimitNs (SetSLO derives the one in use)
	ledger    *Ledger      // the work term's per-request ledger (ledger.go)
	// The flow gate's rate share (flowrate.go): per band, and the time of
	// the last offer or dispatch, which its shares are read at.
	rates   []*rateBand
	flowNow int64
}

type bandLimit struct {
	priority int
	limit    float64
}

const shareWindow = 128

type band struct {
	priority int
	flows    map[string]*flow
	active   []*flow // flows with items, in activation order
	vtime    float64 // the band's virtual time (start-time fair queuing)
	n        int
}

type flow struct {
	name   string
	weight float64
	items  []*entry // fcfs: arrival order; edf: kept sorted by deadline
	tag    float64  // virtual start tag of its next item
	order  uint64   // activation sequence (ties between equal tags)
}

type entry struct {
	it  Item
	seq uint64
	fl  *flow
	bd  *band
}

// New returns a controller for s (s must be valid).
func New(s Settings) *Controller { return NewShared(s, NewBudgets(&s)) }

// NewShared returns a controller for s that charges the token budgets b,
// shared with other controllers (one per pool: a flow's budget is the
// flow's across pools). b is used under the same serialisation as the
// controllers.
func NewShared(s Settings, b *Budgets) *Controller {
	c := &Controller{s: s, budgets: b, byID: map[uint64]*entry{}, tokenCap: s.TokenCapacity, workLimit: s.WorkLimitNs,
		ledger: NewLedger()}
	c.ledger.model = s.WorkModel
	c.ledger.dec.q = s.DecodeQuantile
	bands := sortedBands(s.BandLimits)
	for i := len(bands) - 1; i >= 0; i-- {
		c.limits = append(c.limits, bandLimit{bands[i], s.BandLimits[bands[i]]})
	}
	return c
}

// Settings returns the controller's settings.
func (c *Controller) Settings() *Settings { return &c.s }

// Ledger returns the pool's work ledger: the driver records each routed
// request's uncached prompt (Dispatched), its end (Ended) and its answer
// (Learn), whatever the work model (the ledger costs nothing it is not fed).
func (c *Controller) Ledger() *Ledger { return c.ledger }

// Budgets returns the flows' token budgets (to correct a charge with the
// answer's counts).
func (c *Controller) Budgets() *Budgets { return c.budgets }

// Len is the number of waiting requests; Bytes their bodies' bytes.
func (c *Controller) Len() int     { return c.n }
func (c *Controller) Bytes() int64 { return c.bytes }

// BandLen returns the waiting requests of each band, highest first.
func (c *Controller) BandLen() (priorities []int, lens []int) {
	for _, b := range c.bands {
		priorities = append(priorities, b.priority)
		lens = append(lens, b.n)
	}
	return priorities, lens
}

// OfferScore decides for a new request, given the pool's saturation score
// (PoolScore). It is admitted at once when the score is below its band's
// limit (LimitOf) and nobody waits who would go before it: no request of
// its band or a higher one, no lower band due its minimum share. When the
// new request displaces a waiting one, that one is returned with ok: the
// driver answers it as shed (reason Displaced).
func (c *Controller) OfferScore(it Item, now int64, score float64) (v Verdict, displaced Item, ok bool) {
	if !c.s.Enabled {
		return Verdict{Outcome: Admitted}, Item{}, false
	}
	c.ageService(now)
	if allowed, wait := c.budgets.Allowed(it.Flow, now); !allowed {
		return Verdict{Outcome: Shed, Reason: Budget, RetryAfterNs: wait}, Item{}, false
	}
	c.flowNow = now
	c.noteOffer(it.Priority, it.Flow, now)
	if it.Deadline > 0 && now+c.service(&it) > it.Deadline {
		return Verdict{Outcome: Shed, Reason: Deadline}, Item{}, false
	}
	if c.atOnce(it.Priority, it.Flow, score) {
		if c.n > 0 { // someone (of a lower band) waits: a share counts
			c.noteBand(it.Priority)
		}
		c.admit(&it, now)
		c.noteAdmit(it.Priority, it.Flow, now)
		c.pace(now)
		return Verdict{Outcome: Admitted}, Item{}, false
	}
	if it.Deadline > 0 && now+c.expectedWait(it.Priority, it.Flow, score)+c.service(&it) > it.Deadline {
		return Verdict{Outcome: Shed, Reason: Deadline, RetryAfterNs: c.expectedWait(it.Priority, it.Flow, score)}, Item{}, false
	}
	if !c.fits(&it) {
		victim := c.victim(&it, now)
		if victim == nil {
			return Verdict{Outcome: Shed, Reason: QueueFull, RetryAfterNs: c.expectedWait(it.Priority, it.Flow, score)}, Item{}, false
		}
		displaced, ok = victim.it, true
		c.remove(victim)
	}
	c.push(it)
	return Verdict{Outcome: Queued}, displaced, ok
}

// service is it's predicted time from dispatch to first token: its own
// prediction, at least Settings.ServiceFloorNs and the recent quantile
// (ObserveService).
func (c *Controller) service(it *Item) int64 {
	return max(it.Service, c.s.ServiceFloorNs, c.times.q)
}

// fits reports whether it can join the queue without pushing anyone out.
func (c *Controller) fits(it *Item) bool {
	if c.n+1 > c.s.QueueCapacity {
		return false
	}
	return c.s.QueueBytes == 0 || c.bytes+it.Bytes <= c.s.QueueBytes
}

// victim picks who leaves a full queue for it: first a waiting request that
// cannot meet its deadline anyway, else the newest request of the lowest
// band below it's (GIE displacement), else nobody (it is refused). Only a
// queue with room for it once the victim is gone counts.
func (c *Controller) victim(it *Item, now int64) *entry {
	if c.s.QueueCapacity == 0 {
		return nil
	}
	var pick *entry
	for _, b := range c.bands {
		for _, f := range b.active {
			for _, e := range f.items {
				if e.it.Deadline > 0 && now+c.service(&e.it) > e.it.Deadline && (pick == nil || e.seq < pick.seq) {
					pick = e
				}
			}
		}
	}
	if pick == nil {
		for i := len(c.bands) - 1; i >= 0 && pick == nil; i-- {
			b := c.bands[i]
			if b.priority >= it.Priority {
				break
			}
			for _, f := range b.active {
				for _, e := range f.items {
					if pick == nil || e.seq > pick.seq {
						pick = e
					}
				}
			}
		}
	}
	if pick != nil && c.s.QueueBytes > 0 && c.bytes-pick.it.Bytes+it.Bytes > c.s.QueueBytes {
		return nil
	}
	return pick
}

// DispatchScore hands back the next waiting request to route, given the
// pool's saturation score: from the highest band with requests waiting, if
// the score is below that band's limit, unless a lower band is due its
// minimum share (then it goes, while the score is below Limit). The driver
// calls it whenever capacity may have freed (an answer ended, a report came
// in, a replica joined) and after each dispatch, until it returns false.
func (c *Controller) DispatchScore(now int64, score float64) (Item, bool) {
	if c.n == 0 {
		return Item{}, false
	}
	c.flowNow = now
	b := c.nextBand(score)
	if b == nil {
		return Item{}, false
	}
	f := c.pick(b, score)
	if f == nil { // every waiting flow of the band is held by the flow gate
		return Item{}, false
	}
	e := f.items[0]
	b.vtime = f.tag
	f.tag += 1 / f.weight
	c.forfeit(b, f, score)
	c.remove(e)
	c.admit(&e.it, now)
	c.noteAdmit(b.priority, e.it.Flow, now)
	c.recordDispatch(b.priority, now)
	return e.it, true
}

// Expire sheds the waiting requests that have waited too long or can no
// longer meet their deadline, calling shed for each, oldest first.
func (c *Controller) Expire(now int64, shed func(Item, Reason)) int {
	c.ageService(now)
	var out []*entry
	var why []Reason
	for _, b := range c.bands {
		for _, f := range b.active {
			for _, e := range f.items {
				if r := c.expired(&e.it, now); r != NoReason {
					out, why = append(out, e), append(why, r)
				}
			}
		}
	}
	idx := make([]int, len(out))
	for i := range idx {
		idx[i] = i
	}
	sort.Slice(idx, func(a, b int) bool { return out[idx[a]].seq < out[idx[b]].seq })
	for _, i := range idx {
		c.remove(out[i])
		shed(out[i].it, why[i])
	}
	return len(out)
}

func (c *Controller) expired(it *Item, now int64) Reason {
	switch {
	case it.Deadline > 0 && now+c.service(it) > it.Deadline:
		return Deadline
	case it.Deadline == 0 && now-it.Arrived >= c.s.MaxWaitNs:
		return Timeout
	}
	return NoReason
}

// NextExpiry is the earliest time at which Expire would shed something, or
// 0 when nothing waits (the driver's timer).
func (c *Controller) NextExpiry() int64 {
	var at int64
	for _, b := range c.bands {
		for _, f := range b.active {
			for _, e := range f.items {
				t := e.it.Arrived + c.s.MaxWaitNs
				if e.it.Deadline > 0 {
					t = e.it.Deadline - c.service(&e.it) + 1
				}
				if at == 0 || t < at {
					at = t
				}
			}
		}
	}
	return at
}

// Cancel removes a waiting request whose client went away; false if it was
// not waiting (already dispatched or shed).
func (c *Controller) Cancel(id uint64) bool {
	e := c.byID[id]
	if e == nil {
		return false
	}
	c.remove(e)
	return true
}

// Waiting reports whether id is in the queue.
func (c *Controller) Waiting(id uint64) bool { return c.byID[id] != nil }
