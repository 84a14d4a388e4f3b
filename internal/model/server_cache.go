package model

// save moves q, an indexed slot's sequence, into the RAM cache as its most
// recent entry, dropping entries that are prefixes of q and evicting the
// least recently used ones to make room, and reports whether it did. The
// entry takes q's buffers, leaving q empty (its caller, a slot about to
// take a new prompt, overwrites it), and q's hashes, counted in the index,
// stay counted as the entry's. q is left as it was, and counted, when it is
// not saved (too large, or already cached).
func (s *Server) save(q *seq) bool {
	size := int64(len(q.toks)) * int64(s.cfg.BytesPerToken)
	if size == 0 || size > s.limitB {
		return false
	}
	// The entries' keys rule most of them out without reading them: an
	// entry q is a prefix of is at least as long and holds q's last full
	// block hash, so some indexed sequence other than q does; an entry
	// that is a prefix of q is no longer and its last hash is q's at the
	// same block.
	extended := len(q.blocks) == 0 || heldElsewhere(&s.idx, q.blocks)
	for i := 0; i < len(s.cache); i++ {
		k := s.keys[i]
		switch {
		case extended && k.mayExtend(q) && isPrefix(q, &s.cache[i].seq):
			// q is already cached (as e or a prefix of e): refresh e.
			e := s.cache[i]
			copy(s.cache[i:], s.cache[i+1:])
			s.cache[len(s.cache)-1] = e
			copy(s.keys[i:], s.keys[i+1:])
			s.keys[len(s.keys)-1] = k
			return false
		case k.mayPrefix(q) && isPrefix(&s.cache[i].seq, q):
			e := s.cache[i]
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
	s.keys = append(s.keys, keyOf(&e.seq))
	s.cacheB += size
	s.stats.CacheSaves++
	return true
}

// heldElsewhere reports whether a sequence other than the indexed one with
// these hashes holds its last: the count of the last hash exceeds the
// number of times it occurs in blocks.
func heldElsewhere(x *prefixIndex, blocks []uint64) bool {
	last, own := blocks[len(blocks)-1], int32(0)
	for _, h := range blocks {
		if h == last {
			own++
		}
	}
	return x.count.get(last) > own
}

// cacheKey is what the RAM cache's scans read of an entry first, kept in
// Server.keys in the cache's order (one dense array): its length in
// tokens and in full blocks, and its last block hash (0: none).
type cacheKey struct {
	n, nb int32
	last  uint64
}

// mayExtend is false when q cannot be a prefix of the entry: it is longer.
func (k cacheKey) mayExtend(q *seq) bool { return int(k.n) >= len(q.toks) }

// mayPrefix is false when the entry cannot be a prefix of q: it is longer,
// or its last full block's hash is not q's.
func (k cacheKey) mayPrefix(q *seq) bool {
	return int(k.n) <= len(q.toks) && int(k.nb) <= len(q.blocks) && (k.nb == 0 || q.blocks[k.nb-1] == k.last)
}

func keyOf(q *seq) cacheKey {
	k := cacheKey{n: int32(len(q.toks)), nb: int32(len(q.blocks))}
	if k.nb > 0 {
		k.last = q.blocks[k.nb-1]
	}
	return k
}

// dropEntry removes cache entry i from the cache and the index.
func (s *Server) dropEntry(i int) {
	e := s.cache[i]
	s.idx.remove(e.blocks)
	s.cacheB -= e.bytes
	copy(s.cache[i:], s.cache[i+1:])
	s.cache[len(s.cache)-1] = nil
	s.cache = s.cache[:len(s.cache)-1]
	copy(s.keys[i:], s.keys[i+1:])
	s.keys = s.keys[:len(s.keys)-1]
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
