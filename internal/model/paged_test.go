package model

import (
	"math/rand/v2"
	"testing"
	"time"
)

// pagedCfg is a tiny vLLM: blocks of 4 tokens, a pool of 16 blocks,
// 4 sequences of up to 64 tokens, 16 tokens per step, every token 1 ms and
// every step 1 ms more, answers exactly as long as NPredict.
func pagedCfg() Config {
	c := DefaultConfig()
	c.Engine = EngineVLLM
	c.BlockSize = 4
	c.NParallel = 4
	c.CtxSize = 4 * 64
	c.KVTokens = 64
	c.NBatch = 16
	c.StepOverhead = time.Millisecond
	c.TokenCost = time.Millisecond
	c.AttnCost = 0
	c.AnswerMin, c.AnswerMax = 1000, 1000
	return c
}

func toksFrom(start, n int) []Token {
	t := make([]Token, n)
	for i := range t {
		t[i] = Token((start + i) % VocabSize)
	}
	return t
}

func concat(a, b []Token) []Token { return append(append([]Token(nil), a...), b...) }

// runAll advances r until idle and returns the results by id.
func runAll(t *testing.T, r *Replica) map[ID]*Result {
	t.Helper()
	out := map[ID]*Result{}
	var evs []Event
	for {
		at, ok := r.NextEvent()
		if !ok {
			return out
		}
		evs = r.Advance(at, evs[:0])
		for _, e := range evs {
			if e.Kind == EventDone {
				out[e.ID] = e.Result
			}
		}
		checkPool(t, r.Server().pg)
	}
}

// checkPool checks the pool's invariants: every reference is a running
// request's block, free blocks have none, usage is in [0, 1].
func checkPool(t *testing.T, e *paged) {
	t.Helper()
	p := e.pool
	held := map[int32]int32{}
	for _, r := range e.running {
		for _, b := range r.blocks {
			held[b]++
		}
	}
	for _, r := range e.waiting {
		if len(r.blocks) != 0 {
			t.Fatalf("waiting request %d holds %d blocks", r.id, len(r.blocks))
		}
	}
	for b := int32(0); b < p.used; b++ {
		if p.ref[b] != held[b] {
			t.Fatalf("block %d: ref %d, held by running requests %d", b, p.ref[b], held[b])
		}
	}
	if q := len(p.queueOrder()); q != int(p.queued) {
		t.Fatalf("free queue has %d blocks, counted %d", q, p.queued)
	}
	inUse := 0
	for b := int32(0); b < p.used; b++ {
		if p.ref[b] > 0 {
			inUse++
		}
	}
	if inUse+p.free() != int(p.n) {
		t.Fatalf("%d blocks in use + %d free != %d", inUse, p.free(), p.n)
	}
	if u := p.usage(); u < 0 || u > 1 {
		t.Fatalf("usage %v outside [0, 1]", u)
	}
	if p.badFrees != 0 {
		t.Fatalf("%d double frees", p.badFrees)
	}
}

