package traffic

import (
	"testing"

	"github.com/llm-ring/llm-ring/internal/model"
)

// TestEstimateIsConservative: the generator's token estimate must not
// undercount the simulated replica's tokenizer (Qwen2.5-like) on the texts it
// generates, or FitsContext would let prompts past max_context_tokens.
func TestEstimateIsConservative(t *testing.T) {
	for _, name := range []string{"quick", "standard"} {
		p := mustLoad(t, name)
		var chars, est, real int
		for seed := int64(1); seed <= 5; seed++ {
			g, err := NewGenerator(p, seed)
			if err != nil {
				t.Fatal(err)
			}
			texts := g.SystemPrompts()
			for _, c := range mustGenerate(t, p, seed) {
				for _, turn := range c.Turns {
					texts = append(texts, turn.User)
				}
			}
			for _, s := range texts {
				e, r := EstimateTokens(s), model.Count(s)
				if e < r {
					t.Errorf("%s seed %d: estimate %d < %d tokens for %q", name, seed, e, r, s)
				}
				chars, est, real = chars+len(s), est+e, real+r
			}
		}
		t.Logf("%s: %.2f chars per token (the estimate assumes %d); estimates exceed the count by %.0f%%",
			name, float64(chars)/float64(real), CharsPerTokenEstimate, 100*float64(est-real)/float64(real))
	}
}
