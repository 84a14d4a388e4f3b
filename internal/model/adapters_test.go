package model

import (
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

const ms1 = time.Millisecond

// loraCfg is a tiny vLLM with two adapter slots: a step costs 10 ms, every
// token 1 ms more, an adapter load 100 ms; answers are exactly NPredict
// tokens long; prompts under 16 tokens fill no block (no cache hits).
func loraCfg() Config {
	c := DefaultConfig()
	c.Engine = EngineVLLM
	c.NParallel = 4
	c.CtxSize = 4 * 512
	c.NBatch = 256
	c.StepOverhead = 10 * ms1
	c.TokenCost = ms1
	c.AttnCost = 0
	c.AnswerMin, c.AnswerMax = 1000, 1000
	c.MaxLoras = 2
	c.AdapterLoad = 100 * ms1
	return c
}

// loraReq is a 10-token prompt (distinct per seed) for adapter a.
func loraReq(a string, seed, n int) Request {
	return Request{Tokens: toksFrom(1000*seed, 10), NPredict: n, Adapter: a}
}

// firstTokens runs r until until and returns each request's first-token
// and completion times, and which finished requests loaded an adapter.
func firstTokens(t *testing.T, r *Replica, until time.Duration) (ttft, done map[ID]time.Duration, loaded map[ID]bool) {
	t.Helper()
	ttft, done, loaded = map[ID]time.Duration{}, map[ID]time.Duration{}, map[ID]bool{}
	for _, e := range runUntil(r, until) {
		switch e.Kind {
		case EventFirstToken:
			ttft[e.ID] = e.At
		case EventDone:
			done[e.ID] = e.At
			loaded[e.ID] = e.Result.AdapterLoad
		}
	}
	return ttft, done, loaded
}

func wantTimes(t *testing.T, what string, got map[ID]time.Duration, want map[ID]time.Duration) {
	t.Helper()
	for id, w := range want {
		if g, ok := got[id]; !ok || g != w {
			t.Errorf("%s of request %d: %v (seen %v), want %v", what, id, g, ok, w)
		}
	}
}

// Two slots, three adapters: a and b load together in the first step
// (2 × 100 ms before it runs); c, arriving when both are idle, evicts the
// least recently idle one (a); b, still resident, loads nothing.
func TestAdapterLoadsAndLRUEviction(t *testing.T) {
	r := mustNew(t, loraCfg())
	a1 := mustSubmit(t, r, 0, loraReq("a", 1, 5))
	b1 := mustSubmit(t, r, 0, loraReq("b", 2, 5))
	loadedBy := map[ID]bool{}
	ttft, done, l1 := firstTokens(t, r, 299*ms1)
	maps.Copy(loadedBy, l1)
	// step 1: 10 + 2×10 prompt tokens + 2 loads = 230; then 4 steps of 10+2.
	wantTimes(t, "first token", ttft, map[ID]time.Duration{a1: 230 * ms1, b1: 230 * ms1})
	wantTimes(t, "done", done, map[ID]time.Duration{a1: 278 * ms1, b1: 278 * ms1})
	if got := r.Server().ResidentAdapters(); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("resident after a and b: %v", got)
	}
	c1 := mustSubmit(t, r, 300*ms1, loraReq("c", 3, 2))
	ttft, done, l2 := firstTokens(t, r, 499*ms1)
	maps.Copy(loadedBy, l2)
	wantTimes(t, "first token", ttft, map[ID]time.Duration{c1: 420 * ms1}) // 300 + 10 + 10 + 100
	wantTimes(t, "done", done, map[ID]time.Duration{c1: 431 * ms1})
	if got := r.Server().ResidentAdapters(); !slices.Equal(got, []string{"b", "c"}) {
		t.Fatalf("resident after c: %v, want a evicted (idle longest)", got)
	}
	b2 := mustSubmit(t, r, 500*ms1, loraReq("b", 4, 2))
	ttft, _, l3 := firstTokens(t, r, time.Second)
	maps.Copy(loadedBy, l3)
	wantTimes(t, "first token", ttft, map[ID]time.Duration{b2: 520 * ms1}) // resident: no load
	st := r.Server().Stats()
	if st.AdapterLoads != 3 || st.AdapterEvictions != 1 {
		t.Fatalf("loads %d evictions %d, want 3 and 1", st.AdapterLoads, st.AdapterEvictions)
	}
	for id, want := range map[ID]bool{a1: true, b1: true, c1: true, b2: false} {
		if loadedBy[id] != want {
			t.Errorf("request %d: AdapterLoad %v, want %v", id, loadedBy[id], want)
		}
	}
	s := r.Server()
	if s.AdapterResident("a") || !s.AdapterResident("b") || !s.AdapterResident("c") || s.AdapterResident("nope") {
		t.Errorf("AdapterResident disagrees with %v", s.ResidentAdapters())
	}
	if n := testing.AllocsPerRun(10, func() { _ = s.AdapterResident("b") }); n != 0 {
		t.Errorf("AdapterResident allocates %v", n)
	}
}

