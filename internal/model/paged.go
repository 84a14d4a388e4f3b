package model

import (
	"slices"
	"time"
)

// Engines (Config.Engine).
const (
	EngineLlamaCpp = "llamacpp" // slots, each with its own KV cache (the default; "" too)
	EngineVLLM     = "vllm"     // a paged KV pool shared by all requests, hashed blocks
	EngineSGLang   = "sglang"   // the same pool, token-granular (radix) matching
)

// Engines lists the engine names.
var Engines = []string{EngineLlamaCpp, EngineVLLM, EngineSGLang}

// SGLang schedule policies (Config.SchedulePolicy).
const (
	PolicyFCFS = "fcfs" // first come, first served
	PolicyLPM  = "lpm"  // longest prefix match first
)

// lpmMaxQueue is SGLang's cutoff: above 128 waiting requests the lpm
// policy falls back to fcfs (python/sglang/srt/managers/schedule_policy.py).
const lpmMaxQueue = 128

// paged is a vLLM V1-like engine: a shared KV block pool with automatic
// prefix caching and the V1 scheduler (vllm/v1/core/sched/scheduler.py).
// Like Server it counts in work time and maps to model time through clk.
// See docs/engines.md.
type paged struct {
	cfg     Config
	nCtx    int // max_model_len
	index   int
	clk     *timebase
	pool    *blockPool
	lpm     bool
	running []*preq // admission order; the last is preempted first
	waiting []*preq // FCFS; preempted requests go back to the front
	seg     segment
	nextID  ID
	stats   Stats
	spare   []*preq
	lora    adapterSet // LoRA adapter slots (Config.MaxLoras)
	// segLoads is the adapter loads priced into the current segment.
	segLoads int
}

// preq is one request of a paged engine.
type preq struct {
	id     ID
	toks   []Token  // the prompt (the caller's slice, never written)
	hashes []uint64 // chain hashes of the full blocks of prompt+output known so far
	blocks []int32  // KV blocks held, in token order
	target int
	stop   StopType
	full   bool
	out    Output

	adapter  int32 // LoRA adapter (adapterSet id; 0: the base model)
	computed int   // tokens whose KV is computed (vLLM's num_computed_tokens)
	gen      int   // tokens sampled
	chunk    int   // tokens scheduled in the current step
	nreg     int   // leading blocks already registered in the pool
	cacheN   int   // prompt tokens found in the cache at first admission
	admitted bool
	loaded   bool // an admission of r loaded its adapter
	cancelled,
	noCache,
	tokenEvents bool
	submitted, started, promptEnd time.Duration
}

// ntoks is vLLM's num_tokens: the prompt and every sampled token.
func (r *preq) ntoks() int { return len(r.toks) + r.gen }

// tok is token j of prompt+output.
func (r *preq) tok(j int) Token {
	if j < len(r.toks) {
		return r.toks[j]
	}
	return r.out.Tokens[j-len(r.toks)]
}

func newPaged(cfg Config, index int, clk *timebase) *paged {
	bs := cfg.blockSize()
	return &paged{
		cfg:   cfg,
		nCtx:  cfg.SlotContext(),
		index: index,
		clk:   clk,
		pool:  newBlockPool(cfg.kvPoolTokens()/bs, bs),
		lpm:   cfg.Engine == EngineSGLang && cfg.SchedulePolicy == PolicyLPM,
		lora:  newAdapterSet(cfg),
	}
}

// hashAt returns the chain hash of block k of r's tokens (which must be
// full), computing the missing ones.
func (e *paged) hashAt(r *preq, k int) uint64 {
	bs := e.pool.bs
	var blk [64]Token
	for len(r.hashes) <= k {
		b := len(r.hashes)
		h := e.lora.seedOf(r.adapter) // 0 for the base model
		if b > 0 {
			h = r.hashes[b-1]
		}
		var part []Token
		if end := (b + 1) * bs; end <= len(r.toks) {
			part = r.toks[b*bs : end]
		} else {
			part = blk[:0]
			for j := b * bs; j < (b+1)*bs; j++ {
				part = append(part, r.tok(j))
			}
		}
		r.hashes = append(r.hashes, hashBlock(h, part))
	}
	return r.hashes[k]
}

