package admission

import (
	"math/rand/v2"
	"testing"
)

func TestLimitOf(t *testing.T) {
	s := on()
	s.BandLimits = map[int]float64{0: 0.6}
	c := New(s)
	for p, want := range map[int]float64{10: 1, 5: 1, 0: 0.6, -5: 0.6} {
		if got := c.LimitOf(p); got != want {
			t.Errorf("band %d: limit %v, want %v", p, got, want)
		}
	}
	// A lower band's own limit above a higher band's: the higher one's
	// bounds it (limits never rise going down).
	s.BandLimits = map[int]float64{5: 0.8, 0: 0.9, -5: 0.3}
	c = New(s)
	for p, want := range map[int]float64{10: 1, 5: 0.8, 0: 0.8, -1: 0.8, -5: 0.3, -9: 0.3} {
		if got := c.LimitOf(p); got != want {
			t.Errorf("band %d: limit %v, want %v", p, got, want)
		}
	}
}

// TestBandLimitsHoldHeadroom, hand-computed: band 0 is saturated at 0.6,
// band 10 at 1. At 0.7 a band-0 request waits and a band-10 one is
// admitted at once, past it; nothing is dispatched at 0.7; at 0.5 band 0's
// waiting request goes.
func TestBandLimitsHoldHeadroom(t *testing.T) {
	s := on()
	s.BandLimits = map[int]float64{0: 0.6}
	c := New(s)
	if v, _, _ := c.OfferScore(Item{ID: 1, Priority: 0}, 0, 0.5); v.Outcome != Admitted {
		t.Fatalf("band 0 at 0.5: %+v, want admitted", v)
	}
	if v, _, _ := c.OfferScore(Item{ID: 2, Priority: 0}, 1, 0.7); v.Outcome != Queued {
		t.Fatalf("band 0 at 0.7: %+v, want queued", v)
	}
	if v, _, _ := c.OfferScore(Item{ID: 3, Priority: 10}, 2, 0.7); v.Outcome != Admitted {
		t.Fatalf("band 10 at 0.7: %+v, want admitted at once", v)
	}
	if v, _, _ := c.OfferScore(Item{ID: 4, Priority: 10}, 3, 1.0); v.Outcome != Queued {
		t.Fatalf("band 10 at 1.0: %+v, want queued", v)
	}
	if it, ok := c.DispatchScore(4, 0.7); !ok || it.ID != 4 {
		t.Fatalf("dispatch at 0.7: %d %v, want band 10's 4", it.ID, ok)
	}
	if it, ok := c.DispatchScore(5, 0.7); ok {
		t.Fatalf("dispatch at 0.7 gave band 0's %d: its limit is 0.6", it.ID)
	}
	if it, ok := c.DispatchScore(6, 0.5); !ok || it.ID != 2 {
		t.Fatalf("dispatch at 0.5: %d %v, want 2", it.ID, ok)
	}
	// A band-10 request does not skip a band-10 queue: same band, FCFS.
	mustQueue(t, c, Item{ID: 5, Priority: 10}, 7)
	if v, _, _ := c.OfferScore(Item{ID: 6, Priority: 10}, 8, 0.1); v.Outcome != Queued {
		t.Fatalf("band 10 behind band 10: %+v, want queued", v)
	}
}

// TestBandLimitsKeepMinShare: the top band keeps the pool at 0.8, above
// band 0's limit (0.6); band 0's 25 % share still holds there, hand-counted
// from the window rule (due = 0.25·n − got > 0 serves band 0): of the first
// 8 dispatches band 0 gets the 2nd and the 6th; 50 of 200 in all. Without a
// share it gets none, and none at 0.8 once band 10 is empty either.
func TestBandLimitsKeepMinShare(t *testing.T) {
	s := on()
	s.QueueCapacity = 1000
	s.BandLimits = map[int]float64{0: 0.6}
	s.MinShare = map[int]float64{0: 0.25}
	fill := func(c *Controller) {
		for i := 0; i < 300; i++ {
			mustQueue(t, c, Item{ID: uint64(2 * i), Priority: 10}, 0)
			mustQueue(t, c, Item{ID: uint64(2*i + 1), Priority: 0}, 0)
		}
	}
	c := New(s)
	fill(c)
	var got []int
	low := 0
	for i := 0; i < 200; i++ {
		it, ok := c.DispatchScore(int64(i), 0.8)
		if !ok {
			t.Fatalf("dispatch %d: none at 0.8", i)
		}
		if i < 8 {
			got = append(got, it.Priority)
		}
		if it.Priority == 0 {
			low++
		}
	}
	want := []int{10, 0, 10, 10, 10, 0, 10, 10}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("first dispatches %v, want %v", got, want)
		}
	}
	if low != 50 {
		t.Fatalf("band 0 got %d of 200 at 0.8, want 50 (min share 0.25)", low)
	}
	s.MinShare = nil
	c = New(s)
	fill(c)
	for i := 0; i < 300; i++ {
		if it, _ := c.DispatchScore(int64(i), 0.8); it.Priority != 10 {
			t.Fatalf("dispatch %d: band %d, want 10 (band 0 above its limit)", i, it.Priority)
		}
	}
	if _, ok := c.DispatchScore(400, 0.8); ok {
		t.Fatal("band 0 dispatched at 0.8 above its 0.6 limit")
	}
}