// With both slots held by adapters with running requests, a request for a
// third adapter waits; a base-model request and one for a running adapter
// behind it are admitted at once; the waiting one runs when a slot frees.
func TestAdapterWaitsWhileEverySlotIsBusy(t *testing.T) {
	r := mustNew(t, loraCfg())
	a1 := mustSubmit(t, r, 0, loraReq("a", 1, 10))
	b1 := mustSubmit(t, r, 0, loraReq("b", 2, 10))
	c1 := mustSubmit(t, r, ms1, loraReq("c", 3, 2))
	x := mustSubmit(t, r, ms1, loraReq("", 4, 2))
	a2 := mustSubmit(t, r, ms1, loraReq("a", 5, 2))

	ttft, _, _ := firstTokens(t, r, 240*ms1)
	wantTimes(t, "first token", ttft, map[ID]time.Duration{a1: 230 * ms1, b1: 230 * ms1})
	rep := r.Server().Adapters()
	if !rep.Has || rep.Max != 2 || !slices.Equal(rep.Running, []string{"a", "b"}) || !slices.Equal(rep.Waiting, []string{"c"}) {
		t.Fatalf("report at 240 ms: %+v, want running [a b], waiting [c], max 2", rep)
	}
	if st := r.Server().Stats(); st.Processing != 4 || st.Deferred != 1 {
		t.Fatalf("at 240 ms: %d running, %d waiting; want x and a2 admitted past c", st.Processing, st.Deferred)
	}
	ttft2, done, _ := firstTokens(t, r, 2*time.Second)
	// step 2 at 230: 10 + 2 decode + 2×10 prompt = 32 → x, a2 first at 262;
	// step 3: 10 + 4 → 276 (x, a2 done); a1, b1 then 7 steps of 12 → 360;
	// c loads into a's slot: 360 + 10 + 10 + 100 = 480, done 491.
	wantTimes(t, "first token", ttft2, map[ID]time.Duration{x: 262 * ms1, a2: 262 * ms1, c1: 480 * ms1})
	wantTimes(t, "done", done, map[ID]time.Duration{x: 276 * ms1, a2: 276 * ms1, a1: 360 * ms1, b1: 360 * ms1, c1: 491 * ms1})
	if got := r.Server().ResidentAdapters(); !slices.Equal(got, []string{"b", "c"}) {
		t.Fatalf("resident at the end: %v", got)
	}
	rep = r.Server().Adapters()
	if len(rep.Running) != 0 || len(rep.Waiting) != 0 || r.Server().Stats().AdapterLoads != 3 {
		t.Fatalf("idle report %+v, loads %d", rep, r.Server().Stats().AdapterLoads)
	}
}

// A prefix cached under one adapter is not a hit for another or for the
// base model; under the same adapter it is.
func TestAdapterKVBlocksAreTheirOwn(t *testing.T) {
	for _, slots := range []int{0, 2} {
		c := loraCfg()
		c.MaxLoras = slots
		r := mustNew(t, c)
		p := toksFrom(7, 40) // two full blocks of 16
		now := time.Duration(0)
		var cacheN []int
		for _, a := range []string{"a", "b", "", "a"} {
			mustSubmit(t, r, now, Request{Tokens: p, NPredict: 1, Adapter: a})
			for _, res := range run(t, r) {
				cacheN = append(cacheN, res.CacheN)
			}
			now += time.Second
		}
		if !slices.Equal(cacheN, []int{0, 0, 0, 32}) {
			t.Fatalf("max_loras %d: cache_n %v, want [0 0 0 32]", slots, cacheN)
		}
	}
}

// MaxLoras 0: adapters are free and unlimited, and reported as unknown.
func TestAdaptersOffAreFree(t *testing.T) {
	c := loraCfg()
	c.MaxLoras = 0
	r := mustNew(t, c)
	ids := []ID{
		mustSubmit(t, r, 0, loraReq("a", 1, 2)), mustSubmit(t, r, 0, loraReq("b", 2, 2)),
		mustSubmit(t, r, 0, loraReq("c", 3, 2)),
	}
	ttft, _, _ := firstTokens(t, r, time.Second)
	for _, id := range ids {
		if ttft[id] != 40*ms1 { // 10 + 3×10: no load, nobody waits
			t.Fatalf("request %d first token at %v, want 40ms", id, ttft[id])
		}
	}
	if rep := r.Server().Adapters(); rep.Has || r.Server().Stats().AdapterLoads != 0 {
		t.Fatalf("adapters off: report %+v, loads %d", rep, r.Server().Stats().AdapterLoads)
	}
}

func TestAdapterConfigValidation(t *testing.T) {
	c := DefaultConfig()
	c.MaxLoras = 2 // llama.cpp
	if err := c.Validate(); err == nil {
		t.Fatal("max_loras on llama.cpp accepted")
	}
	c = loraCfg()
	c.MaxLoras = -1
	c.AdapterLoad = -ms1
	err := c.Validate()
	if err == nil || !strings.Contains(err.Error(), "max_loras") || !strings.Contains(err.Error(), "adapter_load") {
		t.Fatalf("negative max_loras and adapter_load: %v", err)
	}
	c = loraCfg()
	c.AdapterLoad = 0
	if got := newAdapterSet(c).cost; got != DefaultAdapterLoad {
		t.Fatalf("default load %v", got)
	}
}

