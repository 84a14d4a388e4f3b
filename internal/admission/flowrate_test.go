package admission

import (
	"math"
	"math/rand/v2"
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
	names := []string{"a", "b", "c"}
	for seed := uint64(1); seed <= 20; seed++ {
		rng := rand.New(rand.NewPCG(seed, 23))
		s := on()
		s.QueueCapacity, s.QueueThreshold, s.WorkLimitNs = 1+rng.IntN(20), 100, int64(rng.IntN(3)+1)*sec/2
		s.WorkModel = []string{WorkBacklog, WorkInflight, WorkPrefill}[rng.IntN(3)]
		s.FlowGate, s.FlowShare = float64(1+rng.IntN(10))/10, FlowShareRate
		s.FlowWindowNs = int64(rng.IntN(3)) * sec // 0: the default
		if seed%3 == 0 {
			s.FlowWeights = map[string]float64{"f": 2}
		}
		c := New(s)
		l := c.Ledger()
		ends := map[uint64]string{}
		end := func(id uint64, how string) {
			if prev, ok := ends[id]; ok {
				t.Fatalf("seed %d: request %d ended twice (%s, then %s)", seed, id, prev, how)
			}
			ends[id] = how
		}
		var order []uint64
		reps := map[uint64]string{}
		now, next := int64(0), uint64(0)
		route := func(it Item) {
			rep := names[rng.IntN(len(names))]
			l.Dispatched(it.ID, rep, 1+int64(rng.IntN(4000)), 0, now)
			c.Flow(it.ID, it.Priority, it.Flow)
			order, reps[it.ID] = append(order, it.ID), rep
		}
		view := func() *policy.View {
			return &policy.View{Names: names, Rows: make([]policy.Row, len(names)), Now: now}
		}
		for step := 0; step < 3000; step++ {
			now += int64(rng.IntN(100)) * ms
			switch op := rng.IntN(10); {
			case op < 4:
				next++
				fl := "f" // the flooder: half the offers
				if rng.IntN(2) == 0 {
					fl = names[rng.IntN(len(names))]
				}
				it := Item{ID: next, Priority: rng.IntN(2), Flow: fl, Arrived: now}
				if rng.IntN(2) == 0 {
					it.Deadline = now + int64(rng.IntN(3000))*ms
				}
				v, out, ok := c.OfferScore(it, now, c.Score(view(), 0))
				if ok {
					end(out.ID, "displaced")
				}
				switch v.Outcome {
				case Admitted:
					end(it.ID, "admitted")
					route(it)
				case Shed:
					end(it.ID, "shed")
				}
			case op < 6:
				if it, ok := c.DispatchScore(now, c.Score(view(), 0)); ok {
					end(it.ID, "admitted")
					route(it)
				}
			case op < 8 && len(order) > 0:
				k := rng.IntN(len(order))
				id := order[k]
				if rng.IntN(2) == 0 {
					c.FirstToken(id, now)
					break
				}
				l.Answered(id, reps[id], now-ms, now, -1, 100, now)
				order = append(order[:k], order[k+1:]...)
			case op < 9:
				c.Expire(now, func(it Item, r Reason) { end(it.ID, r.String()) })
			default:
				if id := uint64(rng.IntN(int(next) + 1)); c.Cancel(id) {
					end(id, "cancelled")
				}
			}
			for id := uint64(1); id <= next; id++ {
				if c.Waiting(id) && l.Has(id) {
					t.Fatalf("seed %d: request %d both queued and sent", seed, id)
				}
			}
			for _, b := range c.rates {
				waterfilled(t, seed, b)
			}
		}
		for _, id := range order {
			l.Ended(id, now)
		}
		for {
			it, ok := c.DispatchScore(now, 0)
			if !ok {
				break
			}
			end(it.ID, "admitted")
		}
		if uint64(len(ends)) != next || l.InFlight() != 0 || c.Len() != 0 {
			t.Fatalf("seed %d: %d of %d requests ended, %d ledger entries, %d waiting", seed, len(ends), next, l.InFlight(), c.Len())
		}
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
