package model

import "time"

// finish ends the segment at work time v: applies its steps, emits first
// tokens, tokens and completions, then schedules the next step.
func (e *paged) finish(v time.Duration, dst []Event) []Event {
	g := &e.seg
	t := e.clk.t(v)
	switch {
	case g.steps == 0:
		// cut at its start: nothing was computed, no adapter loaded yet
		e.lora.step += e.segLoads
	case g.prefill || (g.steps == 1 && g.done == 0):
		dst = e.applyStep(t, dst)
	default:
		e.materialize(g.steps)
	}
	e.segLoads = 0
	dst = e.completeDone(t, dst)
	g.active = false
	return e.plan(v, dst)
}

// applyStep applies a one-step segment: every scheduled request computes
// its chunk; one that has computed all its tokens samples the next.
func (e *paged) applyStep(t time.Duration, dst []Event) []Event {
	e.stats.Decodes++
	busy := 0
	for _, r := range e.running {
		if r.chunk == 0 {
			continue
		}
		busy++
		r.computed += r.chunk
		r.chunk = 0
		e.registerFull(r)
		if r.computed < r.ntoks() {
			continue // a chunk of its prompt (or of its recomputation)
		}
		if r.gen == 0 {
			r.promptEnd = t
		}
		if r.gen >= r.target || r.cancelled {
			continue
		}
		r.gen++
		switch {
		case r.gen == 1:
			dst = append(dst, e.tokenEvent(EventFirstToken, r, t))
		case r.tokenEvents:
			dst = append(dst, e.tokenEvent(EventToken, r, t))
		}
	}
	e.stats.BusySlotSteps += int64(busy)
	return dst
}

func (e *paged) tokenEvent(kind EventKind, r *preq, at time.Duration) Event {
	ev := Event{Kind: kind, Replica: e.index, ID: r.id, At: at, N: r.gen}
	if kind == EventFirstToken {
		ev.CacheN = r.cacheN
	}
	if r.tokenEvents {
		ev.Token = r.out.Tokens[r.gen-1]
		ev.Piece = r.out.Piece(r.gen - 1)
	}
	return ev
}

// completeDone completes the cancelled running requests and those that
// have sampled their whole answer, keeping the others in order.
func (e *paged) completeDone(t time.Duration, dst []Event) []Event {
	k := 0
	for _, r := range e.running {
		done := r.cancelled || (r.computed >= len(r.toks) && r.gen >= r.target)
		if !done {
			e.running[k] = r
			k++
			continue
		}
		dst = e.complete(r, t, dst)
	}
	clear(e.running[k:])
	e.running = e.running[:k]
	return dst
}

// complete finishes r at model time t and frees its blocks (the full ones
// stay cached).
func (e *paged) complete(r *preq, t time.Duration, dst []Event) []Event {
	if r.gen == 0 && r.computed < len(r.toks) {
		r.promptEnd = t
	}
	res := &Result{
		ID:           r.id,
		PromptTokens: len(r.toks),
		CacheN:       r.cacheN,
		PromptN:      len(r.toks) - r.cacheN,
		PredictedN:   r.gen,
		Output:       r.out,
		Stop:         r.stop,
		ContextFull:  r.full,
		Cancelled:    r.cancelled,
		AdapterLoad:  r.loaded,
		Submitted:    r.submitted,
		Started:      r.started,
		PromptDone:   r.promptEnd,
		Done:         t,
	}
	if r.cancelled {
		res.PromptN = max(min(r.computed, len(r.toks))-r.cacheN, 0)
		res.Output = r.out.prefix(r.gen)
	}
	e.releaseBlocks(r)
	e.lora.stop(r.adapter, false)
	st := &e.stats
	st.Requests++
	st.PromptTokens += int64(res.PromptN)
	st.PromptTime += res.PromptTime()
	st.PredictedTokens += int64(res.PredictedN)
	st.PredictedTime += res.PredictedTime()
	st.CacheN += int64(res.CacheN)
	e.recycle(r)
	return append(dst, Event{Kind: EventDone, Replica: e.index, ID: res.ID, At: t, N: res.PredictedN, Result: res})
}

// statsNow returns the engine's statistics (see Stats).
func (e *paged) statsNow() Stats {
	st := e.stats
	st.Processing = len(e.running)
	st.Deferred = len(e.waiting)
	p := e.pool
	st.BlockSize = p.bs
	st.NumBlocks = int(p.n)
	st.FreeBlocks = p.free()
	st.CachedBlocks = p.cachedBlocks()
	st.KVTokens = (int(p.n) - p.free()) * p.bs
	st.KVUsage = p.usage()
	st.CacheEvictions = p.evictions
	st.AdapterLoads = e.lora.loads
	st.AdapterEvictions = e.lora.evicts
	return st
}

// slots describes the running requests as llama.cpp's /slots would.
func (e *paged) slots() []SlotInfo {
	out := make([]SlotInfo, len(e.running))
	for i, r := range e.running {
		out[i] = SlotInfo{ID: i, NCtx: e.nCtx, Processing: true, Task: r.id, NPast: r.computed,
			NPrompt: len(r.toks), NDecoded: r.gen, NRemain: r.target - r.gen}
	}
	return out
}

// cachedPrefix is the number of leading tokens of toks held in cached
// blocks.
func (e *paged) cachedPrefix(toks []Token) int {
	bs := e.pool.bs
	var h uint64
	n := 0
	for (n+1)*bs <= len(toks) {
		h = hashBlock(h, toks[n*bs:(n+1)*bs])
		if _, ok := e.pool.lookup(h); !ok {
			break
		}
		n++
	}
	return n * bs
}
