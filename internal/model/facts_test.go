package model

import (
	"math"
	"testing"

	"github.com/llm-ring/llm-ring/internal/policy"
)

func TestFacts(t *testing.T) {
	near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }
	// The study's laptop: 4 slots × 4,096 tokens + 512 MiB ÷ 12 KiB of RAM
	// cache; 12.7 ms per prompt token; 19 + 12.7 ms per step of one token.
	f := DefaultConfig().Facts()
	want := policy.Facts{Slots: 4, CacheTokens: 16384 + 512.0*1024/12, PrefillTPS: 1000 / 12.7, DecodeTPS: 1000 / 31.7}
	if f.Slots != want.Slots || f.BlockSize != 0 || !near(f.CacheTokens, want.CacheTokens) ||
		!near(f.PrefillTPS, want.PrefillTPS) || !near(f.DecodeTPS, want.DecodeTPS) {
		t.Errorf("cpu facts %+v, want %+v", f, want)
	}
	// A paged preset: max_num_seqs, its KV pool and vLLM's block size.
	c, err := Preset(PresetH100Llama8B)
	if err != nil {
		t.Fatal(err)
	}
	g := c.Facts()
	if g.Slots != c.NParallel || g.CacheTokens != float64(c.kvPoolTokens()) || g.BlockSize != 16 ||
		!near(g.PrefillTPS, 1e9/float64(c.PrefillTokenCost)) || g.DecodeTPS <= 0 {
		t.Errorf("paged facts %+v (config %+v)", g, c)
	}
	// The facts are valid predictive settings.
	p := policy.DefaultPredictive()
	policy.ApplyFacts(p, g, func(string) bool { return false })
	if err := p.Validate(); err != nil || p.Slots != g.Slots || p.CacheTokens != g.CacheTokens {
		t.Errorf("predictive with the paged facts: %+v, %v", p, err)
	}
}
