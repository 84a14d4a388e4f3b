package model

// counts is a hash table from a chain hash to a positive count: the
// prefix index's map (prefix.go). Go's map costs a hash and a probe of
// control bytes per operation; a server adds and removes every block of
// every sequence it indexes, so this is open addressing with linear
// probing over (key, count) pairs, an empty slot having count 0, deletion
// by shifting the following run back (no tombstones), Fibonacci hashing of
// the key, and at most half the slots in use. Nothing iterates it, so its
// layout never shows in a result.
type counts struct {
	slots []countSlot // len a power of two, or 0
	shift uint        // 64 - log2(len(slots))
	n     int         // keys held
}

type countSlot struct {
	key uint64
	n   int32 // 0: empty
}

func (c *counts) home(k uint64) int { return int((k * 0x9E3779B97F4A7C15) >> c.shift) }

// get returns k's count (0 if absent).
func (c *counts) get(k uint64) int32 {
	if c.n == 0 {
		return 0
	}
	mask := len(c.slots) - 1
	for i := c.home(k); ; i = (i + 1) & mask {
		s := &c.slots[i]
		if s.n == 0 {
			return 0
		}
		if s.key == k {
			return s.n
		}
	}
}

// inc adds one to k's count.
func (c *counts) inc(k uint64) {
	if 2*(c.n+1) > len(c.slots) {
		c.grow()
	}
	mask := len(c.slots) - 1
	for i := c.home(k); ; i = (i + 1) & mask {
		s := &c.slots[i]
		if s.n == 0 {
			*s = countSlot{key: k, n: 1}
			c.n++
			return
		}
		if s.key == k {
			s.n++
			return
		}
	}
}

// dec takes one from k's count, dropping k at 0; an absent k is ignored.
func (c *counts) dec(k uint64) {
	if c.n == 0 {
		return
	}
	mask := len(c.slots) - 1
	i := c.home(k)
	for ; ; i = (i + 1) & mask {
		s := &c.slots[i]
		if s.n == 0 {
			return
		}
		if s.key == k {
			break
		}
	}
	if c.slots[i].n--; c.slots[i].n > 0 {
		return
	}
	c.n--
	// Shift back each following key whose home is not in (i, j]: the
	// run stays unbroken from every key's home to the key.
	for j := (i + 1) & mask; c.slots[j].n != 0; j = (j + 1) & mask {
		if h := c.home(c.slots[j].key); (j-h)&mask >= (j-i)&mask {
			c.slots[i] = c.slots[j]
			i = j
		}
	}
	c.slots[i] = countSlot{}
}

// grow doubles the table (16 slots at first) and re-inserts the keys.
func (c *counts) grow() {
	old := c.slots
	size := max(16, 2*len(old))
	c.slots = make([]countSlot, size)
	c.shift = 64
	for s := size; s > 1; s >>= 1 {
		c.shift--
	}
	mask := size - 1
	for _, s := range old {
		if s.n == 0 {
			continue
		}
		i := c.home(s.key)
		for c.slots[i].n != 0 {
			i = (i + 1) & mask
		}
		c.slots[i] = s
	}
}
