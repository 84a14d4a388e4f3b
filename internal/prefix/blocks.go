package prefix

// openTable is open addressing with linear probing over 8-byte slots (the
// top 32 bits of a key's hash, a value + 1), at most three quarters full,
// deletion by shifting the following run back (no tombstones): one cache
// miss, usually, where a Go map of a million keys costs several
// (directory, control word, slot). The table does not keep keys: each
// user reads a value's key where it lives (an entry's block, a node's
// block and slot) when the 32 bits agree. Nothing iterates it, so its
// layout never shows in a result. Two tables use it:
//
//   - blocks: block → its entry, over every block some replica holds (a
//     million at a thousand replicas), looked up for each new block an
//     Insert records and each block a Match reads, and changed whenever a
//     block gains its first holder or loses its last;
//   - pairs: (block, slot) → the slot's node of the block, for every
//     (block, replica) pair held, looked up where Insert and follow do not
//     find a block by following the replica's list.
type openTable struct {
	slots []blockSlot // len a power of two (at most 2^32), or 0
	shift uint        // 64 - log2(len(slots))
	n     int         // keys held
}

type blockSlot struct {
	tag uint32 // the top 32 bits of the key's hash
	ent int32  // value + 1; 0: empty
}

func blockHash(b uint64) uint64 { return b * 0x9E3779B97F4A7C15 }

// pairTag is the tag of (block b, slot s) in pairs.
func pairTag(b uint64, s int32) uint32 {
	return uint32(blockHash(b^(uint64(uint32(s))+1)*0xBF58476D1CE4E5B9) >> 32)
}

// home is the first slot of a key whose hash has these top 32 bits.
func (t *openTable) home(tag uint32) int { return int(tag >> (t.shift - 32)) }

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

// lookupNode returns slot s's node of block b.
func (ix *Index) lookupNode(s int32, b uint64) (int32, bool) {
	t := &ix.pairs
	if t.n == 0 {
		return nilNode, false
	}
	tag := pairTag(b, s)
	mask := len(t.slots) - 1
	for i := t.home(tag); ; i = (i + 1) & mask {
		e := t.slots[i]
		if e.ent == 0 {
			return nilNode, false
		}
		if e.tag == tag {
			if nd := &ix.nodes[e.ent-1]; nd.block == b && nd.slot == s {
				return e.ent - 1, true
			}
		}
	}
}

// addBlock records entry ei for block b, which has none.
func (ix *Index) addBlock(b uint64, ei int32) { ix.blocks.add(uint32(blockHash(b)>>32), ei) }

// dropBlock removes block b, whose entry is ei.
func (ix *Index) dropBlock(b uint64, ei int32) { ix.blocks.drop(uint32(blockHash(b)>>32), ei) }

// addPair records node n, slot s's node of block b, which it did not hold.
func (ix *Index) addPair(b uint64, s, n int32) { ix.pairs.add(pairTag(b, s), n) }

// dropPair removes node n, slot s's node of block b.
func (ix *Index) dropPair(b uint64, s, n int32) { ix.pairs.drop(pairTag(b, s), n) }

// add records value v under a key with this tag; the key is not held.
func (t *openTable) add(tag uint32, v int32) {
	if 4*(t.n+1) > 3*len(t.slots) {
		t.grow()
	}
	mask := len(t.slots) - 1
	i := t.home(tag)
	for t.slots[i].ent != 0 {
		i = (i + 1) & mask
	}
	t.slots[i] = blockSlot{tag: tag, ent: v + 1}
	t.n++
}

// drop removes value v, held under a key with this tag.
func (t *openTable) drop(tag uint32, v int32) {
	mask := len(t.slots) - 1
	i := t.home(tag)
	for t.slots[i].ent != v+1 {
		i = (i + 1) & mask // v is held: its slot comes before an empty one
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
func (t *openTable) grow() {
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

func (t *openTable) bytes() int64 { return int64(cap(t.slots)) * 8 }
