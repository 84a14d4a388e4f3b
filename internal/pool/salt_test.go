package pool

import (
	"testing"
	"time"

	"github.com/llm-ring/llm-ring/internal/policy"
	"github.com/llm-ring/llm-ring/internal/replicaset"
	"github.com/llm-ring/llm-ring/internal/ring"
	"github.com/llm-ring/llm-ring/internal/state"
)

// matchSpy records each pick's rows' Match and picks row 0.
type matchSpy struct{ match *[]int }

func (matchSpy) Name() string { return "spy" }
func (s matchSpy) Pick(_ *policy.Request, v *policy.View, d *policy.Decision) {
	*s.match = (*s.match)[:0]
	for _, r := range v.Rows {
		*s.match = append(*s.match, r.Match)
	}
	*d = policy.Decision{Replica: 0, Reason: "spy"}
}

// TestAdapterMemoryApart (issue 23's limit, fixed): the same conversation
// and prompt sent to the base model and then to one of its adapters, in
// the base model's pool. The engine keeps the adapter's cache apart, so the
// adapter's first turn expects nothing of the base model's (no placement,
// no prefix match); its second turn finds its own; the base model's keeps
// its own.
func TestAdapterMemoryApart(t *testing.T) {
	var match []int
	s, err := New(Config{}, func(string) (*state.Table, error) {
		return state.New(state.Config{VirtualNodes: 16, CharsPerToken: 4, MaxEntries: 100, TTL: time.Minute,
			AdapterAffinity: true, Prefix: state.PrefixConfig{BlockChars: 16, CapacityTokens: 10000, TTL: time.Minute}},
			matchSpy{&match}), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	s.SetReplicas([]replicaset.Replica{rep("a", "llama", "sql@llama"), rep("b", "llama", "sql@llama")})
	blocks := []uint64{7, 8} // "hello", say, and its system prompt
	turn := func(model string, now int64) (state.Ticket, []int) {
		t.Helper()
		rt, err := s.Resolve(model, 1)
		if err != nil || rt.Pool != s.Pool("llama") {
			t.Fatalf("Resolve(%s) = %+v, %v; want llama's pool", model, rt, err)
		}
		in := state.Input{Key: "k", Hash: ring.HashString("k"), Chars: 32, OutputTokens: 10, Blocks: blocks, Adapter: rt.Adapter}
		tk, _, err := rt.Pool.Table().Route(in, now)
		if err != nil || tk.Replica.Name != "a" {
			t.Fatalf("%s → %s, %v; want a", model, tk.Replica.Name, err)
		}
		seen := append([]int(nil), match...)
		rt.Pool.Table().Release(&tk, state.Outcome{OK: true, Known: true, CacheN: 8, PromptN: 0, PredictedN: 10}, now+1)
		return tk, seen
	}
	turn("llama", 0)
	for _, tc := range []struct {
		model  string
		cached string
		match  int
	}{
		{"sql", "", 0},     // not the base model's cache
		{"sql", "a", 18},   // its own: 8 prompt + 10 answer (placement memory)
		{"llama", "a", 18}, // the base model's own
	} {
		tk, seen := turn(tc.model, 10)
		if tk.CachedOn != tc.cached || seen[0] != tc.match || seen[1] != 0 {
			t.Errorf("%s: cached on %q, matches %v; want %q, [%d 0]", tc.model, tk.CachedOn, seen, tc.cached, tc.match)
		}
	}
}
