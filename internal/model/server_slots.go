package model

import "time"

// Which slot serves a request, and the KV it reserves there.

// assign gives r an idle slot at work time v, reusing the longest cached
// prefix among idle slots and RAM cache entries. It reports false if every
// slot is busy.
func (s *Server) assign(r *request, v time.Duration) bool {
	lru := -1
	for i := range s.slots {
		sl := &s.slots[i]
		if sl.state == slotIdle && (lru < 0 || sl.lastUsed < s.slots[lru].lastUsed) {
			lru = i
		}
	}
	if lru < 0 {
		return false
	}
	target, keep, from := lru, 0, -1
	if !r.noCache {
		target, keep, from = s.best(r, lru)
	}
	if s.cfg.KVTokens > 0 && !s.reserveKV(r, target) {
		return false // waits, at the head of the queue, for running requests to end
	}
	sl := &s.slots[target]
	// The entry to load leaves the cache first (llama.cpp moves it out), so
	// that saving the slot below cannot evict it.
	var load *entry
	if from >= 0 {
		load = s.cache[from]
		s.dropEntry(from)
	}
	// A slot whose state is mostly going to be overwritten is saved to
	// the RAM cache first (when the cache is on).
	if sl.indexed {
		kept := keep
		switch {
		case r.noCache:
			kept = 0
		case load != nil:
			kept = sl.seq.lcp(r.toks, r.blocks)
		}
		sl.indexed = false
		// A saved slot's hashes stay counted in the index: they are the
		// new entry's.
		if 2*kept >= len(sl.toks) || !s.save(&sl.seq) {
			s.idx.remove(sl.blocks)
		}
	}
	if load != nil {
		sl.seq, load.seq = load.seq, sl.seq
		s.recycle(load)
		s.stats.CacheLoads++
	}
	keep = min(keep, len(r.toks)-1) // at least one token is evaluated, for its logits
	sl.toks = append(sl.toks[:0], r.toks...)
	sl.state = slotPrefill
	sl.req = r
	sl.pos = keep
	sl.pending = len(r.toks) - keep
	sl.chunk = 0
	sl.gen = 0
	r.cacheN = keep
	r.started = s.clk.t(v)
	return true
}

// reserveKV reports whether r, admitted into slot target, fits the shared
// KV pool (Config.KVTokens): every running request holds its prompt and its
// whole answer (a reservation: the model does not preempt), every other
// idle slot the tokens it caches. When the cached tokens are in the way,
// idle slots are emptied, least recently used first, until r fits, as
// vLLM evicts free cached blocks; when running requests alone leave no room,
// nothing is evicted and r waits.
func (s *Server) reserveKV(r *request, target int) bool {
	need := len(r.toks) + r.target
	used, cached := 0, 0
	for i := range s.slots {
		sl := &s.slots[i]
		switch {
		case i == target:
		case sl.state != slotIdle:
			used += len(sl.req.toks) + sl.req.target
		case sl.indexed:
			cached += len(sl.toks)
		}
	}
	limit := s.cfg.KVTokens
	if used+need > limit {
		return false
	}
	for used+cached+need > limit {
		lru := -1
		for i := range s.slots {
			sl := &s.slots[i]
			if i != target && sl.state == slotIdle && sl.indexed && (lru < 0 || sl.lastUsed < s.slots[lru].lastUsed) {
				lru = i
			}
		}
		sl := &s.slots[lru] // exists: cached > 0
		cached -= len(sl.toks)
		s.idx.remove(sl.blocks)
		sl.indexed = false
		sl.toks, sl.blocks = sl.toks[:0], sl.blocks[:0]
	}
	return true
}

// best finds where r reuses the most: the least recently used idle slot
// by default; another idle slot if it shares more and more than a tenth of
// the prompt (llama.cpp's slot-prompt-similarity, 0.1); a RAM cache entry if
// it beats the chosen slot on both the kept share of the entry and the
// covered share of the prompt, and would keep at least a quarter of itself
// (llama.cpp's prompt cache rules; it is then loaded into the LRU slot).
// It returns the slot to use, the prefix length, and the index of the cache
// entry to load (-1 for none).
func (s *Server) best(r *request, lru int) (target, keep, from int) {
	target, from = lru, -1
	if sl := &s.slots[lru]; sl.indexed {
		keep = sl.seq.lcp(r.toks, r.blocks)
	}
	d := s.idx.depth(r.blocks)
	for pass := 0; pass < 2; pass++ {
		found := 0
		for i := range s.slots {
			sl := &s.slots[i]
			if !sl.indexed || !candidate(&sl.seq, r.blocks, d) {
				continue
			}
			found++
			l := d*blockSize + commonPrefix(sl.toks[d*blockSize:], r.toks[d*blockSize:])
			if l > keep && 10*l > len(r.toks) {
				target, keep = i, l
			}
		}
		// The cache entries that can be candidates: with d > 0, the
		// sequences holding the d-th hash (its count in the index) less
		// the slots among them; at most that many entries are scanned for.
		left := len(s.cache)
		if d > 0 {
			left = int(s.idx.count.get(r.blocks[d-1])) - found
		}
		var n int
		n, keep, from = s.bestEntry(r, d, target, keep, from, left)
		if found+n > 0 || d == 0 {
			break
		}
		d = 0 // a hash collision sent us deep for nothing: compare from the start
	}
	if from >= 0 {
		target = lru
	}
	return target, keep, from
}

// bestEntry is best's pass over the RAM cache, newest first, at depth d,
// the chosen slot target keeping keep tokens: llama.cpp's
// server_prompt_cache::load. The slot's own prompt sets the bar (f_keep =
// kept share of the cached prompt, f_sim = covered share of the new one);
// an entry must beat it on both, and an entry that would keep less than a
// quarter of itself is never loaded ("don't trash large prompts"). It stops
// once left candidates (an upper bound on their number) were seen, and
// returns the candidates seen, the prefix length and the entry to load.
func (s *Server) bestEntry(r *request, d, target, keep, from, left int) (int, int, int) {
	keepBest, simBest := 0.0, float64(keep)/float64(len(r.toks))
	if n := len(s.slots[target].toks); s.slots[target].indexed && n > 0 {
		keepBest = float64(keep) / float64(n)
	}
	seen := 0
	for i := len(s.cache) - 1; i >= 0 && seen < left; i-- {
		if !s.candidateEntry(i, r.blocks, d) {
			continue
		}
		e := s.cache[i]
		seen++
		l := d*blockSize + commonPrefix(e.toks[d*blockSize:], r.toks[d*blockSize:])
		fKeep, fSim := float64(l)/float64(len(e.toks)), float64(l)/float64(len(r.toks))
		if fKeep < 0.25 {
			continue
		}
		if fKeep > keepBest && fSim > simBest {
			keepBest, simBest = fKeep, fSim
			keep, from = l, i
		}
	}
	return seen, keep, from
}

// candidateEntry is candidate for cache entry i, its key read first.
func (s *Server) candidateEntry(i int, blocks []uint64, d int) bool {
	k := s.keys[i]
	switch {
	case d == 0:
		return true
	case int(k.nb) < d:
		return false
	case int(k.nb) == d:
		return k.last == blocks[d-1]
	}
	return s.cache[i].blocks[d-1] == blocks[d-1]
}

func candidate(q *seq, blocks []uint64, d int) bool {
	return d == 0 || (len(q.blocks) >= d && q.blocks[d-1] == blocks[d-1])
}
