package prefix_test

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/llm-ring/llm-ring/internal/prefix"
)

// tiny is an Index whose blocks are 4 characters = 1 token, so capacity_tokens
// is the capacity in blocks; tests use small integers as block hashes.
func tiny(t *testing.T, capBlocks, ttl int64) *prefix.Index {
	t.Helper()
	ix, err := prefix.New(prefix.Config{BlockChars: 4, CharsPerToken: 4, CapacityTokens: capBlocks, TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	return ix
}

// match returns Match's result for replicas.
func match(ix *prefix.Index, blocks []uint64, now int64, replicas ...uint32) []int32 {
	out := make([]int32, len(replicas))
	ix.Match(blocks, now, replicas, out)
	return out
}

func TestConfigErrorsNameTheSetting(t *testing.T) {
	ok := prefix.Config{BlockChars: 256, CharsPerToken: 4, CapacityTokens: 60000, TTL: 120e9}
	for _, tc := range []struct {
		name string
		edit func(*prefix.Config)
		key  string
	}{
		{"no block", func(c *prefix.Config) { c.BlockChars = 0 }, "block_chars"},
		{"zero ratio", func(c *prefix.Config) { c.CharsPerToken = 0 }, "chars_per_token"},
		{"negative ratio", func(c *prefix.Config) { c.CharsPerToken = -1 }, "chars_per_token"},
		{"no capacity", func(c *prefix.Config) { c.CapacityTokens = 0 }, "capacity_tokens"},
		{"capacity below one block", func(c *prefix.Config) { c.CapacityTokens = 63 }, "capacity_tokens"},
		{"capacity beyond the limit", func(c *prefix.Config) { c.CapacityTokens = 1 << 40 }, "capacity_tokens"},
		{"negative ttl", func(c *prefix.Config) { c.TTL = -1 }, "ttl"},
	} {
		c := ok
		tc.edit(&c)
		_, err := prefix.New(c)
		if err == nil || !strings.HasPrefix(err.Error(), tc.key+":") {
			t.Errorf("%s: error %v, want one naming %s", tc.name, err, tc.key)
		}
	}
	if _, err := prefix.New(ok); err != nil {
		t.Errorf("valid config: %v", err)
	}
	if got := ok.CapacityBlocks(); got != 937 { // 60000 tokens / 64 tokens per block
		t.Errorf("CapacityBlocks %d, want 937", got)
	}
	if got := ok.Tokens(10); got != 640 {
		t.Errorf("Tokens(10) = %d, want 640", got)
	}
}

func TestMatchCountsLeadingBlocksOnly(t *testing.T) {
	ix := tiny(t, 100, 0)
	ix.Insert(0, []uint64{1, 2, 3}, 0)
	ix.Insert(1, []uint64{1, 2, 9}, 0)
	ix.Insert(2, []uint64{2, 3, 4}, 0) // holds blocks 2..4 but not block 1
	got := match(ix, []uint64{1, 2, 3, 4}, 0, 0, 1, 2, 7)
	want := []int32{
		3, // 1,2,3 held; 4 not
		2, // 1,2 held; 3 not
		0, // the first block is missing: nothing counts
		0, // unknown replica
	}
	if !slices.Equal(got, want) {
		t.Errorf("Match = %v, want %v", got, want)
	}
	if got := match(ix, nil, 0, 0, 1); !slices.Equal(got, []int32{0, 0}) {
		t.Errorf("empty prompt: %v", got)
	}
	// The same replica twice gets the same answer twice.
	if got := match(ix, []uint64{1, 2, 3}, 0, 0, 0); !slices.Equal(got, []int32{3, 3}) {
		t.Errorf("duplicate candidates: %v", got)
	}
}

func TestLRUEvictionAtCapacity(t *testing.T) {
	ix := tiny(t, 3, 0)
	ix.Insert(0, []uint64{1, 2, 3}, 0) // touched 3, 2, 1: 1 is the most recent
	ix.Insert(0, []uint64{4}, 1)       // full: evicts 3, the least recent
	if got := match(ix, []uint64{1, 2, 3}, 1, 0); got[0] != 2 {
		t.Errorf("after [4]: [1 2 3] matches %d, want 2 (3 evicted)", got[0])
	}
	ix.Insert(0, []uint64{1, 5}, 2) // 5 evicts 2 (least recent); 1 is touched
	for _, tc := range []struct {
		prompt []uint64
		want   int32
	}{
		{[]uint64{1, 5}, 2}, // both held
		{[]uint64{1, 2}, 1}, // 2 was evicted
		{[]uint64{4}, 1},    // 4 stays
	} {
		if got := match(ix, tc.prompt, 2, 0); got[0] != tc.want {
			t.Errorf("%v matches %d, want %d", tc.prompt, got[0], tc.want)
		}
	}
	if st := ix.Stats(); st.Pairs != 3 || st.PerReplica[0].Blocks != 3 {
		t.Errorf("Stats %+v, want 3 blocks held", st)
	}
}

func TestPromptLongerThanCapacityKeepsItsLeadingBlocks(t *testing.T) {
	ix := tiny(t, 3, 0)
	ix.Insert(0, []uint64{1, 2, 3, 4, 5}, 0)
	if got := match(ix, []uint64{1, 2, 3, 4, 5}, 0, 0); got[0] != 3 {
		t.Errorf("matches %d, want the 3 leading blocks", got[0])
	}
}

func TestTTL(t *testing.T) {
	fill := func() *prefix.Index {
		ix := tiny(t, 100, 10)
		ix.Insert(0, []uint64{1, 2}, 0)
		ix.Insert(0, []uint64{1}, 5) // touches 1 only
		ix.Insert(1, []uint64{1, 2}, 8)
		return ix
	}
	ix := fill()
	for _, tc := range []struct {
		now  int64
		want []int32 // replicas 0 and 1
	}{
		{10, []int32{2, 2}}, // 10 ns since block 2 was touched on 0: not longer than the TTL
		{11, []int32{1, 2}}, // block 2 expired on 0; 1 still fresh
		{16, []int32{0, 2}}, // block 1 expired on 0 too
		{19, []int32{0, 0}}, // and everything on 1
	} {
		if got := match(ix, []uint64{1, 2}, tc.now, 0, 1); !slices.Equal(got, tc.want) {
			t.Errorf("at %d: Match = %v, want %v", tc.now, got, tc.want)
		}
	}
	// Expire frees the memory of blocks nobody looks up.
	ix = fill()
	for _, tc := range []struct {
		now     int64
		dropped int
		pairs   int
	}{
		{10, 0, 4},  // nothing older than the TTL yet
		{11, 1, 3},  // block 2 on replica 0
		{16, 1, 2},  // block 1 on replica 0
		{100, 2, 0}, // replica 1's blocks
	} {
		if n := ix.Expire(tc.now); n != tc.dropped {
			t.Errorf("Expire(%d) dropped %d, want %d", tc.now, n, tc.dropped)
		}
		if st := ix.Stats(); st.Pairs != tc.pairs || st.Blocks != min(tc.pairs, 2) {
			t.Errorf("after Expire(%d): %+v, want %d pairs", tc.now, st, tc.pairs)
		}
	}
}

func TestTTLZeroKeepsBlocks(t *testing.T) {
	ix := tiny(t, 100, 0)
	ix.Insert(0, []uint64{1, 2}, 0)
	if n := ix.Expire(1 << 62); n != 0 {
		t.Errorf("Expire without TTL dropped %d", n)
	}
	if got := match(ix, []uint64{1, 2}, 1<<62, 0); got[0] != 2 {
		t.Errorf("Match = %d, want 2", got[0])
	}
}

func TestEvictFromAPosition(t *testing.T) {
	prompt := []uint64{1, 2, 3, 4}
	for _, tc := range []struct {
		from int
		want int32
	}{
		{2, 2},  // drops 3 and 4
		{0, 0},  // drops everything
		{-5, 0}, // before the start: from 0
		{4, 4},  // at the end: nothing
		{99, 4}, // beyond the end: nothing
	} {
		ix := tiny(t, 100, 0)
		ix.Insert(0, prompt, 0)
		ix.Insert(1, prompt, 0)
		ix.Evict(0, prompt, tc.from)
		if got := match(ix, prompt, 0, 0, 1); !slices.Equal(got, []int32{tc.want, 4}) {
			t.Errorf("Evict from %d: Match = %v, want [%d 4]", tc.from, got, tc.want)
		}
	}
	ix := tiny(t, 100, 0)
	ix.Evict(3, prompt, 0) // unknown replica: nothing happens
	if st := ix.Stats(); st.Replicas != 0 {
		t.Errorf("Evict created a replica: %+v", st)
	}
}

func TestForget(t *testing.T) {
	ix := tiny(t, 100, 0)
	ix.Insert(0, []uint64{1, 2}, 0)
	ix.Insert(1, []uint64{1, 2, 3}, 0)
	ix.Forget(0)
	ix.Forget(42) // unknown: nothing happens
	if got := match(ix, []uint64{1, 2, 3}, 0, 0, 1); !slices.Equal(got, []int32{0, 3}) {
		t.Errorf("Match = %v, want [0 3]", got)
	}
	st := ix.Stats()
	if st.Replicas != 1 || st.Pairs != 3 || st.Blocks != 3 || st.PerReplica[0].Replica != 1 {
		t.Errorf("Stats %+v, want replica 1 with 3 blocks", st)
	}
	// A new replica reuses the slot and starts empty.
	ix.Insert(5, []uint64{1}, 0)
	if got := match(ix, []uint64{1, 2}, 0, 0, 5); !slices.Equal(got, []int32{0, 1}) {
		t.Errorf("after reuse: Match = %v, want [0 1]", got)
	}
}

// ---- property test: the Index equals a naive reference ----

// refEntry is a block on a replica in the reference.
type refEntry struct {
	block   uint64
	touched int64
}

// reference is the obvious implementation: per replica, its blocks in
// recency order (most recent first).
type reference struct {
	cap, ttl int64
	reps     map[uint32][]refEntry
}

func (r *reference) expired(e refEntry, now int64) bool { return r.ttl > 0 && e.touched < now-r.ttl }

func (r *reference) insert(id uint32, blocks []uint64, now int64) {
	if len(blocks) == 0 {
		return
	}
	list := slices.DeleteFunc(r.reps[id], func(e refEntry) bool { return r.expired(e, now) })
	for i := len(blocks) - 1; i >= 0; i-- {
		list = slices.DeleteFunc(list, func(e refEntry) bool { return e.block == blocks[i] })
		list = slices.Insert(list, 0, refEntry{blocks[i], now})
		if int64(len(list)) > r.cap {
			list = list[:r.cap]
		}
	}
	r.reps[id] = list
}

func (r *reference) match(blocks []uint64, now int64, id uint32) int32 {
	if list, ok := r.reps[id]; ok && len(blocks) > 0 {
		// Like the Index, Match drops a candidate's expired blocks.
		r.reps[id] = slices.DeleteFunc(list, func(e refEntry) bool { return r.expired(e, now) })
	}
	for i, b := range blocks {
		k := slices.IndexFunc(r.reps[id], func(e refEntry) bool { return e.block == b })
		if k < 0 || r.expired(r.reps[id][k], now) {
			return int32(i)
		}
	}
	return int32(len(blocks))
}

func (r *reference) evict(id uint32, blocks []uint64, from int) {
	drop := blocks[min(max(from, 0), len(blocks)):]
	if list, ok := r.reps[id]; ok {
		r.reps[id] = slices.DeleteFunc(list, func(e refEntry) bool { return slices.Contains(drop, e.block) })
	}
}

func (r *reference) expire(now int64) int {
	n := 0
	for id, list := range r.reps {
		before := len(list)
		r.reps[id] = slices.DeleteFunc(list, func(e refEntry) bool { return r.expired(e, now) })
		n += before - len(r.reps[id])
	}
	return n
}

func (r *reference) stats() (pairs, blocks int, per []prefix.ReplicaStats) {
	distinct := map[uint64]bool{}
	for id, list := range r.reps {
		pairs += len(list)
		for _, e := range list {
			distinct[e.block] = true
		}
		per = append(per, prefix.ReplicaStats{Replica: id, Blocks: len(list)})
	}
	slices.SortFunc(per, func(a, b prefix.ReplicaStats) int { return int(a.Replica) - int(b.Replica) })
	return pairs, len(distinct), per
}

// randomPrompt draws a prompt from a small tree of chained blocks, so that
// prompts share prefixes often.
func randomPrompt(r *rand.Rand) []uint64 {
	n := r.IntN(12)
	p := make([]uint64, n)
	h := uint64(1)
	for i := range p {
		h = h*31 + uint64(r.IntN(3)) + 1
		p[i] = h
	}
	return p
}

func TestIndexEqualsANaiveReference(t *testing.T) {
	for _, tc := range []struct {
		name     string
		replicas []uint32 // the ids in play
		cap, ttl int64
	}{
		// Few sparse ids, all in the bitset, eviction and TTL both busy.
		{"sparse ids", []uint32{0, 3, 17, 63, 64, 900, 3000}, 8, 60},
		// More replicas than bitset slots: ids beyond slot 63 take the map path.
		{"over 64 replicas", seq(90), 6, 40},
		// No TTL.
		{"no ttl", []uint32{1, 2, 5, 8}, 5, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(2026, 9))
			ix := tiny(t, tc.cap, tc.ttl)
			ref := &reference{cap: tc.cap, ttl: tc.ttl, reps: map[uint32][]refEntry{}}
			candidates := append(slices.Clone(tc.replicas), 4242) // one never seen
			out := make([]int32, len(candidates))
			now := int64(0)
			for step := range 20000 {
				now += int64(r.IntN(6))
				id := tc.replicas[r.IntN(len(tc.replicas))]
				switch op := r.IntN(100); {
				case op < 55:
					p := randomPrompt(r)
					ix.Insert(id, p, now)
					ref.insert(id, p, now)
				case op < 70:
					p := randomPrompt(r)
					from := r.IntN(len(p)+2) - 1
					ix.Evict(id, p, from)
					ref.evict(id, p, from)
				case op < 73:
					ix.Forget(id)
					delete(ref.reps, id)
				case op < 80:
					if got, want := ix.Expire(now), ref.expire(now); got != want {
						t.Fatalf("step %d: Expire dropped %d, reference %d", step, got, want)
					}
				}
				p := randomPrompt(r)
				ix.Match(p, now, candidates, out)
				for k, c := range candidates {
					if want := ref.match(p, now, c); out[k] != want {
						t.Fatalf("step %d: replica %d matches %d of %v, reference %d", step, c, out[k], p, want)
					}
				}
				if step%500 == 0 {
					st := ix.Stats()
					pairs, blocks, per := ref.stats()
					if st.Pairs != pairs || st.Blocks != blocks || !equalPer(st.PerReplica, per) {
						t.Fatalf("step %d: Stats %d pairs %d blocks %v; reference %d %d %v",
							step, st.Pairs, st.Blocks, st.PerReplica, pairs, blocks, per)
					}
				}
			}
		})
	}
}

