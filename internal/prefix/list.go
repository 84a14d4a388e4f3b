package prefix

import (
	"math"
	"slices"
)

// listMin is the candidate count from which Match keeps the candidate list
// it was passed (a router passes the same list of all its replicas at
// every pick): below it, looking each candidate's slot up costs less than
// comparing the list with the kept one.
const listMin = 64

// candList is the last long candidate list Match was passed, with what
// Match derives from it: each candidate's slot and the bitsets of the
// candidates' slots. Comparing a list with it reads two dense arrays; the
// slot lookups it saves are one random read each. It follows the slots:
// a replica that gets or gives up a slot updates it (addSlot, Forget), so
// that a correction (Forget, then Insert) does not rebuild it.
type candList struct {
	ids     []uint32 // the list, copied
	slots   []int32  // by candidate: its slot, -1 if it has none
	pos     []int32  // by replica id: its candidate index + 1, 0 if none
	fast    uint64   // candidates in slots 0..63
	wide    []uint64 // candidates in slots >= 64, a wideHolders mask
	anyWide bool
	valid   bool   // built, and kept in step with the slots
	name    uint64 // the caller's name for the list (MatchListSalted), 0: none
	// tailLow is at most the tail time (Index.tailAt) of every slot in
	// the list: where it is not below a Match's cutoff, no candidate has
	// an expired block, and Match skips the pass over them. syncTail,
	// the only writer of a tail time other than emptying (which raises
	// it), lowers it.
	tailLow int64
}

// listFor returns the candidate list for replicas, rebuilt unless it is
// the kept one: the one kept under the same nonzero name (the caller's
// promise that it is the same list), or equal to it.
func (ix *Index) listFor(replicas []uint32, name uint64) *candList {
	l := &ix.list
	if l.valid && (name != 0 && name == l.name || slices.Equal(l.ids, replicas)) {
		l.name = name
		return l
	}
	l.name = name
	for _, id := range l.ids {
		if int(id) < len(l.pos) {
			l.pos[id] = 0
		}
	}
	l.ids = append(l.ids[:0], replicas...)
	l.slots = l.slots[:0]
	l.fast, l.anyWide, l.valid = 0, false, true
	l.tailLow = math.MinInt64 // unknown: the next Match passes over the candidates
	if len(l.wide) < ix.wide.width {
		l.wide = make([]uint64, ix.wide.width)
	}
	clear(l.wide)
	for k, id := range replicas {
		if int(id) >= len(l.pos) {
			l.pos = append(l.pos, make([]int32, int(id)+1-len(l.pos))...)
		}
		if l.pos[id] != 0 {
			l.valid = false // a replica listed twice: not kept in step, rebuilt at the next change
		}
		l.pos[id] = int32(k) + 1
		s := ix.slot(id)
		l.slots = append(l.slots, s)
		l.set(s)
	}
	return l
}

// set adds slot s (if any) to the list's bitsets.
func (l *candList) set(s int32) {
	switch {
	case s < 0:
	case s < 64:
		l.fast |= 1 << uint(s)
	default:
		setBit(l.wide, s)
		l.anyWide = true
	}
}

// moved records that replica id now has slot s (-1: none): called when a
// replica gets a slot or gives it up.
func (ix *Index) moved(id uint32, s int32) {
	l := &ix.list
	if !l.valid || int(id) >= len(l.pos) || l.pos[id] == 0 {
		return
	}
	k := l.pos[id] - 1
	if old := l.slots[k]; old >= 0 {
		if old < 64 {
			l.fast &^= 1 << uint(old)
		} else {
			clearBit(l.wide, old)
		}
	}
	if s >= 64 && int(s-64)/64 >= len(l.wide) {
		l.valid = false // beyond the list's mask: rebuilt at the next Match
		return
	}
	l.slots[k] = s
	l.set(s)
}
