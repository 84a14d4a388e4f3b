package model

// counts is a hash table from a chain hash to a positive count: the
// prefix index's map (prefix.go), kept in the paged engine's blockIndex
// (paged_hash.go: open addressing, cheaper than a Go map for a server that
// adds and removes every block of every sequence it indexes). A key whose
// count falls to 0 is dropped.
type counts struct{ t blockIndex }

// get returns k's count (0 if absent).
func (c *counts) get(k uint64) int32 {
	v, _ := c.t.get(k)
	return v
}

// inc adds one to k's count.
func (c *counts) inc(k uint64) {
	if p := c.t.ref(k); p != nil {
		*p++
		return
	}
	c.t.put(k, 1)
}

// dec takes one from k's count, dropping k at 0; an absent k is ignored.
func (c *counts) dec(k uint64) {
	switch p := c.t.ref(k); {
	case p == nil:
	case *p > 1:
		*p--
	default:
		c.t.del(k)
	}
}

// len returns the number of keys held.
func (c *counts) len() int { return c.t.len() }
