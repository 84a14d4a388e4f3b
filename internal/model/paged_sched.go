package model

import (
	"slices"
	"time"
)

// plan is one vLLM V1 scheduling pass at work time v, then the segment it
// starts: running requests first, in admission order, each taking the
// tokens it still needs (1 when decoding, the rest of its prompt when
// prefilling) from the step's token budget (max_num_batched_tokens, here
// NBatch), preempting the newest running requests when the pool has no
// block left for them; then, if nobody was preempted, waiting requests in
// order while a sequence slot (max_num_seqs, here NParallel), budget and
// blocks remain, each reusing the longest run of cached blocks of its
// tokens and prefilling a chunk of what the budget leaves.
func (e *paged) plan(v time.Duration, dst []Event) []Event {
	budget, preempted := e.scheduleRunning(e.cfg.NBatch)
	if !preempted || len(e.running) == 0 {
		e.admit(v, budget)
	}
	e.startSegment(v)
	return dst
}

func (e *paged) needBlocks(r *preq, n int) int {
	return (n+e.pool.bs-1)/e.pool.bs - len(r.blocks)
}

// scheduleRunning gives each running request its tokens for the next step.
func (e *paged) scheduleRunning(budget int) (int, bool) {
	preempted := false
	for i := 0; i < len(e.running); i++ {
		r := e.running[i]
		r.chunk = 0
		n := min(r.ntoks()-r.computed, budget)
		if n <= 0 {
			continue
		}
		for e.needBlocks(r, r.computed+n) > e.pool.free() {
			victim := e.running[len(e.running)-1]
			e.preempt(victim)
			preempted = true
			if victim == r {
				n = 0
				break
			}
		}
		if n == 0 {
			break // r itself was preempted: it was the last one
		}
		e.grow(r, r.computed+n)
		r.chunk = n
		budget -= n
	}
	return budget, preempted
}

// preempt moves the last running request r back to the front of the
// waiting queue, freeing its blocks: it will be recomputed (vLLM V1's
// preemption by recomputation), reusing whatever of its blocks is still
// cached then.
func (e *paged) preempt(r *preq) {
	e.running = e.running[:len(e.running)-1]
	e.lora.stop(r.adapter, true)
	e.releaseBlocks(r)
	r.computed, r.chunk = 0, 0
	e.waiting = slices.Insert(e.waiting, 0, r)
	e.stats.Preemptions++
}

// admit moves waiting requests into the running batch, in order. A
// request whose LoRA adapter cannot join the batch (every adapter slot is
// held by adapters with running requests) is skipped and keeps its place,
// as vLLM V1 skips it (the scheduled_loras check of
// vllm/v1/core/sched/scheduler.py); a request that does not fit the pool
// stops the admissions (FCFS).
func (e *paged) admit(v time.Duration, budget int) {
	if e.lpm && len(e.waiting) > 1 && len(e.waiting) <= lpmMaxQueue {
		e.sortLPM()
	}
	kept, i := 0, 0
	for ; i < len(e.waiting) && len(e.running) < e.cfg.NParallel && budget > 0; i++ {
		r := e.waiting[i]
		if !e.lora.canRun(r.adapter) {
			e.waiting[kept] = r
			kept++
			continue
		}
		n, ok := e.admitOne(v, r, budget)
		if !ok {
			break // FCFS: the head waits for blocks
		}
		budget -= n
	}
	if i > kept {
		e.waiting = slices.Delete(e.waiting, kept, i)
	}
}

// admitOne moves r into the running batch with its cached prefix and a
// first chunk of at most budget tokens, which it returns; ok is false (and
// nothing changes) when the pool cannot hold that chunk.
func (e *paged) admitOne(v time.Duration, r *preq, budget int) (int, bool) {
	bs := e.pool.bs
	hits := e.match(r)
	hit := hits * bs
	n := min(r.ntoks()-hit, budget)
	if (hit+n+bs-1)/bs-hits > e.pool.free()-e.freeHits(r, hits) {
		return 0, false
	}
	for k := range hits {
		b, _ := e.pool.lookup(e.hashAt(r, k))
		e.pool.touch(b)
		r.blocks = append(r.blocks, b)
	}
	r.computed, r.nreg = hit, hits
	e.grow(r, hit+n)
	r.chunk = n
	e.running = append(e.running, r)
	if e.lora.start(r.adapter) {
		r.loaded = true // this admission loaded its adapter
	}
	e.stats.PrefixQueries += int64(r.ntoks())
	e.stats.PrefixHits += int64(hit)
	if !r.admitted {
		r.admitted = true
		r.cacheN = min(hit, len(r.toks))
		r.started = e.clk.t(v)
	}
	return n, true
}

