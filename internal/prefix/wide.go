package prefix

// Holders in slots >= 64. Each block's entry heads a chain (through the
// nodes' bprev/bnext) of its holders in those slots, so that a block
// held by few of them costs nothing but its links; a block that more than
// wideKeep of them hold also keeps a mask of them (one bit per slot >= 64),
// so that Match reads it in width words instead of walking a long chain (a
// system prompt that a thousand replicas hold). The mask is dropped again
// when its holders fall below wideDrop.
const (
	wideKeep = 64
	wideDrop = 32
)

// wideHolders are the masks of the blocks that keep one, and Match's
// scratch for the candidates in slots >= 64.
type wideHolders struct {
	width int      // words per mask: one bit per slot >= 64
	masks []uint64 // mask i is masks[i*width:(i+1)*width]
	free  []int32  // released masks
	alive []uint64 // Match: candidates still matching (a mask)
	tmp   []uint64 // Match: a block's holders built from its chain
	depth []int32  // Match: by slot-64, the leading blocks held
	any   bool     // Match: some candidate is in a slot >= 64
}

// begin readies the scratch for a Match over slots replicas' slots.
func (w *wideHolders) begin(slots int) *wideHolders {
	if need := (slots - 64 + 63) / 64; need > w.width {
		w.widen(need)
	}
	if n := slots - 64; n > len(w.depth) {
		w.depth = make([]int32, n)
	}
	w.any = false
	return w
}

// widen makes every mask at least words words wide (doubling): a
// membership change, not a request.
func (w *wideHolders) widen(words int) {
	nw := max(words, 2*w.width)
	n := 0
	if w.width > 0 {
		n = len(w.masks) / w.width
	}
	masks := make([]uint64, n*nw)
	for i := range n {
		copy(masks[i*nw:], w.masks[i*w.width:(i+1)*w.width])
	}
	w.masks, w.width = masks, nw
	w.alive, w.tmp = make([]uint64, nw), make([]uint64, nw)
}

func (w *wideHolders) mask(hi int32) []uint64 { return w.masks[int(hi-1)*w.width:][:w.width] }

func (w *wideHolders) bytes() int64 {
	return int64(cap(w.masks)+cap(w.alive)+cap(w.tmp))*8 + int64(cap(w.free)+cap(w.depth))*4
}

func setBit(m []uint64, s int32)   { m[(s-64)/64] |= 1 << uint((s-64)%64) }
func clearBit(m []uint64, s int32) { m[(s-64)/64] &^= 1 << uint((s-64)%64) }

// holdWide adds node n (its slot >= 64) to the holders of e.
func (ix *Index) holdWide(e *entry, n int32) {
	nd := &ix.nodes[n]
	nd.bprev, nd.bnext = nilNode, e.over-1
	if e.over != 0 {
		ix.nodes[e.over-1].bprev = n
	}
	e.over = n + 1
	e.nover++
	w := &ix.wide
	if need := (int(nd.slot) - 64 + 64) / 64; need > w.width {
		w.widen(need)
	}
	switch {
	case e.hi != 0:
		setBit(w.mask(e.hi), nd.slot)
	case e.nover > wideKeep:
		if k := len(w.free); k > 0 {
			e.hi = w.free[k-1] + 1
			w.free = w.free[:k-1]
		} else {
			w.masks = append(w.masks, make([]uint64, w.width)...)
			e.hi = int32(len(w.masks) / w.width)
		}
		m := w.mask(e.hi)
		clear(m)
		for c := e.over - 1; c != nilNode; c = ix.nodes[c].bnext {
			setBit(m, ix.nodes[c].slot)
		}
	}
}

// unholdWide removes node n (its slot >= 64) from the holders of e.
func (ix *Index) unholdWide(e *entry, n int32) {
	nd := &ix.nodes[n]
	if nd.bprev != nilNode {
		ix.nodes[nd.bprev].bnext = nd.bnext
	} else {
		e.over = nd.bnext + 1
	}
	if nd.bnext != nilNode {
		ix.nodes[nd.bnext].bprev = nd.bprev
	}
	nd.bprev, nd.bnext = nilNode, nilNode
	e.nover--
	if e.hi == 0 {
		return
	}
	if e.nover < wideDrop {
		ix.wide.free = append(ix.wide.free, e.hi-1)
		e.hi = 0
		return
	}
	clearBit(ix.wide.mask(e.hi), nd.slot)
}