// equalPer compares per-replica counts, ignoring replicas that hold nothing
// (the reference keeps an empty list after evictions, the Index a replica
// with no blocks; both mean the same).
func equalPer(a, b []prefix.ReplicaStats) bool {
	nonEmpty := func(s []prefix.ReplicaStats) []prefix.ReplicaStats {
		return slices.DeleteFunc(slices.Clone(s), func(x prefix.ReplicaStats) bool { return x.Blocks == 0 })
	}
	return slices.Equal(nonEmpty(a), nonEmpty(b))
}

func seq(n int) []uint32 {
	s := make([]uint32, n)
	for i := range s {
		s[i] = uint32(i)
	}
	return s
}

func TestMatchAndInsertAllocateNothing(t *testing.T) {
	ix, err := prefix.New(prefix.Config{BlockChars: 64, CharsPerToken: 4, CapacityTokens: 2000, TTL: 1000})
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 1))
	prompts := make([][]uint64, 64)
	for i := range prompts {
		h := prefix.NewHasher(64)
		h.WriteString(randomText(r, 8000))
		prompts[i] = slices.Clone(h.Blocks())
	}
	replicas := seq(70) // 64 in the bitset, 6 through their maps
	for i, id := range replicas {
		ix.Insert(id, prompts[i%len(prompts)], 0)
	}
	out := make([]int32, len(replicas))
	if a := testing.AllocsPerRun(100, func() { ix.Match(prompts[3], 1, replicas, out) }); a != 0 {
		t.Errorf("Match: %v allocations, want 0", a)
	}
	// Steady state: replicas full, new prompts evict old blocks.
	k := 0
	insert := func() {
		ix.Insert(replicas[k%len(replicas)], prompts[k%len(prompts)], int64(k))
		k++
	}
	for range 5000 {
		insert()
	}
	if a := testing.AllocsPerRun(1000, insert); a != 0 {
		t.Errorf("Insert: %v allocations, want 0", a)
	}
}

