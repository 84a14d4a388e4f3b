package admission

import (
	"math"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/llm-ring/llm-ring/internal/policy"
)

// TestPropertyFlowRate drives a controller with the flow gate's rate share
// (random gate and window, three flows in two bands, one flooding) as the
// drivers do, its score from its own ledger: every offered request ends
// once as admitted, shed or cancelled; none is ever both waiting and in
// the ledger; after every step each band's shares are a max-min
// water-filling of its admissions over its demands: none negative or
// above its flow's demand, their sum min(admissions, demands), and a flow
// short of its demand holds at least every other flow's share per weight.
func TestPropertyFlowRate(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		r := newRateProp(t, seed)
		for step := 0; step < 3000; step++ {
			r.step()
			for id := uint64(1); id <= r.next; id++ {
				if r.c.Waiting(id) && r.c.Ledger().Has(id) {
					t.Fatalf("seed %d: request %d both queued and sent", seed, id)
				}
			}
			for _, b := range r.c.rates {
				waterfilled(t, seed, b)
			}
		}
		r.finish()
	}
}

// rateProp is TestPropertyFlowRate's driver.
type rateProp struct {
	t     *testing.T
	seed  uint64
	rng   *rand.Rand
	c     *Controller
	ends  map[uint64]string
	order []uint64 // in flight, in dispatch order
	reps  map[uint64]string
	now   int64
	next  uint64
}

var propNames = []string{"a", "b", "c"}

func newRateProp(t *testing.T, seed uint64) *rateProp {
	rng := rand.New(rand.NewPCG(seed, 23))
	s := on()
	s.QueueCapacity, s.QueueThreshold, s.WorkLimitNs = 1+rng.IntN(20), 100, int64(rng.IntN(3)+1)*sec/2
	s.WorkModel = []string{WorkBacklog, WorkInflight, WorkPrefill}[rng.IntN(3)]
	s.FlowGate, s.FlowShare = float64(1+rng.IntN(10))/10, FlowShareRate
	s.FlowWindowNs = int64(rng.IntN(3)) * sec // 0: the default
	if seed%3 == 0 {
		s.FlowWeights = map[string]float64{"f": 2}
	}
	return &rateProp{t: t, seed: seed, rng: rng, c: New(s), ends: map[uint64]string{}, reps: map[uint64]string{}}
}

func (r *rateProp) end(id uint64, how string) {
	if prev, ok := r.ends[id]; ok {
		r.t.Fatalf("seed %d: request %d ended twice (%s, then %s)", r.seed, id, prev, how)
	}
	r.ends[id] = how
}

func (r *rateProp) route(it Item) {
	rep := propNames[r.rng.IntN(len(propNames))]
	r.c.Ledger().Dispatched(it.ID, rep, 1+int64(r.rng.IntN(4000)), 0, r.now)
	r.c.Flow(it.ID, it.Priority, it.Flow)
	r.order, r.reps[it.ID] = append(r.order, it.ID), rep
}

func (r *rateProp) score() float64 {
	return r.c.Score(&policy.View{Names: propNames, Rows: make([]policy.Row, len(propNames)), Now: r.now}, 0)
}

// step does one random operation: an offer (half of them the flooder f's),
// a dispatch, a first token or an answer, an expiry pass or a cancel.
func (r *rateProp) step() {
	c, rng := r.c, r.rng
	r.now += int64(rng.IntN(100)) * ms
	switch op := rng.IntN(10); {
	case op < 4:
		r.next++
		fl := "f"
		if rng.IntN(2) == 0 {
			fl = propNames[rng.IntN(len(propNames))]
		}
		it := Item{ID: r.next, Priority: rng.IntN(2), Flow: fl, Arrived: r.now}
		if rng.IntN(2) == 0 {
			it.Deadline = r.now + int64(rng.IntN(3000))*ms
		}
		v, out, ok := c.OfferScore(it, r.now, r.score())
		if ok {
			r.end(out.ID, "displaced")
		}
		switch v.Outcome {
		case Admitted:
			r.end(it.ID, "admitted")
			r.route(it)
		case Shed:
			r.end(it.ID, "shed")
		}
	case op < 6:
		if it, ok := c.DispatchScore(r.now, r.score()); ok {
			r.end(it.ID, "admitted")
			r.route(it)
		}
	case op < 8 && len(r.order) > 0:
		k := rng.IntN(len(r.order))
		id := r.order[k]
		if rng.IntN(2) == 0 {
			c.FirstToken(id, r.now)
			break
		}
		c.Ledger().Answered(id, r.reps[id], r.now-ms, r.now, -1, 100, r.now)
		r.order = append(r.order[:k], r.order[k+1:]...)
	case op < 9:
		c.Expire(r.now, func(it Item, why Reason) { r.end(it.ID, why.String()) })
	default:
		if id := uint64(rng.IntN(int(r.next) + 1)); c.Cancel(id) {
			r.end(id, "cancelled")
		}
	}
}

