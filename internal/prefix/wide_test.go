package prefix

import (
	"math/rand/v2"
	"testing"
)

// reference is what Match must say for one replica: its leading blocks
// found in its own map (the per-replica walk Match did before wide.go).
func (ix *Index) reference(id uint32, blocks []uint64) int32 {
	s := ix.slot(id)
	if s < 0 {
		return 0
	}
	for i, b := range blocks {
		if _, ok := ix.reps[s].where[b]; !ok {
			return int32(i)
		}
	}
	return int32(len(blocks))
}

// TestWideMatchesReference: with hundreds of replicas (most in slots >= 64,
// blocks held by few and by many, masks kept and dropped), Match agrees
// with each replica's own map after every kind of change.
func TestWideMatchesReference(t *testing.T) {
	ix, err := New(Config{BlockChars: 4, CharsPerToken: 1, CapacityTokens: 4 * 40, TTL: 50})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	const replicas = 300
	prompt := func() []uint64 {
		p := make([]uint64, 1+rng.IntN(12))
		shared := rng.IntN(3) // a shared "system prompt" of a few blocks, or none
		for i := range p {
			if i < 4 && shared > 0 {
				p[i] = uint64(shared*100 + i)
			} else {
				p[i] = uint64(1000 + rng.IntN(400))
			}
		}
		return p
	}
	ids := make([]uint32, replicas)
	for i := range ids {
		ids[i] = uint32(i)
	}
	out := make([]int32, replicas)
	masks := 0
	for step := range 20000 {
		masks = max(masks, len(ix.wide.masks))
		now := int64(step / 10)
		switch op := rng.IntN(100); {
		case op < 80:
			ix.Insert(uint32(rng.IntN(replicas)), prompt(), now)
		case op < 85:
			p := prompt()
			ix.Evict(uint32(rng.IntN(replicas)), p, rng.IntN(len(p)))
		case op < 87:
			ix.Forget(uint32(rng.IntN(replicas)))
		case op < 88:
			ix.Expire(now)
		default:
			p := prompt()
			sub := ids[rng.IntN(replicas):]
			ix.Match(p, now, sub, out)
			for k, id := range sub {
				if want := ix.reference(id, p); out[k] != want {
					t.Fatalf("step %d: replica %d holds %d leading blocks of %v, Match says %d", step, id, want, p, out[k])
				}
			}
		}
	}
	if ix.wide.width == 0 || masks == 0 {
		t.Fatalf("width %d, %d mask words at most: the test does not test wide.go", ix.wide.width, masks)
	}
}
