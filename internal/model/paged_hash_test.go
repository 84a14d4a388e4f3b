package model

import (
	"math/rand/v2"
	"testing"
)

// TestBlockIndexAsMap drives the block index and a Go map with the same
// random puts, gets and deletions (few distinct keys, so that probe runs
// collide and deletions shift them back, and the zero key among them).
func TestBlockIndexAsMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var ix blockIndex
	ref := map[uint64]int32{}
	keys := make([]uint64, 3000)
	for i := range keys {
		keys[i] = rng.Uint64()
	}
	keys[7] = 0
	for step := range 200_000 {
		h := keys[rng.IntN(len(keys))]
		if rng.IntN(100) == 0 { // collide on purpose: equal top bits after mixing are rare otherwise
			h = keys[0] + uint64(rng.IntN(4))<<60
		}
		want, ok := ref[h]
		got, gok := ix.get(h)
		if ok != gok || (ok && got != want) {
			t.Fatalf("step %d: get(%x) = %d, %v; want %d, %v", step, h, got, gok, want, ok)
		}
		switch {
		case ok && rng.IntN(2) == 0:
			ix.del(h)
			delete(ref, h)
		case !ok:
			b := int32(step)
			ix.put(h, b)
			ref[h] = b
		}
		if ix.len() != len(ref) {
			t.Fatalf("step %d: len %d, want %d", step, ix.len(), len(ref))
		}
	}
	for h, want := range ref {
		if got, ok := ix.get(h); !ok || got != want {
			t.Fatalf("get(%x) = %d, %v; want %d", h, got, ok, want)
		}
	}
}
