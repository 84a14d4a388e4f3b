package prefix

// blockTable finds a block's entry: the Index's one table over every block
// some replica holds (a million at a thousand replicas), looked up for each
// new block an Insert records and each block a Match reads, and changed
// whenever a block gains its first holder or loses its last. A Go map of
// that size costs a few cache misses per operation (directory, control
// word, slot); this is open addressing with linear probing over 8-byte
// slots (the top 32 bits of the block's Fibonacci hash, its entry + 1), at
// most three quarters full, deletion by shifting the following run back
// (no tombstones): one miss, usually. A slot's key is its entry's block,
// read only when the 32 bits agree. Nothing iterates it, so its layout
// never shows in a result.
type blockTable struct {
	slots []blockSlot // len a power of two (at most 2^32), or 0
	shift uint        // 64 - log2(len(slots))
	n     int         // blocks held
}

type blockSlot struct {
	tag uint32 // the top 32 bits of hash(block)
	ent int32  // entry + 1; 0: empty
}

func blockHash(b uint64) uint64 { return b * 0x9E3779B97F4A7C15 }

// home is the first slot of a key whose hash has these top 32 bits.
func (t *blockTable) home(tag uint32) int { return int(tag >> (t.shift - 32)) }

// lookupBlock returns block b's entry.
func (ix *Index) lookupBlock(b uint64) (int32, bool) {
	t := &ix.blocks
	if t.n == 0 {
		return 0, false
	}
	tag := uint32(blockHash(b) >> 32)
	mask := len(t.slots) - 1
	for i := t.home(tag); ; i = (i + 1) & mask {
		s := t.slots[i]
		if s.ent == 0 {
			return 0, false
		}
		if s.tag == tag && ix.ents[s.ent-1].block == b {
			return s.ent - 1, true
		}
	}
}

// addBlock records entry ei for block b, which has none.
func (ix *Index) addBlock(b uint64, ei int32) {
	t := &ix.blocks
	if 4*(t.n+1) > 3*len(t.slots) {
		t.grow()
	}
	tag := uint32(blockHash(b) >> 32)
	mask := len(t.slots) - 1
	i := t.home(tag)
	for t.slots[i].ent != 0 {
		i = (i + 1) & mask
	}
	t.slots[i] = blockSlot{tag: tag, ent: ei + 1}
	t.n++
}

// dropBlock removes block b, whose entry is ei.
func (ix *Index) dropBlock(b uint64, ei int32) {
	t := &ix.blocks
	mask := len(t.slots) - 1
	i := t.home(uint32(blockHash(b) >> 32))
	for t.slots[i].ent != ei+1 {
		i = (i + 1) & mask // b is held: its slot comes before an empty one
	}
	t.n--
	// Shift back each following key whose home is not in (i, j]: the
	// run stays unbroken from every key's home to the key.
	for j := (i + 1) & mask; t.slots[j].ent != 0; j = (j + 1) & mask {
		if h := t.home(t.slots[j].tag); (j-h)&mask >= (j-i)&mask {
			t.slots[i] = t.slots[j]
			i = j
		}
	}
	t.slots[i] = blockSlot{}
}

// grow doubles the table (1,024 slots at first) and re-inserts the keys,
// from their tags alone.
func (t *blockTable) grow() {
	old := t.slots
	size := max(1024, 2*len(old))
	t.slots = make([]blockSlot, size)
	t.shift = 64
	for s := size; s > 1; s >>= 1 {
		t.shift--
	}
	mask := size - 1
	for _, s := range old {
		if s.ent == 0 {
			continue
		}
		i := t.home(s.tag)
		for t.slots[i].ent != 0 {
			i = (i + 1) & mask
		}
		t.slots[i] = s
	}
}

func (t *blockTable) bytes() int64 { return int64(cap(t.slots)) * 8 }
