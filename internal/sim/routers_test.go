package sim

import (
	"context"
	"fmt"
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
	prof, err := traffic.LoadProfile("quick")
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

// Issue 13, zero think time: a client sends its next turn the moment an
// answer ends, possibly to another instance. Live, with every change
// batched for 5 ms, that turn found the previous one still in flight and no
// placement, and lost its cache; the node now sends releases at once and
// holds only increases. The model shows both: everything 5 ms late loses
// cache hits against one router; releases at once with increases held
// (GossipBatch) keep them.
func TestRoutersGossipZeroThink(t *testing.T) {
	prof, err := traffic.LoadProfile("quick")
	if err != nil {
		t.Fatal(err)
	}
	prof.ThinkSMin, prof.ThinkSMax = 0, 0
	run := func(routers int, delay, batch time.Duration) float64 {
		t.Helper()
		var rows rowsOf
		if _, err := Run(context.Background(), Spec{RunID: "r", Policy: "llm-aware", Seed: 2, Profile: prof, Replicas: 3,
			Model: model.DefaultConfig(), Router: DefaultRouter(), SharedCPU: true,
			Routers: routers, Gossip: true, GossipDelay: delay, GossipBatch: batch}, &rows); err != nil {
			t.Fatal(err)
		}
		return cachedShare(rows)
	}
	one := run(1, 0, 0)
	late := run(3, 5*time.Millisecond, 0)
	live := run(3, 0, 5*time.Millisecond)
	held := run(3, 0, time.Second)
	t.Logf("cached share of follow-up prompts: one %.3f, all 5 ms late %.3f, releases at once %.3f, increases held 1 s %.3f", one, late, live, held)
	if late > one-0.05 {
		t.Errorf("everything 5 ms late reuses %.3f, one router %.3f: want a clear loss", late, one)
	}
	if live < one-0.02 {
		t.Errorf("releases at once, increases held 5 ms: reuses %.3f, one router %.3f: want within 2 points", live, one)
	}
	// Increases held a whole second cost what two instances both seeing a
	// replica idle costs (a few points), not what a missing placement does.
	if held <= late {
		t.Errorf("releases at once, increases held 1 s: reuses %.3f, everything 5 ms late %.3f: want better", held, late)
	}
}
