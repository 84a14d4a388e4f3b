package state

import (
	"fmt"
	"slices"
	"testing"

	"github.com/llm-ring/llm-ring/internal/policy"
	"github.com/llm-ring/llm-ring/internal/prefix"
)

// The engines keep each LoRA adapter's cache apart from the base model's and
// the other adapters' (vllm/v1/core/kv_cache_utils.py,
// _gen_lora_extra_hash_keys), so the routing state does too: an adapter's
// conversation key and blocks are salted (query.Salt).

// matchSpy is a policy that records each pick's rows' Match and picks row 0.
type matchSpy struct{ match *[]int }

func (matchSpy) Name() string { return "spy" }
func (s matchSpy) Pick(_ *policy.Request, v *policy.View, d *policy.Decision) {
	*s.match = (*s.match)[:0]
	for _, r := range v.Rows {
		*s.match = append(*s.match, r.Match)
	}
	*d = policy.Decision{Replica: 0, Reason: "spy"}
}

// prompt is a request of conversation key with blocks and adapter ("" the
// base model): 16 chars per block at 4 chars per token, 4 tokens a block.
func prompt(key, adapter string, blocks []uint64) Input {
	i := in(key, 16*len(blocks), 10)
	i.Blocks, i.Adapter = blocks, adapter
	return i
}

// spyTable is a prefix table over x, y, z whose picks go to x (row 0) and
// record the rows' Match.
func spyTable(t *testing.T) (*Table, *[]int) {
	tb := newPrefixTable(t)
	tb.SetReplicas(replicas("x", "y", "z"))
	var match []int
	tb.SetPolicy(matchSpy{&match})
	return tb, &match
}

func TestAdapterPrefixApart(t *testing.T) {
	tb, match := spyTable(t)
	blocks := []uint64{1, 2, 3, 4}
	orig := slices.Clone(blocks)
	expect := func(what string, in Input, want int) Ticket {
		t.Helper()
		tk, _, err := tb.Route(in, 0)
		if err != nil {
			t.Fatal(err)
		}
		if (*match)[0] != want || (*match)[1] != 0 || (*match)[2] != 0 {
			t.Fatalf("%s: matches %v, want [%d 0 0]", what, *match, want)
		}
		return tk
	}
	expect("adapter a, first", prompt("d1", "a", blocks), 0)
	expect("adapter b, a's prompt on x", prompt("d2", "b", blocks), 0)
	expect("adapter a again", prompt("d3", "a", blocks), 16)
	expect("base model, adapters' prompt on x", prompt("d4", "", blocks), 0)
	expect("base model again", prompt("d5", "", blocks), 16)
	// The correction re-inserts the prompt with its adapter's salt: x
	// answers a's turn reusing nothing, so all it held is forgotten and
	// only a's prompt (just processed) is believed held.
	tk := expect("adapter a, expecting its cache", prompt("d6", "a", blocks), 16)
	tb.Release(&tk, Outcome{OK: true, Known: true, PromptN: 16, PredictedN: 10}, 1)
	expect("adapter a after the loss", prompt("d7", "a", blocks), 16)
	expect("base model after the loss", prompt("d8", "", blocks), 0)
	if !slices.Equal(blocks, orig) {
		t.Fatalf("the caller's blocks changed: %v, were %v", blocks, orig)
	}
	if tk.salt != prefix.Salt("a") || tk.salt == 0 {
		t.Errorf("ticket salt %#x, want Salt(a) %#x", tk.salt, prefix.Salt("a"))
	}
}

// A conversation that moves from the base model to an adapter does not
// expect the base model's cache; each keeps its own placement.
func TestAdapterPlacementApart(t *testing.T) {
	tb := newTable(t, "llm-aware")
	tb.SetReplicas(replicas("x", "y", "z"))
	withA := func(i Input) Input { i.Adapter = "sql-lora"; return i }
	tk, _, _ := tb.Route(in("c", 40, 10), 0)
	tb.Release(&tk, answered(10, 10), 1)
	tk2, _, _ := tb.Route(in("c", 80, 10), 2)
	if tk2.CachedOn != tk.Replica.Name || tk2.ExpectCached != 20 {
		t.Fatalf("base turn 2: cached on %q expecting %d, want %s expecting 20", tk2.CachedOn, tk2.ExpectCached, tk.Replica.Name)
	}
	tb.Release(&tk2, answered(20, 10), 3)
	tk3, _, _ := tb.Route(withA(in("c", 120, 10)), 4)
	if tk3.CachedOn != "" || tk3.ExpectCached != 0 || tk3.Moved {
		t.Fatalf("adapter turn: cached on %q expecting %d (moved %v), want nothing known", tk3.CachedOn, tk3.ExpectCached, tk3.Moved)
	}
	tb.Release(&tk3, answered(30, 10), 5)
	tk4, _, _ := tb.Route(withA(in("c", 160, 10)), 6)
	if tk4.CachedOn != tk3.Replica.Name || tk4.ExpectCached != 40 {
		t.Fatalf("adapter turn 2: cached on %q expecting %d, want %s expecting 40", tk4.CachedOn, tk4.ExpectCached, tk3.Replica.Name)
	}
	tb.Release(&tk4, answered(40, 10), 7)
	tk5, _, _ := tb.Route(in("c", 200, 10), 8)
	if tk5.CachedOn != tk2.Replica.Name || tk5.ExpectCached != 30 {
		t.Fatalf("base turn 3: cached on %q expecting %d, want %s expecting 30 (its own turn 2)", tk5.CachedOn, tk5.ExpectCached, tk2.Replica.Name)
	}
}

