package prefix

import (
	"math/rand/v2"
	"testing"
)

// TestBlockTableEqualsAMap: blocks added and dropped at random, many with
// the same 32-bit tag (told apart by their entry's block), many at the
// table's last slots (runs that wrap around), and enough to grow it, are
// found exactly as a Go map finds them.
func TestBlockTableEqualsAMap(t *testing.T) {
	inv := uint64(0x9E3779B97F4A7C15) // Newton: inv = inverse of the multiplier mod 2^64
	for range 6 {
		inv *= 2 - 0x9E3779B97F4A7C15*inv
	}
	withHash := func(h uint64) uint64 { return h * inv } // blockHash(withHash(h)) == h
	r := rand.New(rand.NewPCG(5, 6))
	key := func() uint64 {
		switch r.IntN(4) {
		case 0:
			return withHash(0xABCD1234<<32 | uint64(r.IntN(64))) // one tag
		case 1:
			return withHash(^uint64(0) - uint64(r.IntN(500))<<44) // the last slots
		default:
			return uint64(r.IntN(3000))
		}
	}
	ix := &Index{}
	ref := map[uint64]int32{}
	for step := range 200000 {
		b := key()
		ei, ok := ix.lookupBlock(b)
		want, has := ref[b]
		if ok != has || (ok && ei != want) {
			t.Fatalf("step %d: block %#x: entry %d %v, map %d %v", step, b, ei, ok, want, has)
		}
		switch {
		case !has && r.IntN(2) == 0:
			ei := ix.allocEntry()
			ix.ents[ei].block = b
			ix.addBlock(b, ei)
			ref[b] = ei
		case has && r.IntN(3) == 0:
			ix.dropBlock(b, ei)
			ix.ents[ei] = entry{over: ix.entFree}
			ix.entFree = ei + 1
			delete(ref, b)
		}
		if ix.blocks.n != len(ref) {
			t.Fatalf("step %d: %d blocks, map %d", step, ix.blocks.n, len(ref))
		}
	}
	for b, want := range ref {
		if ei, ok := ix.lookupBlock(b); !ok || ei != want {
			t.Fatalf("at the end: block %#x: entry %d %v, map %d", b, ei, ok, want)
		}
	}
}