func newPagedReplica(t *testing.T, c Config) *Replica {
	t.Helper()
	r, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestPagedSharedPrefixSharesBlocks(t *testing.T) {
	r := newPagedReplica(t, pagedCfg())
	sys := toksFrom(100, 8) // two full blocks
	a, _ := r.Submit(0, Request{Tokens: concat(sys, toksFrom(200, 3)), NPredict: 20})
	// After A's prompt step (1 + 11 ms), B arrives while A decodes.
	var evs []Event
	evs = r.Advance(13*time.Millisecond, evs)
	b, _ := r.Submit(13*time.Millisecond, Request{Tokens: concat(sys, toksFrom(300, 5)), NPredict: 2})
	e := r.Server().pg
	evs = r.Advance(14*time.Millisecond, evs[:0]) // the next step boundary
	_ = evs
	if len(e.running) != 2 {
		t.Fatalf("running %d, want 2", len(e.running))
	}
	ra, rb := e.running[0], e.running[1]
	for k := 0; k < 2; k++ {
		if ra.blocks[k] != rb.blocks[k] {
			t.Fatalf("block %d: A has %d, B %d: the shared prefix is not shared", k, ra.blocks[k], rb.blocks[k])
		}
		if e.pool.ref[ra.blocks[k]] != 2 {
			t.Fatalf("shared block %d has ref %d, want 2", k, e.pool.ref[ra.blocks[k]])
		}
	}
	if ra.blocks[2] == rb.blocks[2] {
		t.Fatal("the third blocks differ in content but are one block")
	}
	res := runAll(t, r)
	if res[a].CacheN != 0 || res[b].CacheN != 8 {
		t.Fatalf("CacheN A %d B %d, want 0 and 8", res[a].CacheN, res[b].CacheN)
	}
	st := r.Server().Stats()
	if st.PrefixHits != 8 || st.PrefixQueries != 11+13 {
		t.Fatalf("prefix hits %d queries %d, want 8 and 24", st.PrefixHits, st.PrefixQueries)
	}
	if st.FreeBlocks != st.NumBlocks || st.KVUsage != 0 {
		t.Fatalf("idle engine: %d of %d blocks free, usage %v", st.FreeBlocks, st.NumBlocks, st.KVUsage)
	}
}

func TestPagedEvictionOrder(t *testing.T) {
	c := pagedCfg()
	c.KVTokens = 32 // 8 blocks
	c.CtxSize = 4 * 32
	r := newPagedReplica(t, c)
	s := r.Server()
	// A: 12 prompt tokens + 1 answer token → 3 blocks, all full and cached
	// (the sampled token is never computed).
	pa := toksFrom(100, 12)
	r.Submit(0, Request{Tokens: pa, NPredict: 1})
	runAll(t, r)
	if got := s.CachedPrefix(pa); got != 12 {
		t.Fatalf("A cached %d tokens, want 12", got)
	}
	// A's blocks are freed tail first: the queue is 2, 1, 0 behind the 5
	// never-used blocks.
	if q := s.pg.pool.queueOrder(); len(q) != 3 || q[0] != 2 || q[2] != 0 {
		t.Fatalf("free queue %v, want [2 1 0]", q)
	}
	// B needs 7 blocks (24 prompt tokens + 4 answer tokens: 28 tokens): the
	// 5 fresh ones, then A's tail (block 2), then block 1. A keeps its
	// first block only.
	r.Submit(r.g.Now(), Request{Tokens: toksFrom(500, 24), NPredict: 5})
	runAll(t, r)
	if got := s.CachedPrefix(pa); got != 4 {
		t.Fatalf("after B, A has %d tokens cached, want 4 (its head block)", got)
	}
	if st := s.Stats(); st.CacheEvictions != 2 {
		t.Fatalf("evictions %d, want 2", st.CacheEvictions)
	}
}

func TestPagedChunkedBudget(t *testing.T) {
	c := pagedCfg()
	c.KVTokens = 128 // room for both: no preemption
	r := newPagedReplica(t, c)
	// 40 tokens, 16 per step: chunks 16, 16, 8 → 17 + 17 + 9 = 43 ms.
	id, _ := r.Submit(0, Request{Tokens: toksFrom(1, 40), NPredict: 3})
	var evs []Event
	var first time.Duration
	for first == 0 {
		at, _ := r.NextEvent()
		for _, e := range r.Advance(at, evs[:0]) {
			if e.Kind == EventFirstToken && e.ID == id {
				first = e.At
			}
		}
	}
	if first != 43*time.Millisecond {
		t.Fatalf("first token at %v, want 43ms", first)
	}
	// Now A decodes; B (30 tokens) arrives: each step is A's decode token
	// first, then 15 of B's prompt: 1 + 1 + 15 = 17 ms, then B's last 15
	// tokens with A's decode: 17 ms.
	b, _ := r.Submit(first, Request{Tokens: toksFrom(1000, 30), NPredict: 1})
	res := runAll(t, r)
	if got := res[b].PromptDone - res[b].Submitted; got != 34*time.Millisecond {
		t.Fatalf("B's prompt took %v, want 34ms (two chunks of 15 beside A's decode)", got)
	}
	if got := res[id].PredictedN; got != 3 {
		t.Fatalf("A generated %d tokens, want 3", got)
	}
	if st := r.Server().Stats(); st.Preemptions != 0 {
		t.Fatalf("%d preemptions, want none", st.Preemptions)
	}
}

func TestPagedPreemptionRecomputes(t *testing.T) {
	c := pagedCfg()
	c.KVTokens = 40 // 10 blocks
	c.CtxSize = 4 * 40
	r := newPagedReplica(t, c)
	// A and B: 8-token prompts (2 blocks each) that grow to 28 tokens
	// (7 blocks) each: 14 blocks do not fit in 10, so B, the newer, is
	// preempted when A needs a block and none is free; B is recomputed
	// after A ends.
	a, _ := r.Submit(0, Request{Tokens: toksFrom(100, 8), NPredict: 21})
	b, _ := r.Submit(0, Request{Tokens: toksFrom(200, 8), NPredict: 21})
	res := runAll(t, r)
	st := r.Server().Stats()
	if st.Preemptions < 1 {
		t.Fatalf("no preemption")
	}
	if res[a].PredictedN != 21 || res[b].PredictedN != 21 {
		t.Fatalf("answers %d and %d tokens, want 21 each", res[a].PredictedN, res[b].PredictedN)
	}
	if res[b].Done <= res[a].Done {
		t.Fatalf("B (preempted) ended at %v, not after A at %v", res[b].Done, res[a].Done)
	}
	// B's output is the same as if it had never been preempted.
	r2 := newPagedReplica(t, pagedCfg())
	b2, _ := r2.Submit(0, Request{Tokens: toksFrom(200, 8), NPredict: 21})
	if got, want := res[b].Output.Text, runAll(t, r2)[b2].Output.Text; got != want {
		t.Fatalf("recomputed answer %q differs from %q", got, want)
	}
}

func TestPagedRandomProperties(t *testing.T) {
	for _, engine := range []string{EngineVLLM, EngineSGLang} {
		for seed := uint64(1); seed <= 20; seed++ {
			c := pagedCfg()
			c.Engine = engine
			c.BlockSize = 0
			if engine == EngineVLLM {
				c.BlockSize = 4
			} else if seed%2 == 0 {
				c.SchedulePolicy = PolicyLPM
			}
			randomWorkload(t, c, seed)
		}
	}
}

func randomWorkload(t *testing.T, c Config, seed uint64) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 7))
	r := newPagedReplica(t, c)
	prefixes := [][]Token{toksFrom(100, 12), toksFrom(300, 20), toksFrom(500, 6)}
	submitted, cancelled := map[ID]bool{}, map[ID]bool{}
	now := time.Duration(0)
	var evs []Event
	done := map[ID]bool{}
	for i := 0; i < 60; i++ {
		now += time.Duration(rng.IntN(20)) * time.Millisecond
		evs = r.Advance(now, evs[:0])
		collectDone(t, evs, done)
		checkPool(t, r.Server().pg)
		p := concat(prefixes[rng.IntN(3)], toksFrom(1000+i*50, 1+rng.IntN(20)))
		id, err := r.Submit(now, Request{Tokens: p, NPredict: rng.IntN(30), NoCache: rng.IntN(10) == 0})
		if err != nil {
			t.Fatal(err)
		}
		submitted[id] = true
		if rng.IntN(8) == 0 {
			victim := ID(1 + rng.IntN(int(id)))
			if r.Cancel(now, victim) {
				cancelled[victim] = true
			}
		}
	}
	for id := range runAll(t, r) {
		done[id] = true
	}
	for id := range submitted {
		if !done[id] && !cancelled[id] {
			t.Fatalf("%s seed %d: request %d never finished", c.Engine, seed, id)
		}
	}
	st := r.Server().Stats()
	if st.FreeBlocks != st.NumBlocks || st.Processing != 0 || st.Deferred != 0 {
		t.Fatalf("%s seed %d: idle engine holds blocks (%d of %d free) or requests", c.Engine, seed, st.FreeBlocks, st.NumBlocks)
	}
}