// What one instance learns for an adapter reaches the others salted: the
// adapter's prompt and conversation are known there for the adapter only.
func TestPeersAdapterApart(t *testing.T) {
	a := newPrefixTable(t)
	b, match := spyTable(t)
	a.SetReplicas(replicas("x", "y", "z"))
	w := newWire(a, b)
	blocks := []uint64{1, 2, 3, 4}
	orig := slices.Clone(blocks)
	tk, _, _ := a.Route(prompt("doc", "a", blocks), 0)
	a.Release(&tk, answered(16, 10), 1)
	if !slices.Equal(blocks, orig) {
		t.Fatalf("the caller's blocks changed: %v, were %v", blocks, orig)
	}
	for _, tc := range []struct {
		adapter string
		want    int
		cached  string
	}{{"a", 26, tk.Replica.Name}, {"b", 0, ""}, {"", 0, ""}} { // 26: placement memory's 16 + 10
		// The same conversation's next turn (the prompt grew by a block).
		tb, _, _ := b.Route(prompt("doc", tc.adapter, append(slices.Clone(blocks), 5)), 2)
		if got := (*match)[tk.Index]; got != tc.want || tb.CachedOn != tc.cached {
			t.Errorf("adapter %q on B: %s matched %d, cached on %q; want %d, %q\nlog: %q",
				tc.adapter, tk.Replica.Name, got, tb.CachedOn, tc.want, tc.cached, w.log)
		}
	}
}

// Failover candidates look up with the request's salt, as Route does.
func TestAdapterCandidatesApart(t *testing.T) {
	tb, match := spyTable(t)
	blocks := []uint64{1, 2, 3, 4}
	tk, _, _ := tb.Route(prompt("d1", "a", blocks), 0)
	for _, tc := range []struct {
		adapter string
		want    int
	}{{"a", 16}, {"b", 0}, {"", 0}} {
		tb.Candidates(nil, prompt("d2", tc.adapter, blocks), &tk, 1, 1)
		if (*match)[0] != tc.want {
			t.Errorf("candidates for adapter %q: matches %v, want %d on x", tc.adapter, *match, tc.want)
		}
	}
}

// A pick for an adapter with the prefix index and peers allocates nothing
// (its salted blocks published from scratch space). The cache-lost
// correction is left out: forgetting a replica drops its map, which the
// re-insert makes again, whatever the adapter.
func TestRouteAllocsAdapterPrefix(t *testing.T) {
	tb := newPrefixTable(t)
	tb.SetReplicas(replicas("x", "y", "z"))
	tb.SetPeers(nopPeers{})
	inputs := []Input{prompt("c1", "a", []uint64{1, 2, 3}), prompt("c2", "b", []uint64{1, 2, 3, 4}),
		prompt("c3", "", []uint64{1, 2}), prompt("c4", "a", []uint64{1, 2, 3, 4, 5, 6})}
	var now int64
	step := func() { // every input each run: AllocsPerRun rounds down
		for _, in := range inputs {
			now++
			tk, _, err := tb.Route(in, now)
			if err != nil {
				t.Fatal(err)
			}
			tb.Release(&tk, Outcome{OK: true, Known: true, CacheN: 64, PromptN: 8, PredictedN: 10}, now)
		}
	}
	for range 100 {
		step()
	}
	if allocs := testing.AllocsPerRun(400, step); allocs != 0 {
		t.Errorf("%.1f allocations per route and release, want 0", allocs)
	}
}

// BenchmarkRoutePrefix: a pick and its release with the prefix index, for
// the base model (salt 0) and for four adapters (salted lookups, inserts
// and publications): 1,024 conversations of 32 blocks sharing a 16-block
// system prompt, routed by llm-aware with a connected peer set.
func BenchmarkRoutePrefix(b *testing.B) {
	for _, adapters := range []int{0, 4} {
		b.Run(fmt.Sprintf("adapters=%d", adapters), func(b *testing.B) {
			tb := newPrefixTable(b)
			names := make([]string, 64)
			for i := range names {
				names[i] = fmt.Sprintf("llm-%d", i)
			}
			tb.SetReplicas(replicas(names...))
			tb.SetPeers(nopPeers{})
			inputs := make([]Input, 1024)
			for i := range inputs {
				blocks := make([]uint64, 32)
				for j := range blocks {
					blocks[j] = uint64(j + 1)
					if j >= 16 {
						blocks[j] = uint64(i*100 + j)
					}
				}
				adapter := ""
				if adapters > 0 {
					adapter = fmt.Sprint("ad", i%adapters)
				}
				inputs[i] = prompt(fmt.Sprintf("conv-%d", i), adapter, blocks)
			}
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				tk, _, _ := tb.Route(inputs[i&1023], int64(i))
				tb.Release(&tk, Outcome{OK: true, Known: true, CacheN: 512, PromptN: 8, PredictedN: 128}, int64(i))
			}
		})
	}
}