// finish ends what is in flight, dispatches what waits and checks that
// every request ended once.
func (r *rateProp) finish() {
	l := r.c.Ledger()
	for _, id := range r.order {
		l.Ended(id, r.now)
	}
	for {
		it, ok := r.c.DispatchScore(r.now, 0)
		if !ok {
			break
		}
		r.end(it.ID, "admitted")
	}
	if uint64(len(r.ends)) != r.next || l.InFlight() != 0 || r.c.Len() != 0 {
		r.t.Fatalf("seed %d: %d of %d requests ended, %d ledger entries, %d waiting", r.seed, len(r.ends), r.next, l.InFlight(), r.c.Len())
	}
}

// waterfilled checks b's shares against its counts (see TestPropertyFlowRate).
func waterfilled(t *testing.T, seed uint64, b *rateBand) {
	t.Helper()
	b.waterfill()
	const eps = 1e-9
	var admits, demand, sum float64
	for i, f := range b.flows {
		s := b.shares[i]
		if s < -eps || s > f.offers+eps || f.admits < 0 {
			t.Fatalf("seed %d: band %d flow %s: share %v, offers %v, admissions %v", seed, b.priority, f.name, s, f.offers, f.admits)
		}
		admits, demand, sum = admits+f.admits, demand+f.offers, sum+s
	}
	if math.Abs(sum-min(admits, demand)) > eps*max(1, admits) {
		t.Fatalf("seed %d: band %d: shares sum to %v, want min(%v, %v)", seed, b.priority, sum, admits, demand)
	}
	for i, f := range b.flows {
		if b.shares[i] >= f.offers-eps {
			continue
		}
		for j, g := range b.flows {
			if b.shares[j]/g.weight > b.shares[i]/f.weight+eps {
				t.Fatalf("seed %d: band %d: %s short of its demand holds %v, %s holds %v", seed, b.priority, f.name, b.shares[i], g.name, b.shares[j])
			}
		}
	}
}

// TestFlowRateBounded: a client that names a new flow with every request
// does not grow a band's rate share past rateMaxFlows; an untracked flow is
// never over (it fails open), and a flow forgotten makes room again.
func TestFlowRateBounded(t *testing.T) {
	s := on()
	s.FlowGate, s.FlowShare, s.FlowWindowNs = 0.5, FlowShareRate, sec
	c := New(s)
	for i := 1; i <= 3*rateMaxFlows; i++ {
		c.OfferScore(Item{ID: uint64(i), Flow: "f" + strconv.Itoa(i)}, sec, 0.2)
	}
	if n := len(c.rates[0].flows); n != rateMaxFlows {
		t.Fatalf("%d flows tracked, want %d", n, rateMaxFlows)
	}
	last := "f" + strconv.Itoa(3*rateMaxFlows)
	if a, sh := c.RateShare(0, last); a != 0 || sh != 0 || c.rateOver(0, last) {
		t.Fatalf("untracked flow: admits %v share %v over %v", a, sh, c.rateOver(0, last))
	}
	// 20 windows later every tracked flow is forgotten: the next is counted.
	c.OfferScore(Item{ID: 1 << 20, Flow: "late"}, 21*sec, 0.2)
	if a, _ := c.RateShare(0, "late"); a != 1 || len(c.rates[0].flows) != 1 {
		t.Fatalf("late flow: admits %v, %d flows", a, len(c.rates[0].flows))
	}
}
