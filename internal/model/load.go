package model

// Load is what a replica reports about its own load, as llama.cpp's
// /metrics does: the cheap part of Stats, for samplers that read it often.
type Load struct {
	Processing int     // requests holding a slot (llamacpp:requests_processing)
	Deferred   int     // requests waiting for a slot (llamacpp:requests_deferred)
	KVUsage    float64 // tokens in the slots' KV cache / CtxSize (llamacpp:kv_cache_usage_ratio)
}

// Load returns the server's load as of its last event (Stats without the
// RAM cache totals).
func (s *Server) Load() Load {
	if s.pg != nil { // the paged engine keeps its own queue and pool
		return Load{Processing: len(s.pg.running), Deferred: len(s.pg.waiting), KVUsage: s.pg.pool.usage()}
	}
	var l Load
	l.Deferred = len(s.queue) - s.qhead
	kv := 0
	for i := range s.slots {
		sl := &s.slots[i]
		if sl.state != slotIdle {
			l.Processing++
			kv += sl.pos
		} else {
			kv += len(sl.toks)
		}
	}
	l.KVUsage = float64(kv) / float64(s.cfg.CtxSize)
	return l
}