// match returns how many leading full blocks of r's tokens are cached,
// leaving at least one token to compute (vLLM recomputes the last token
// for its logits).
func (e *paged) match(r *preq) int {
	if r.noCache {
		return 0
	}
	maxBlocks := (r.ntoks() - 1) / e.pool.bs
	k := 0
	for k < maxBlocks {
		if _, ok := e.pool.lookup(e.hashAt(r, k)); !ok {
			break
		}
		k++
	}
	return k
}

// freeHits counts the first hits blocks of r that are free (cached but
// unreferenced): touching them takes them out of the free queue.
func (e *paged) freeHits(r *preq, hits int) int {
	n := 0
	for k := range hits {
		if b, _ := e.pool.lookup(e.hashAt(r, k)); e.pool.ref[b] == 0 {
			n++
		}
	}
	return n
}

// sortLPM orders the waiting queue by the longest cached prefix first,
// stable (SGLang's lpm policy).
func (e *paged) sortLPM() {
	for _, r := range e.waiting {
		r.chunk = e.match(r) // the sort key; chunk is unused while waiting
	}
	slices.SortStableFunc(e.waiting, func(a, b *preq) int { return b.chunk - a.chunk })
	for _, r := range e.waiting {
		r.chunk = 0
	}
}

// startSegment prices the scheduled step. A step of decode tokens only,
// in which nothing can change the batch, is extended into a segment of k
// steps: until the first request finishes, while the free blocks last.
func (e *paged) startSegment(v time.Duration) {
	c := &e.cfg
	g := &e.seg
	*g = segment{start: v, base: c.StepOverhead}
	pTok, pAttn := c.TokenCost, c.AttnCost
	if c.PrefillTokenCost > 0 {
		pTok = c.PrefillTokenCost
	}
	if c.PrefillAttnCost > 0 {
		pAttn = c.PrefillAttnCost
	}
	batch, sumPos, minLeft, tokEv := 0, 0, -1, false
	for _, r := range e.running {
		n := r.chunk
		switch {
		case n == 0:
			continue
		case r.gen > 0 && n == 1:
			batch++
			sumPos += r.computed
			if left := r.target - r.gen; minLeft < 0 || left < minLeft {
				minLeft = left
			}
			tokEv = tokEv || r.tokenEvents
		default:
			g.prefill = true
			nn, pos := time.Duration(n), time.Duration(r.computed)
			g.base += c.PrefillOverhead + nn*pTok + pAttn*(nn*pos+nn*(nn-1)/2)
		}
	}
	if batch == 0 && !g.prefill {
		return // idle
	}
	g.active = true
	g.nDecode = batch
	g.base += time.Duration(batch)*c.TokenCost + c.AttnCost*time.Duration(sumPos)
	load, loads := e.lora.takeStep() // adapters loaded before this step runs
	g.base += load
	e.segLoads += loads
	g.steps = 1
	if g.prefill || tokEv || minLeft <= 1 || loads > 0 {
		return
	}
	g.inc = c.AttnCost * time.Duration(batch)
	g.steps = e.decodeSteps(minLeft)
}

// decodeSteps is the most decode steps (at least 1, at most limit) whose
// new blocks the pool can give without preempting.
func (e *paged) decodeSteps(limit int) int {
	fits := func(k int) bool {
		need := 0
		for _, r := range e.running {
			need += e.needBlocks(r, r.computed+k)
		}
		return need <= e.pool.free()
	}
	lo, hi := 1, limit
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if fits(mid) {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
}
