package prefix_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/llm-ring/llm-ring/internal/prefix"
)

func TestSalt(t *testing.T) {
	if s := prefix.Salt(""); s != 0 {
		t.Errorf(`Salt("") = %#x, want 0 (the base model's keys unchanged)`, s)
	}
	seen := map[uint64]string{}
	for _, name := range []string{"sql-lora", "chat-lora", "a", "b", "A", "sql-lora "} {
		s := prefix.Salt(name)
		if s == 0 {
			t.Errorf("Salt(%q) = 0, the base model's salt", name)
		}
		if other, dup := seen[s]; dup {
			t.Errorf("Salt(%q) = Salt(%q)", name, other)
		}
		seen[s] = name
		if prefix.Salt(name) != s {
			t.Errorf("Salt(%q) is not deterministic", name)
		}
	}
}

// saltedMatch returns MatchSalted's result for replicas.
func saltedMatch(ix *prefix.Index, blocks []uint64, salt uint64, replicas ...uint32) []int32 {
	out := make([]int32, len(replicas))
	ix.MatchSalted(blocks, salt, 0, replicas, out)
	return out
}

// TestSaltKeepsAdaptersApart: blocks inserted for one adapter match only
// that adapter's requests, not another adapter's nor the base model's, and
// the base model's blocks match no adapter; the caller's slice is left as
// it was. Replicas in the bitset (slot 0) and beyond it (slot 69) alike.
func TestSaltKeepsAdaptersApart(t *testing.T) {
	a, b := prefix.Salt("sql-lora"), prefix.Salt("chat-lora")
	prompt := []uint64{11, 12, 13, 14}
	orig := slices.Clone(prompt)
	ix := tiny(t, 100, 0)
	for id := range uint32(70) {
		ix.Insert(id, []uint64{1000 + uint64(id)}, 0) // fill slots 0..69
	}
	const lo, hi = 0, 69
	for _, id := range []uint32{lo, hi} {
		ix.InsertSalted(id, prompt, a, 0)
	}
	if !slices.Equal(prompt, orig) {
		t.Fatalf("InsertSalted changed the caller's blocks: %v, was %v", prompt, orig)
	}
	for _, tc := range []struct {
		name string
		salt uint64
		want int32
	}{{"same adapter", a, 4}, {"other adapter", b, 0}, {"base model", 0, 0}} {
		got := saltedMatch(ix, prompt, tc.salt, lo, hi)
		if got[0] != tc.want || got[1] != tc.want {
			t.Errorf("%s: matched %v, want %d on both", tc.name, got, tc.want)
		}
	}
	if got := match(ix, prompt, 0, lo, hi); got[0] != 0 || got[1] != 0 {
		t.Errorf("Match (base model): %v, want no match", got)
	}
	if !slices.Equal(prompt, orig) {
		t.Fatalf("MatchSalted changed the caller's blocks: %v, was %v", prompt, orig)
	}
	// The base model's blocks serve no adapter.
	ix.Insert(lo, []uint64{21, 22}, 0)
	if got := saltedMatch(ix, []uint64{21, 22}, a, lo); got[0] != 0 {
		t.Errorf("adapter on the base model's blocks: matched %d, want 0", got[0])
	}
	if got := match(ix, []uint64{21, 22}, 0, lo); got[0] != 2 {
		t.Errorf("base model on its blocks: matched %d, want 2", got[0])
	}
	// Evicting with the wrong salt drops nothing; with the right one, the tail.
	ix.EvictSalted(lo, prompt, b, 2)
	ix.Evict(lo, prompt, 2)
	if got := saltedMatch(ix, prompt, a, lo); got[0] != 4 {
		t.Errorf("after evicting other keys: matched %d, want 4", got[0])
	}
	ix.EvictSalted(lo, prompt, a, 2)
	if got := saltedMatch(ix, prompt, a, lo, hi); got[0] != 2 || got[1] != 4 {
		t.Errorf("after EvictSalted(lo, from 2): matched %v, want [2 4]", got)
	}
}

func TestMatchSaltedAllocs(t *testing.T) {
	ix := tiny(t, 1000, 0)
	salt := prefix.Salt("sql-lora")
	prompt := []uint64{1, 2, 3, 4, 5, 6, 7, 8}
	replicas := seq(70)
	for _, id := range replicas {
		ix.InsertSalted(id, prompt, salt, 0)
	}
	out := make([]int32, len(replicas))
	if a := testing.AllocsPerRun(100, func() { ix.MatchSalted(prompt, salt, 1, replicas, out) }); a != 0 {
		t.Errorf("MatchSalted: %v allocations, want 0", a)
	}
	if out[0] != 8 || out[69] != 8 {
		t.Errorf("matched %d and %d, want 8", out[0], out[69])
	}
	if a := testing.AllocsPerRun(100, func() { ix.InsertSalted(3, prompt, salt, 2) }); a != 0 {
		t.Errorf("InsertSalted (touch): %v allocations, want 0", a)
	}
}

var sinkSalt uint64

// BenchmarkSalt: what an adapter's request adds to a pick before its
// lookups (each salted lookup then adds one xor per block).
func BenchmarkSalt(b *testing.B) {
	names := []string{"", "sql-lora", "a-longer-adapter-name-of-40-characters-x"}
	for _, n := range names {
		b.Run("len="+fmt.Sprint(len(n)), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				sinkSalt ^= prefix.Salt(n)
			}
		})
	}
}
