package sim

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/llm-ring/llm-ring/internal/model"
	"github.com/llm-ring/llm-ring/internal/ring"
	"github.com/llm-ring/llm-ring/internal/state"
	"github.com/llm-ring/llm-ring/internal/traffic"
)

// cachedShare is the share of follow-up turns' prompt tokens that the
// replicas reused from their caches: cached / (cached + processed).
func cachedShare(rows rowsOf) float64 {
	var cached, all int
	for _, r := range rows {
		if r.Turn > 1 && r.Status == 200 {
			cached += r.CacheN
			all += r.CacheN + r.PromptN
		}
	}
	return float64(cached) / float64(max(all, 1))
}

// Issue 13: several router instances with instant gossip route exactly as
// one (the same rows); without gossip each sees a third of every
// conversation and the cache is lost; the spread of turns over instances is
// real (every instance routes some turns of most conversations).
func TestRoutersGossip(t *testing.T) {
	prof, err := traffic.LoadProfile(os.DirFS("."), "quick")
	if err != nil {
		t.Fatal(err)
	}
	run := func(routers int, gossip bool, delay time.Duration) rowsOf {
		t.Helper()
		var rows rowsOf
		if _, err := Run(context.Background(), Spec{RunID: "r", Policy: "llm-aware", Seed: 2, Profile: prof, Replicas: 3,
			Model: model.DefaultConfig(), Router: DefaultRouter(), SharedCPU: true,
			Routers: routers, Gossip: gossip, GossipDelay: delay}, &rows); err != nil {
			t.Fatal(err)
		}
		return rows
	}
	one := run(1, false, 0)
	if three := run(3, true, 0); !slices.Equal(one, three) {
		t.Errorf("three instances with instant gossip differ from one router (cached share %.3f vs %.3f)", cachedShare(three), cachedShare(one))
	}
	alone := run(3, false, 0)
	if a, o := cachedShare(alone), cachedShare(one); a > o-0.05 {
		t.Errorf("three instances without gossip reuse %.3f of follow-up prompts, one router %.3f: want a clear loss", a, o)
	}
	late := run(3, true, time.Second)
	if l, o := cachedShare(late), cachedShare(one); l < o-0.02 {
		t.Errorf("gossip 1 s late reuses %.3f, one router %.3f: want within 2 points", l, o)
	}
}

// routerOf spreads a conversation's turns as a load balancer without
// affinity does: over 3 instances, each gets about a third of all turns, and
// almost every 6-turn conversation meets more than one instance.
func TestRouterOfSpreadsTurns(t *testing.T) {
	s := &sim{tables: make([]*state.Table, 3)}
	var per [3]int
	single := 0
	for c := range 300 {
		us := &user{hash: ring.HashString(fmt.Sprint("conv-", c))}
		seen := map[int32]bool{}
		for turn := range 6 {
			us.turn = turn
			r := s.routerOf(us)
			per[r]++
			seen[r] = true
		}
		if len(seen) == 1 {
			single++
		}
	}
	for i, n := range per {
		if n < 500 || n > 700 { // 1800 turns: a third is 600
			t.Errorf("instance %d got %d of 1800 turns", i, n)
		}
	}
	if single > 6 { // (1/3)^5 of 300 is about 1
		t.Errorf("%d of 300 conversations stayed on one instance", single)
	}
}

// p95 is the 95th percentile of the answered requests' latency (ms).
func p95(rows rowsOf) float64 {
	var lat []float64
	for _, r := range rows {
		if r.Status == 200 {
			lat = append(lat, r.LatencyMS)
		}
	}
	slices.Sort(lat)
	return lat[len(lat)*95/100]
}

// Issue 13, zero think time: a client sends its next turn the moment an
// answer ends, possibly to another instance, which may not have heard the
// release yet. Before turns were announced, everything 5 ms late cost 16
// points of cached share (0.690 against 0.852): the next turn found its
// previous one still in flight and no placement, and was pushed off its
// cache. Now the instance knows the turn (announced when it was routed)
// and that a longer prompt of the same conversation means it is over: with
// every change late by 1 to 100 ms, three and five instances stay within 1
// point of one router's cached share and 5 % of its p95 (the issue's
// figures); without gossip the loss is large. (A delay longer than a turn
// lasts, 1 s on this fast profile, can deliver the announcement after the
// turn has ended: 3 points lost at N=3; docs/cluster.md has the sweep.)
func TestRoutersGossipZeroThink(t *testing.T) {
	prof, err := traffic.LoadProfile(os.DirFS("."), "quick")
	if err != nil {
		t.Fatal(err)
	}
	prof.ThinkSMin, prof.ThinkSMax = 0, 0
	run := func(routers int, gossip bool, delay, batch time.Duration) rowsOf {
		t.Helper()
		var rows rowsOf
		if _, err := Run(context.Background(), Spec{RunID: "r", Policy: "llm-aware", Seed: 2, Profile: prof, Replicas: 3,
			Model: model.DefaultConfig(), Router: DefaultRouter(), SharedCPU: true,
			Routers: routers, Gossip: gossip, GossipDelay: delay, GossipBatch: batch}, &rows); err != nil {
			t.Fatal(err)
		}
		return rows
	}
	one := run(1, false, 0, 0)
	oneShare, oneP95 := cachedShare(one), p95(one)
	t.Logf("one router: cached share %.3f, p95 %.0f ms", oneShare, oneP95)
	for _, c := range []struct {
		routers      int
		delay, batch time.Duration
	}{
		{3, time.Millisecond, 0}, {3, 5 * time.Millisecond, 0}, {3, 0, 5 * time.Millisecond},
		{3, 100 * time.Millisecond, 0}, {5, 5 * time.Millisecond, 0}, {5, 100 * time.Millisecond, 0},
	} {
		rows := run(c.routers, true, c.delay, c.batch)
		share, q := cachedShare(rows), p95(rows)
		t.Logf("%d routers, gossip %v late (batch %v): cached share %.3f, p95 %.0f ms", c.routers, c.delay, c.batch, share, q)
		if share < oneShare-0.01 || q > oneP95*1.05 {
			t.Errorf("%d routers, gossip %v late (batch %v): cached share %.3f, p95 %.0f ms; one router %.3f, %.0f ms: want within 1 point and 5 %%",
				c.routers, c.delay, c.batch, share, q, oneShare, oneP95)
		}
	}
	alone := run(3, false, 0, 0)
	if a := cachedShare(alone); a > oneShare-0.05 {
		t.Errorf("three instances without gossip reuse %.3f, one router %.3f: want a clear loss", a, oneShare)
	}
}
