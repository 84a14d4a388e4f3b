package prefix

import (
	"math/rand/v2"
	"testing"
)

// reference is what Match must say for one replica: its leading blocks
// found among the blocks of its own LRU list (read whole, without the
// pairs table or the blocks' holders).
func (ix *Index) reference(id uint32, blocks []uint64) int32 {
	s := ix.slot(id)
	if s < 0 {
		return 0
	}
	held := map[uint64]bool{}
	for n := ix.reps[s].head; n != nilNode; n = ix.nodes[n].next {
		held[ix.nodes[n].block] = true
	}
	for i, b := range blocks {
		if !held[b] {
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

// TestKeptListFollowsSlots: Match passed the same long list at every call
// (as a router passes all its replicas) keeps it (list.go); replicas that
// are forgotten, come back in another slot, are new or listed twice must
// still match as their own maps say.
func TestKeptListFollowsSlots(t *testing.T) {
	ix, err := New(Config{BlockChars: 4, CharsPerToken: 1, CapacityTokens: 4 * 30, TTL: 40})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	const replicas = 200
	ids := make([]uint32, replicas)
	for i := range ids {
		ids[i] = uint32(2 * i) // every other id: some never get a slot
	}
	dup := append(append([]uint32{}, ids[:100]...), ids[:100]...)
	out := make([]int32, len(dup))
	prompt := func() []uint64 {
		p := make([]uint64, 1+rng.IntN(10))
		for i := range p {
			p[i] = uint64(i*10 + rng.IntN(3))
		}
		return p
	}
	for step := range 20000 {
		now := int64(step / 10)
		id := uint32(rng.IntN(2 * replicas))
		switch op := rng.IntN(100); {
		case op < 60:
			ix.Insert(id, prompt(), now)
		case op < 70:
			ix.Forget(id)
		case op < 72:
			ix.Forget(id)
			ix.Insert(uint32(rng.IntN(2*replicas)), prompt(), now) // takes the freed slot
		}
		list := ids
		if step%97 == 0 {
			list = dup
		}
		p := prompt()
		ix.Match(p, now, list, out)
		for k, id := range list {
			if want := ix.reference(id, p); out[k] != want {
				t.Fatalf("step %d: replica %d holds %d leading blocks of %v, Match says %d", step, id, want, p, out[k])
			}
		}
	}
}
