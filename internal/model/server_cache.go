package model

// save moves q into the RAM cache as its most recent entry, dropping
// entries that are prefixes of q and evicting the least recently used ones
// to make room. The entry takes q's buffers, leaving q empty (its caller, a
// slot about to take a new prompt, overwrites it); q is left as it was when
// it is not saved (too large, or already cached).
func (s *Server) save(q *seq) {
	size := int64(len(q.toks)) * int64(s.cfg.BytesPerToken)
	if size == 0 || size > s.limitB {
		return
	}
	for i := 0; i < len(s.cache); i++ {
		e := s.cache[i]
		switch {
		case isPrefix(q, &e.seq):
			// q is already cached (as e or a prefix of e): refresh e.
			copy(s.cache[i:], s.cache[i+1:])
			s.cache[len(s.cache)-1] = e
			return
		case isPrefix(&e.seq, q):
			s.dropEntry(i)
			s.recycle(e)
			i--
		}
	}
	for s.cacheB+size > s.limitB {
		e := s.cache[0]
		s.dropEntry(0)
		s.recycle(e)
		s.stats.CacheEvictions++
	}
	// The entry takes q's buffers (q is about to be overwritten: its
	// slot takes a new prompt) and q the spare entry's, empty.
	e := s.newEntry()
	e.toks, q.toks = q.toks, e.toks[:0]
	e.blocks, q.blocks = q.blocks, e.blocks[:0]
	e.bytes = size
	s.cache = append(s.cache, e)
	s.cacheB += size
	s.idx.add(e.blocks)
	s.stats.CacheSaves++
}

// dropEntry removes cache entry i from the cache and the index.
func (s *Server) dropEntry(i int) {
	e := s.cache[i]
	s.idx.remove(e.blocks)
	s.cacheB -= e.bytes
	copy(s.cache[i:], s.cache[i+1:])
	s.cache[len(s.cache)-1] = nil
	s.cache = s.cache[:len(s.cache)-1]
}

func (s *Server) newEntry() *entry {
	if n := len(s.spare); n > 0 {
		e := s.spare[n-1]
		s.spare = s.spare[:n-1]
		return e
	}
	return &entry{}
}

func (s *Server) recycle(e *entry) {
	e.toks, e.blocks, e.bytes = e.toks[:0], e.blocks[:0], 0
	s.spare = append(s.spare, e)
}
