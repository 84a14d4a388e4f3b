package prefix

import (
	"math"
	"math/bits"
)

// followAt is the number of candidates still matching at or below which
// Match stops reading blocks' holders and follows each candidate's own list
// (follow): a map lookup per block for all candidates costs more than a few
// candidates' next nodes.
const followAt = 4

// Match fills out[i] with the number of leading blocks of a prompt that
// replicas[i] holds: blocks[0..out[i]) are all held, unexpired at now, and
// blocks[out[i]] is not. Unknown replicas hold nothing. out must be at least
// as long as replicas. Match allocates nothing; it first drops the
// candidates' expired blocks (invisible anyway; each block is dropped once),
// so that it never has to check a block's age.
//
// The walk is over the prompt's blocks, not over the candidates: block i's
// holders (a bitset) narrow the set of candidates still matching, and a
// candidate leaves it at its depth; once few are left, each follows its own
// list. A candidate costs a bit set and a depth read, whatever it holds.
func (ix *Index) Match(blocks []uint64, now int64, replicas []uint32, out []int32) {
	ix.MatchSalted(blocks, 0, now, replicas, out)
}

// MatchSalted is Match for an adapter's prompt: it matches the blocks as
// InsertSalted recorded them with the same salt (salt.go; salt 0 is Match),
// so what was cached for another adapter or the base model does not match.
// blocks is not modified; it allocates nothing.
func (ix *Index) MatchSalted(blocks []uint64, salt uint64, now int64, replicas []uint32, out []int32) {
	ix.MatchListSalted(blocks, salt, now, replicas, 0, out)
}

// MatchListSalted is MatchSalted with a name for the candidate list: list,
// when not 0, is the caller's promise that every call with the same list
// passes the same replicas (a router numbers its replica sets), so that
// Match need not compare a long list with the one it kept (list.go).
func (ix *Index) MatchListSalted(blocks []uint64, salt uint64, now int64, replicas []uint32, list uint64, out []int32) {
	if len(out) < len(replicas) {
		panic("prefix: Index.Match: out is shorter than replicas")
	}
	out = out[:len(replicas)]
	if len(blocks) == 0 {
		clear(out)
		return
	}
	cutoff := int64(math.MinInt64) // no TTL: nothing expires
	if ix.cfg.TTL > 0 {
		cutoff = now - ix.cfg.TTL
	}
	wide := ix.wide.begin(len(ix.reps))
	if len(replicas) >= listMin {
		ix.matchList(blocks, salt, now, cutoff, replicas, list, out)
		return
	}
	var fast uint64 // candidates in slots 0..63
	for _, id := range replicas {
		s := ix.slot(id)
		if s < 0 {
			continue
		}
		// With its expired blocks gone, what a replica holds is exactly
		// what it holds unexpired.
		if ix.tailAt[s] < cutoff {
			ix.expireSlot(s, now)
		}
		if s < 64 {
			fast |= 1 << uint(s)
			continue
		}
		wide.alive[(s-64)/64] |= 1 << uint((s-64)%64)
		wide.any = true
	}
	var depth [64]int32
	if fast != 0 {
		ix.matchFast(blocks, salt, fast, &depth)
	}
	if wide.any {
		ix.matchWide(blocks, salt)
	}
	for k, id := range replicas {
		out[k] = slotDepth(ix.slot(id), &depth, wide.depth)
	}
}

// slotDepth is the matched depth of the replica in slot s (-1: none): the
// first 64 slots' from depth, the others' from wide.
func slotDepth(s int32, depth *[64]int32, wide []int32) int32 {
	switch {
	case s < 0:
		return 0
	case s < 64:
		return depth[s]
	default:
		return wide[s-64]
	}
}

// matchList is MatchSalted for a long candidate list (list.go): the
// candidates' slots and bitsets come from the list kept for the last one
// passed, so a candidate costs reads of dense arrays, not a lookup.
func (ix *Index) matchList(blocks []uint64, salt uint64, now, cutoff int64, replicas []uint32, list uint64, out []int32) {
	l := ix.listFor(replicas, list)
	if ix.cfg.TTL > 0 && l.tailLow < cutoff {
		low := int64(math.MaxInt64)
		for _, s := range l.slots {
			if s < 0 {
				continue
			}
			if ix.tailAt[s] < cutoff {
				ix.expireSlot(s, now)
			}
			low = min(low, ix.tailAt[s])
		}
		l.tailLow = low
	}
	w := &ix.wide
	var depth [64]int32
	if l.fast != 0 {
		ix.matchFast(blocks, salt, l.fast, &depth)
	}
	if l.anyWide {
		copy(w.alive, l.wide)
		ix.matchWide(blocks, salt)
	}
	for k, s := range l.slots {
		out[k] = slotDepth(s, &depth, w.depth)
	}
}

// matchFast is Match for the candidates in slots 0..63 (the bits of alive),
// the blocks keyed with salt: it leaves each candidate's depth in depth.
func (ix *Index) matchFast(blocks []uint64, salt uint64, alive uint64, depth *[64]int32) {
	i := 0
	for ; i < len(blocks) && bits.OnesCount64(alive) > followAt; i++ {
		held := alive & ix.entry(blocks[i]^salt).mask
		for gone := alive &^ held; gone != 0; gone &= gone - 1 {
			depth[bits.TrailingZeros64(gone)] = int32(i)
		}
		alive = held
	}
	for ; alive != 0; alive &= alive - 1 {
		s := bits.TrailingZeros64(alive)
		depth[s] = int32(ix.follow(int32(s), blocks, salt, i, nil))
	}
}

// matchWide is Match for the candidates in slots >= 64 (the bits of
// wide.alive), the blocks keyed with salt: it walks the prompt's blocks as
// matchFast does, the block's holders read from its mask or its (short)
// chain, and leaves each candidate's depth in wide.depth.
func (ix *Index) matchWide(blocks []uint64, salt uint64) {
	w := &ix.wide
	left := 0
	for _, a := range w.alive {
		left += bits.OnesCount64(a)
	}
	i := 0
	for ; i < len(blocks) && left > followAt; i++ {
		e := ix.entry(blocks[i] ^ salt)
		held := w.tmp
		if e.hi != 0 {
			held = w.mask(e.hi)
		} else {
			clear(held)
			for c := e.over - 1; c != nilNode; c = ix.nodes[c].bnext {
				setBit(held, ix.nodes[c].slot)
			}
		}
		for k, a := range w.alive {
			if a == 0 {
				continue
			}
			gone := a &^ held[k]
			left -= bits.OnesCount64(gone)
			for ; gone != 0; gone &= gone - 1 {
				w.depth[k*64+bits.TrailingZeros64(gone)] = int32(i)
			}
			w.alive[k] = a & held[k]
		}
	}
	for k, a := range w.alive {
		for ; a != 0; a &= a - 1 {
			j := k*64 + bits.TrailingZeros64(a)
			w.depth[j] = int32(ix.follow(int32(64+j), blocks, salt, i, nil))
		}
		w.alive[k] = 0
	}
}
