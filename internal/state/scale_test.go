package state

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/llm-ring/llm-ring/internal/policy"
	"github.com/llm-ring/llm-ring/internal/prefix"
)

// scaleTable is a prefix table over n replicas routed by pol (a policy
// that reads Match), with inputs as the simulator's scale profile sends
// them: 4 system prompts of 24 blocks that every replica ends up holding,
// then each conversation's own blocks.
func scaleTable(tb testing.TB, pol string, n int) (*Table, []Input) {
	p, err := policy.New(pol, nil)
	if err != nil {
		tb.Fatal(err)
	}
	t := New(Config{VirtualNodes: 64, CharsPerToken: 4, MaxEntries: 100_000, TTL: time.Hour,
		Prefix: PrefixConfig{BlockChars: 64, CapacityTokens: 16_000, TTL: time.Hour}}, p)
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("llm-%04d", i)
	}
	t.SetReplicas(replicas(names...))
	inputs := make([]Input, 4096)
	for i := range inputs {
		blocks := make([]uint64, 40+i%32)
		for j := range blocks {
			blocks[j] = uint64(i%4*1000 + j + 1)
			if j >= 24 {
				blocks[j] = uint64(i*1000+j) << 8
			}
		}
		inputs[i] = prompt(fmt.Sprintf("conv-%d", i), "", blocks)
	}
	return t, inputs
}

// BenchmarkRouteScale: a pick and its release on 1,000 replicas, the
// simulator's scale run in miniature (every replica holds the system
// prompts; a turn's own blocks are on the replica it was routed to).
func BenchmarkRouteScale(b *testing.B) {
	for _, pol := range []string{"cache-aware", "scored"} {
		b.Run(pol, func(b *testing.B) {
			tb, inputs := scaleTable(b, pol, 1000)
			for i := range 4 * len(inputs) { // warm: every replica gets the system prompts
				tk, _, _ := tb.Route(inputs[i%len(inputs)], int64(i))
				tb.Release(&tk, Outcome{OK: true, Known: true, CacheN: 384, PromptN: 64, PredictedN: 128}, int64(i))
			}
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				tk, _, _ := tb.Route(inputs[i%len(inputs)], int64(i))
				tb.Release(&tk, Outcome{OK: true, Known: true, CacheN: 384, PromptN: 64, PredictedN: 128}, int64(i))
			}
		})
	}
}

// TestRaiseEachIsRaise: raiseEach (one pass, tokens from a table) leaves
// the rows as the per-row raise of the old lookup did (cfg.Tokens of each
// nonzero depth, over what placement memory raised first), and clear then
// leaves every Match at 0, the touched rows included.
func TestRaiseEachIsRaise(t *testing.T) {
	p := &prefixIndexer{cfg: prefixCfg(64, 3.7)}
	rng := rand.New(rand.NewPCG(3, 4))
	for step := range 500 {
		n := 1 + rng.IntN(300)
		a := matches{rows: make([]policy.Row, n), index: make([]int32, n)}
		b := matches{rows: make([]policy.Row, n), index: make([]int32, n)}
		for i := range a.index {
			a.index[i], b.index[i] = int32(i), int32(i)
		}
		for range rng.IntN(3) { // placement memory's raises
			id, tok := uint32(rng.IntN(n)), rng.IntN(400)
			a.raiseID(id, tok)
			b.raiseID(id, tok)
		}
		blocks := rng.IntN(40)
		depth := make([]int32, n)
		for i := range depth {
			if blocks > 0 && rng.IntN(3) > 0 {
				depth[i] = int32(rng.IntN(blocks + 1))
			}
		}
		a.raiseEach(depth, p.tokens(blocks))
		for i, d := range depth { // the old lookup
			if d > 0 {
				b.raise(i, int(p.cfg.Tokens(d)))
			}
		}
		for i := range a.rows {
			if a.rows[i].Match != b.rows[i].Match {
				t.Fatalf("step %d: row %d: Match %d, want %d", step, i, a.rows[i].Match, b.rows[i].Match)
			}
		}
		a.clear()
		for i := range a.rows {
			if a.rows[i].Match != 0 {
				t.Fatalf("step %d: row %d: Match %d after clear", step, i, a.rows[i].Match)
			}
		}
	}
}

func prefixCfg(blockChars int, charsPerToken float64) prefix.Config {
	return prefix.Config{BlockChars: blockChars, CharsPerToken: charsPerToken, CapacityTokens: 1 << 20}
}