// A report is rebuilt only when the state changed, and an old report is
// never modified.
func TestAdapterReportIsStable(t *testing.T) {
	r := mustNew(t, loraCfg())
	mustSubmit(t, r, 0, loraReq("a", 1, 5))
	first := r.Server().Adapters()
	if n := testing.AllocsPerRun(10, func() { _ = r.Server().Adapters() }); n != 0 {
		t.Fatalf("unchanged report allocates %v", n)
	}
	// A second request of a running adapter changes counts, not names.
	mustSubmit(t, r, 0, loraReq("a", 2, 5))
	runUntil(r, 0)
	if n := testing.AllocsPerRun(10, func() { _ = r.Server().Adapters() }); n != 0 {
		t.Fatalf("report with the same names allocates %v", n)
	}
	if got := r.Server().Adapters(); !slices.Equal(got.Running, []string{"a"}) {
		t.Fatalf("report %+v", got)
	}
	run(t, r)
	if !slices.Equal(first.Running, []string{"a"}) {
		t.Fatalf("earlier report changed: %+v", first)
	}
	if got := r.Server().Adapters(); len(got.Running) != 0 || !got.Has {
		t.Fatalf("idle report %+v", got)
	}
}

// Random traffic over many adapters: never more than MaxLoras adapters
// resident or running, every request finishes, the pool ends empty.
func TestAdapterRandomProperties(t *testing.T) {
	for _, engine := range []string{EngineVLLM, EngineSGLang} {
		for seed := uint64(1); seed <= 12; seed++ {
			c := pagedCfg()
			c.Engine = engine
			c.BlockSize = map[string]int{EngineVLLM: 4, EngineSGLang: 0}[engine]
			c.MaxLoras = 1 + int(seed%3)
			c.AdapterLoad = time.Duration(seed) * ms1
			adapterWorkload(t, c, seed)
		}
	}
}

func adapterWorkload(t *testing.T, c Config, seed uint64) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 11))
	r := newPagedReplica(t, c)
	names := []string{"", "a", "b", "c", "d", "e"}
	submitted, cancelled, done := map[ID]bool{}, map[ID]bool{}, map[ID]bool{}
	flagged := int64(0)
	count := func(evs []Event) {
		for _, e := range evs {
			if e.Kind == EventDone && e.Result.AdapterLoad {
				flagged++
			}
		}
	}
	now := time.Duration(0)
	var evs []Event
	check := func() {
		s := r.Server()
		if n := len(s.ResidentAdapters()); n > c.MaxLoras {
			t.Fatalf("seed %d: %d adapters resident, max %d", seed, n, c.MaxLoras)
		}
		if n := len(s.Adapters().Running); n > c.MaxLoras {
			t.Fatalf("seed %d: %d adapters running, max %d", seed, n, c.MaxLoras)
		}
		checkPool(t, s.pg)
	}
	for i := 0; i < 80; i++ {
		now += time.Duration(rng.IntN(15)) * ms1
		evs = r.Advance(now, evs[:0])
		collectDone(t, evs, done)
		count(evs)
		check()
		p := toksFrom(1000+i*50, 1+rng.IntN(30))
		id, err := r.Submit(now, Request{Tokens: p, NPredict: rng.IntN(25), Adapter: names[rng.IntN(len(names))]})
		if err != nil {
			t.Fatal(err)
		}
		submitted[id] = true
		if rng.IntN(10) == 0 {
			if victim := ID(1 + rng.IntN(int(id))); r.Cancel(now, victim) {
				cancelled[victim] = true
			}
		}
	}
	for {
		at, ok := r.NextEvent()
		if !ok {
			break
		}
		evs = r.Advance(at, evs[:0])
		collectDone(t, evs, done)
		count(evs)
		check()
	}
	for id := range submitted {
		if !done[id] && !cancelled[id] {
			t.Fatalf("%s seed %d: request %d never finished", c.Engine, seed, id)
		}
	}
	st := r.Server().Stats()
	rep := r.Server().Adapters()
	if st.Processing != 0 || st.Deferred != 0 || len(rep.Running) != 0 || len(rep.Waiting) != 0 {
		t.Fatalf("seed %d: idle engine reports %d running, %d waiting, adapters %+v", seed, st.Processing, st.Deferred, rep)
	}
	if flagged > st.AdapterLoads || (st.AdapterLoads > 0 && flagged == 0) {
		t.Fatalf("seed %d: %d requests flagged AdapterLoad, %d loads", seed, flagged, st.AdapterLoads)
	}
	if st.AdapterLoads < int64(len(r.Server().ResidentAdapters())) || st.AdapterLoads-st.AdapterEvictions != int64(len(r.Server().ResidentAdapters())) {
		t.Fatalf("seed %d: %d loads, %d evictions, %d resident", seed, st.AdapterLoads, st.AdapterEvictions, len(r.Server().ResidentAdapters()))
	}
}