// TestMatchInsertIsMatchThenInsert: MatchInsertSalted says what
// MatchSalted of the one replica says just before it, and leaves the index
// as InsertSalted does, also when a replica's time goes back.
func TestMatchInsertIsMatchThenInsert(t *testing.T) {
	a, b := tiny(t, 6, 30), tiny(t, 6, 30)
	r := rand.New(rand.NewPCG(21, 4))
	ids := []uint32{0, 1, 2, 70}
	now := int64(0)
	for step := range 5000 {
		now += int64(r.IntN(8)) - 2 // now and then back in time
		id := ids[r.IntN(len(ids))]
		p, salt := randomPrompt(r), uint64(r.IntN(2))
		var one [1]int32
		a.MatchSalted(p, salt, now, []uint32{id}, one[:])
		a.InsertSalted(id, p, salt, now)
		if got := b.MatchInsertSalted(id, p, salt, now); got != one[0] {
			t.Fatalf("step %d: MatchInsertSalted %d, Match then Insert %d", step, got, one[0])
		}
		q := randomPrompt(r)
		if x, y := match(a, q, now, ids...), match(b, q, now, ids...); !slices.Equal(x, y) {
			t.Fatalf("step %d: the indexes differ after it: %v, %v", step, x, y)
		}
	}
}
