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

// TestPairsFollowTheLists: inserts, evictions, expiry and forgotten
// replicas at random over a few hundred replicas sharing blocks (one block
// held by many slots, told apart by the node's slot); after each, every
// node of every replica's LRU list is found in the pairs table as that
// replica's node of its block, the table holds exactly the nodes in use,
// and blocks a replica does not hold are not found for it.
func TestPairsFollowTheLists(t *testing.T) {
	ix, err := New(Config{BlockChars: 4, CharsPerToken: 1, CapacityTokens: 4 * 30, TTL: 40})
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(7, 8))
	const replicas = 200
	now := int64(0)
	for step := range 4000 {
		id := uint32(r.IntN(replicas))
		p := make([]uint64, 1+r.IntN(10))
		for i := range p {
			p[i] = uint64(r.IntN(300))
		}
		switch k := r.IntN(20); {
		case k == 0:
			ix.Forget(id)
		case k < 3:
			ix.Evict(id, p, r.IntN(len(p)))
		default:
			ix.Insert(id, p, now)
		}
		now += int64(r.IntN(3))
		if step%10 == 0 {
			checkPairs(t, ix, step, r)
		}
	}
	checkPairs(t, ix, 4000, r)
}

func checkPairs(t *testing.T, ix *Index, step int, r *rand.Rand) {
	t.Helper()
	if ix.pairs.n != ix.used {
		t.Fatalf("step %d: the pairs table holds %d, %d nodes in use", step, ix.pairs.n, ix.used)
	}
	for s := range ix.reps {
		held := map[uint64]bool{}
		for n := ix.reps[s].head; n != nilNode; n = ix.nodes[n].next {
			b := ix.nodes[n].block
			held[b] = true
			if got, ok := ix.lookupNode(int32(s), b); !ok || got != n {
				t.Fatalf("step %d: slot %d, block %d: node %d %v, its list has node %d", step, s, b, got, ok, n)
			}
		}
		for range 5 {
			if b := uint64(r.IntN(300)); !held[b] {
				if n, ok := ix.lookupNode(int32(s), b); ok {
					t.Fatalf("step %d: slot %d does not hold block %d, found as node %d", step, s, b, n)
				}
			}
		}
	}
}