func (e *paged) submit(v time.Duration, rq Request, dst []Event) (ID, []Event, error) {
	n := len(rq.Tokens)
	if err := checkPrompt(rq.Tokens, e.nCtx); err != nil {
		return 0, dst, err
	}
	r := e.newReq()
	e.nextID++
	r.id = e.nextID
	r.toks = rq.Tokens
	a := planAnswer(&e.cfg, &rq, PromptKey(rq.Tokens), e.nCtx-n)
	r.target, r.stop, r.full, r.out = a.target, a.stop, a.full, a.out
	r.noCache = rq.NoCache
	r.tokenEvents = rq.TokenEvents
	r.submitted = e.clk.t(v)
	r.adapter = e.lora.intern(rq.Adapter)
	e.lora.queued(r.adapter)
	e.waiting = append(e.waiting, r)
	switch {
	case !e.seg.active:
		dst = e.plan(v, dst)
	case len(e.running) < e.cfg.NParallel:
		dst = e.cut(v, dst) // it may join at the next step
	}
	return r.id, dst, nil
}

// checkPrompt is Submit's validation, shared by the engines.
func checkPrompt(toks []Token, nCtx int) error {
	n := len(toks)
	if n == 0 {
		return ErrEmptyPrompt
	}
	if n >= nCtx {
		return &ContextError{NPromptTokens: n, NCtx: nCtx}
	}
	for i, t := range toks {
		if t < 0 || t >= VocabSize {
			return &TokenError{Index: i, Token: t}
		}
	}
	return nil
}

func (e *paged) newReq() *preq {
	if n := len(e.spare); n > 0 {
		r := e.spare[n-1]
		e.spare = e.spare[:n-1]
		*r = preq{hashes: r.hashes[:0], blocks: r.blocks[:0]}
		return r
	}
	return &preq{}
}

func (e *paged) recycle(r *preq) {
	r.out, r.toks = Output{}, nil
	e.spare = append(e.spare, r)
}

// cut ends the current segment at the first step boundary at or after v.
func (e *paged) cut(v time.Duration, dst []Event) []Event {
	g := &e.seg
	el := v - g.start
	m := g.completed(el)
	if g.cum(m) < el {
		m++
	}
	if m < g.steps {
		g.steps = m
		dst = e.advance(v, dst)
	}
	return dst
}

func (e *paged) cancel(v time.Duration, id ID, dst []Event) ([]Event, bool) {
	for i, r := range e.waiting {
		if r.id == id {
			e.waiting = slices.Delete(e.waiting, i, i+1)
			e.lora.dequeued(r.adapter)
			e.releaseBlocks(r)
			e.recycle(r)
			return dst, true
		}
	}
	for _, r := range e.running {
		if r.id == id {
			if !r.cancelled {
				r.cancelled = true
				dst = e.cut(v, dst)
			}
			return dst, true
		}
	}
	return dst, false
}

func (e *paged) next() (time.Duration, bool) {
	g := &e.seg
	if !g.active {
		return 0, false
	}
	return g.start + g.cum(g.steps), true
}

// advance processes every segment end at or before work time v.
func (e *paged) advance(v time.Duration, dst []Event) []Event {
	for e.seg.active {
		end := e.seg.start + e.seg.cum(e.seg.steps)
		if end > v {
			break
		}
		dst = e.finish(end, dst)
	}
	return dst
}

// sync applies the decode steps finished by v, for inspection.
func (e *paged) sync(v time.Duration) {
	g := &e.seg
	if !g.active || g.prefill {
		return
	}
	if m := g.completed(v - g.start); m > g.done {
		e.materialize(m)
	}
}

// materialize applies decode steps g.done+1 … k of a decode segment: every
// running request computes one token per step and samples the next.
func (e *paged) materialize(k int) {
	g := &e.seg
	d := k - g.done
	if d <= 0 {
		return
	}
	for _, r := range e.running {
		r.computed += d
		r.gen += d
		e.grow(r, r.computed)
		e.registerFull(r)
	}
	e.stats.Decodes += int64(d)
	e.stats.BusySlotSteps += int64(d * len(e.running))
	g.done = k
}

// grow gives r the blocks to hold n tokens (the caller checked they fit).
func (e *paged) grow(r *preq, n int) {
	for need := (n + e.pool.bs - 1) / e.pool.bs; len(r.blocks) < need; {
		r.blocks = append(r.blocks, e.pool.alloc())
	}
}

// registerFull caches the blocks that r's computed tokens fill.
func (e *paged) registerFull(r *preq) {
	if r.noCache {
		return
	}
	for ; r.nreg < r.computed/e.pool.bs; r.nreg++ {
		e.pool.register(r.blocks[r.nreg], e.hashAt(r, r.nreg))
	}
}

// releaseBlocks frees r's blocks, last first, so that a request's tail is
// evicted before its head (vLLM frees a request's blocks in reverse).
func (e *paged) releaseBlocks(r *preq) {
	for i := len(r.blocks) - 1; i >= 0; i-- {
		e.pool.release(r.blocks[i])
	}
	r.blocks = r.blocks[:0]
	r.nreg = 0
}
