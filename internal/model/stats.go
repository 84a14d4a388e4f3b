package model

import "time"

// Stats are a server's counters and gauges, as llama.cpp's /metrics reports
// them. Counters count finished requests (as llama.cpp does).
type Stats struct {
	Requests        int64         // finished requests
	PromptTokens    int64         // prompt tokens processed (llamacpp:prompt_tokens_total)
	PromptTime      time.Duration // their prompt time (llamacpp:prompt_seconds_total)
	PredictedTokens int64         // tokens generated (llamacpp:tokens_predicted_total)
	PredictedTime   time.Duration // their generation time (llamacpp:tokens_predicted_seconds_total)
	CacheN          int64         // prompt tokens reused from a cache
	Decodes         int64         // steps (llamacpp:n_decode_total)
	BusySlotSteps   int64         // Σ over steps of the slots in the batch
	CacheSaves      int64         // slot states saved to the RAM cache
	CacheLoads      int64         // RAM cache entries loaded into a slot
	CacheEvictions  int64         // RAM cache entries evicted for room

	Processing   int     // requests holding a slot (llamacpp:requests_processing)
	Deferred     int     // requests waiting for a slot (llamacpp:requests_deferred)
	KVTokens     int     // tokens held in the slots' KV cache (llamacpp:kv_cache_tokens)
	KVUsage      float64 // KVTokens / CtxSize (llamacpp:kv_cache_usage_ratio)
	CacheEntries int     // RAM prompt cache entries
	CacheTokens  int     // tokens held by them
	CacheBytes   int64   // their size

	// Paged engines (Config.Engine vllm or sglang) only; for them KVUsage
	// is vLLM's kv_cache_usage_perc (blocks held by requests / NumBlocks),
	// KVTokens those blocks in tokens, CacheEvictions the cached blocks
	// evicted, and CacheN the prompt tokens found cached at admission.
	BlockSize     int   // tokens per block (vllm:cache_config_info block_size)
	NumBlocks     int   // blocks in the pool (vllm:cache_config_info num_gpu_blocks)
	FreeBlocks    int   // blocks not held by a request (cached or empty)
	CachedBlocks  int   // blocks findable by hash
	PrefixQueries int64 // tokens looked up at admissions (vllm:prefix_cache_queries)
	PrefixHits    int64 // of those, found cached (vllm:prefix_cache_hits)
	Preemptions   int64 // running requests preempted (vllm:num_preemptions)
	// LoRA adapters (paged engines with Config.MaxLoras > 0): adapters
	// loaded into a GPU slot, and resident idle adapters evicted for
	// another. Server.Adapters reports which are running and waiting.
	AdapterLoads     int64
	AdapterEvictions int64
}

// Stats returns the server's statistics.
func (s *Server) Stats() Stats {
	if s.pg != nil {
		return s.pg.statsNow()
	}
	st := s.stats
	st.Deferred = len(s.queue) - s.qhead
	for i := range s.slots {
		sl := &s.slots[i]
		if sl.state != slotIdle {
			st.Processing++
			st.KVTokens += sl.pos
		} else {
			st.KVTokens += len(sl.toks)
		}
	}
	st.KVUsage = float64(st.KVTokens) / float64(s.cfg.CtxSize)
	st.CacheEntries = len(s.cache)
	for _, e := range s.cache {
		st.CacheTokens += len(e.toks)
	}
	st.CacheBytes = s.cacheB
	return st
}

// SlotInfo describes one slot, as llama.cpp's /slots does.
type SlotInfo struct {
	ID         int
	NCtx       int
	Processing bool
	Task       ID  // request in the slot (0 if idle)
	NPast      int // tokens in the slot's KV cache
	NPrompt    int // prompt tokens of the request (0 if idle)
	NDecoded   int // tokens generated so far
	NRemain    int // tokens still to generate (0 if idle)
}

// Slots describes the slots.
func (s *Server) Slots() []SlotInfo {
	if s.pg != nil {
		return s.pg.slots()
	}
	out := make([]SlotInfo, len(s.slots))
	for i := range s.slots {
		sl := &s.slots[i]
		si := SlotInfo{ID: sl.id, NCtx: s.nCtx}
		if sl.state == slotIdle {
			si.NPast = len(sl.toks)
		} else {
			si.Processing = true
			si.Task = sl.req.id
			si.NPast = sl.pos
			si.NPrompt = len(sl.req.toks)
			si.NDecoded = sl.gen
			si.NRemain = sl.req.target - sl.gen
		}
		out[i] = si
	}
	return out
}

// CachedPrefix returns the longest prefix of toks that the server holds in
// an idle slot or its RAM cache (what a request with this prompt would reuse
// if it were given a slot now, before the one-token minimum). It does not
// change the server.
func (s *Server) CachedPrefix(toks []Token) int {
	if s.pg != nil {
		return s.pg.cachedPrefix(toks)
	}
	blocks := chainHashes(nil, toks)
	best := 0
	for i := range s.slots {
		if sl := &s.slots[i]; sl.indexed {
			best = max(best, sl.seq.lcp(toks, blocks))
		}
	}
	for _, e := range s.cache {
		best = max(best, e.lcp(toks, blocks))
	}
	return best
}
