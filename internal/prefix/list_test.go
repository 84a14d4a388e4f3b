package prefix

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestKeptListSkipsExpiryOnlyWhenNothingExpired: one Index matched with
// the whole list of 150 replicas at once (the kept list, which skips the
// expiry pass while its lower bound of the tails is not below the cutoff)
// and a twin given the same inserts, matched one replica at a time (a
// short list: every candidate's tail checked), say the same at every step,
// while time runs past the TTL, idle replicas' blocks expire, replicas are
// forgotten and come back, and some inserts come with an earlier time (a
// forgotten replica's first insert then sets a tail older than any at the
// last pass). Not lowering the bound when a tail gets older fails it.
func TestKeptListSkipsExpiryOnlyWhenNothingExpired(t *testing.T) {
	cfg := Config{BlockChars: 4, CharsPerToken: 1, CapacityTokens: 4 * 20, TTL: 30}
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := New(cfg)
	rng := rand.New(rand.NewPCG(11, 12))
	const replicas = 150
	ids := make([]uint32, replicas)
	for i := range ids {
		ids[i] = uint32(i)
	}
	got, want := make([]int32, replicas), make([]int32, 1)
	now, skipped := int64(0), 0
	for step := range 3000 {
		p := make([]uint64, 1+rng.IntN(8))
		for i := range p {
			p[i] = uint64(rng.IntN(60))
		}
		id := uint32(rng.IntN(replicas))
		if step > 1000 {
			id = uint32(rng.IntN(replicas / 5)) // most replicas idle: their blocks expire
		}
		switch rng.IntN(30) {
		case 0:
			a.Forget(id)
			b.Forget(id)
		default:
			at := now
			if rng.IntN(4) == 0 {
				at -= int64(rng.IntN(40)) // another driver's earlier clock
			}
			a.Insert(id, p, at)
			b.Insert(id, p, at)
		}
		now += int64(rng.IntN(3))
		before := a.list.tailLow
		a.Match(p, now, ids, got)
		if a.list.valid && before >= now-cfg.TTL && before == a.list.tailLow {
			skipped++
		}
		for k, id := range ids {
			b.Match(p, now, []uint32{id}, want)
			if got[k] != want[0] {
				t.Fatalf("step %d: replica %d matched %d with the kept list, %d alone", step, id, got[k], want[0])
			}
		}
		if sa, sb := a.Stats(), b.Stats(); sa.Pairs != sb.Pairs || !slices.Equal(sa.PerReplica, sb.PerReplica) {
			t.Fatalf("step %d: %d pairs with the kept list, %d alone", step, sa.Pairs, sb.Pairs)
		}
	}
	if skipped < 100 {
		t.Fatalf("the expiry pass was skipped %d times: the test no longer exercises the bound", skipped)
	}
}

// TestNamedListIsTheComparedList: an Index matched with named lists (two
// lists of 120 replicas, numbered as a router numbers its replica sets,
// alternating, and now and then an unnamed one) and a twin matched with the
// same lists unnamed (compared with the kept one at every call) say the
// same at every step while replicas come and go (their slots move).
func TestNamedListIsTheComparedList(t *testing.T) {
	cfg := Config{BlockChars: 4, CharsPerToken: 1, CapacityTokens: 4 * 20, TTL: 50}
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := New(cfg)
	rng := rand.New(rand.NewPCG(5, 6))
	lists := [2][]uint32{make([]uint32, 120), make([]uint32, 120)}
	for i := range 120 {
		lists[0][i], lists[1][i] = uint32(i), uint32(i+30)
	}
	got, want := make([]int32, 120), make([]int32, 120)
	now, named := int64(0), 0
	for step := range 3000 {
		p := make([]uint64, 1+rng.IntN(8))
		for i := range p {
			p[i] = uint64(rng.IntN(40))
		}
		id := uint32(rng.IntN(150))
		if rng.IntN(25) == 0 {
			a.Forget(id)
			b.Forget(id)
		} else {
			a.Insert(id, p, now)
			b.Insert(id, p, now)
		}
		now += int64(rng.IntN(3))
		k := step / 7 % 2
		name := uint64(k + 1)
		if rng.IntN(10) == 0 {
			name = 0
		}
		if a.list.valid && name != 0 && a.list.name == name {
			named++
		}
		a.MatchListSalted(p, 0, now, lists[k], name, got)
		b.MatchSalted(p, 0, now, lists[k], want)
		if !slices.Equal(got, want) {
			t.Fatalf("step %d: list %d named %d matched %v, compared %v", step, k, name, got, want)
		}
	}
	if named < 1000 {
		t.Fatalf("the name spared the comparison %d times: the test no longer exercises it", named)
	}
}
