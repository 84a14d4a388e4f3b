package model

// blockIndex maps the chain hashes of a pool's cached blocks to their
// blocks: an open-addressing table (linear probing, deletion by backward
// shift), cheaper than a Go map on the paged engine's hot path (every
// admission's prefix match, every full block registered, every eviction).
// It is never iterated, so its layout cannot reach a result. Key 0 marks a
// free cell; a hash of 0 is kept beside the table.
type blockIndex struct {
	keys    []uint64
	vals    []int32
	n       int // entries, zero's included
	shift   uint
	zero    int32
	hasZero bool
}

const blockIndexMinBits = 6

func (t *blockIndex) slot(h uint64) int {
	return int((h * 0x9E3779B97F4A7C15) >> t.shift)
}

// get returns the block of hash h.
func (t *blockIndex) get(h uint64) (int32, bool) {
	if p := t.ref(h); p != nil {
		return *p, true
	}
	return 0, false
}

// ref returns the value cell of hash h (valid until the next put or del),
// or nil when h is absent.
func (t *blockIndex) ref(h uint64) *int32 {
	if h == 0 {
		if t.hasZero {
			return &t.zero
		}
		return nil
	}
	if len(t.keys) == 0 {
		return nil
	}
	mask := len(t.keys) - 1
	for i := t.slot(h); ; i = (i + 1) & mask {
		switch t.keys[i] {
		case h:
			return &t.vals[i]
		case 0:
			return nil
		}
	}
}

// put sets the block of hash h (an entry the caller knows is absent).
func (t *blockIndex) put(h uint64, b int32) {
	t.n++
	if h == 0 {
		t.zero, t.hasZero = b, true
		return
	}
	if 4*t.n > 3*len(t.keys) {
		t.grow()
	}
	mask := len(t.keys) - 1
	i := t.slot(h)
	for t.keys[i] != 0 {
		i = (i + 1) & mask
	}
	t.keys[i], t.vals[i] = h, b
}

func (t *blockIndex) grow() {
	old, oldV := t.keys, t.vals
	bits := uint(blockIndexMinBits)
	if len(old) > 0 {
		bits = uint(64-t.shift) + 1
	}
	t.keys, t.vals, t.shift = make([]uint64, 1<<bits), make([]int32, 1<<bits), 64-bits
	mask := len(t.keys) - 1
	for j, h := range old {
		if h == 0 {
			continue
		}
		i := t.slot(h)
		for t.keys[i] != 0 {
			i = (i + 1) & mask
		}
		t.keys[i], t.vals[i] = h, oldV[j]
	}
}

// del removes hash h (which must be present), shifting back the entries
// of its probe run so that no lookup stops early.
func (t *blockIndex) del(h uint64) {
	t.n--
	if h == 0 {
		t.hasZero = false
		return
	}
	mask := len(t.keys) - 1
	i := t.slot(h)
	for t.keys[i] != h {
		i = (i + 1) & mask
	}
	for j := (i + 1) & mask; t.keys[j] != 0; j = (j + 1) & mask {
		// Move entry j into the hole at i if its home is not in (i, j].
		if home := t.slot(t.keys[j]); (j-home)&mask >= (j-i)&mask {
			t.keys[i], t.vals[i] = t.keys[j], t.vals[j]
			i = j
		}
	}
	t.keys[i] = 0
}

// len returns the number of entries.
func (t *blockIndex) len() int { return t.n }