func collectDone(t *testing.T, evs []Event, done map[ID]bool) {
	t.Helper()
	for _, e := range evs {
		if e.Kind == EventDone {
			if done[e.ID] {
				t.Fatalf("request %d done twice", e.ID)
			}
			done[e.ID] = true
		}
	}
}

func TestSGLangLPMOrder(t *testing.T) {
	for _, policy := range []string{PolicyFCFS, PolicyLPM} {
		c := pagedCfg()
		c.Engine, c.BlockSize, c.SchedulePolicy = EngineSGLang, 0, policy
		c.NParallel = 1
		c.CtxSize = 64
		r := newPagedReplica(t, c)
		p := toksFrom(100, 10)
		r.Submit(0, Request{Tokens: p, NPredict: 1})
		runAll(t, r)
		now := r.g.Now()
		busy, _ := r.Submit(now, Request{Tokens: toksFrom(900, 5), NPredict: 5})
		cold, _ := r.Submit(now, Request{Tokens: toksFrom(700, 12), NPredict: 1})
		warm, _ := r.Submit(now, Request{Tokens: concat(p, toksFrom(800, 2)), NPredict: 1})
		res := runAll(t, r)
		if res[busy] == nil || res[warm].CacheN != 10 {
			t.Fatalf("%s: warm request reused %d tokens, want 10 (token-granular)", policy, res[warm].CacheN)
		}
		warmFirst := res[warm].Done < res[cold].Done
		if warmFirst != (policy == PolicyLPM) {
			t.Fatalf("%s: warm done %v, cold done %v", policy, res[warm].Done, res[cold].Done)
		}
	}
}