// TestBandLimitsProperty: random traffic over random scores, with band
// limits and a minimum share. Every request ends exactly once; one that is
// admitted is no longer waiting (never both queued and sent); none is
// admitted at a score at or above its band's limit unless its band was
// short of its share (and then below Limit); none is admitted at once
// while a request of its band or a higher one waits.
func TestBandLimitsProperty(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		rng := rand.New(rand.NewPCG(seed, 11))
		s := on()
		s.QueueCapacity = 1 + rng.IntN(30)
		s.BandLimits = map[int]float64{1: 0.8, 0: 0.5}
		s.MinShare = map[int]float64{0: 0.1}
		c := New(s)
		ends := map[uint64]string{}
		end := func(id uint64, how string) {
			if prev, ok := ends[id]; ok {
				t.Fatalf("seed %d: request %d ended twice (%s, then %s)", seed, id, prev, how)
			}
			if c.Waiting(id) {
				t.Fatalf("seed %d: request %d %s and still waiting", seed, id, how)
			}
			ends[id] = how
		}
		admittedAt := func(it Item, score float64, short bool) {
			lim := c.LimitOf(it.Priority)
			if score >= lim && !(short && score < s.Limit) {
				t.Fatalf("seed %d: request %d of band %d admitted at %.2f, its limit %.2f", seed, it.ID, it.Priority, score, lim)
			}
		}
		now, next := int64(0), uint64(0)
		for step := 0; step < 3000; step++ {
			now += int64(rng.IntN(200)) * 1e6
			score := rng.Float64() * 1.2
			switch op := rng.IntN(10); {
			case op < 5:
				next++
				it := Item{ID: next, Priority: rng.IntN(3), Flow: string(rune('a' + rng.IntN(3))), Arrived: now}
				if rng.IntN(2) == 0 {
					it.Deadline, it.Service = now+int64(rng.IntN(5000))*1e6, int64(rng.IntN(500))*1e6
				}
				higher := false
				for _, b := range c.bands {
					higher = higher || (b.n > 0 && b.priority >= it.Priority)
				}
				v, out, ok := c.OfferScore(it, now, score)
				if ok {
					end(out.ID, "displaced")
				}
				switch v.Outcome {
				case Admitted:
					if higher {
						t.Fatalf("seed %d: request %d admitted at once past a waiting request of its band or above", seed, it.ID)
					}
					admittedAt(it, score, false)
					end(it.ID, "admitted")
				case Shed:
					end(it.ID, "shed")
				}
			case op < 8:
				short := false
				if b := c.bandOf(0); b != nil && b.n > 0 {
					short = c.shortfall(b) > 0
				}
				if it, ok := c.DispatchScore(now, score); ok {
					admittedAt(it, score, short && it.Priority == 0)
					end(it.ID, "admitted")
				}
			case op < 9:
				c.Expire(now, func(it Item, r Reason) { end(it.ID, r.String()) })
			default:
				if id := uint64(rng.IntN(int(next) + 1)); c.Cancel(id) {
					end(id, "cancelled")
				}
			}
		}
		for c.Len() > 0 {
			it, _ := c.DispatchScore(now, 0)
			end(it.ID, "admitted")
		}
		if uint64(len(ends)) != next {
			t.Fatalf("seed %d: %d of %d requests ended", seed, len(ends), next)
		}
	}
}

// bandOf is the band of priority p, if it exists (tests).
func (c *Controller) bandOf(p int) *band {
	for _, b := range c.bands {
		if b.priority == p {
			return b
		}
	}
	return nil
}
