package state

import "github.com/llm-ring/llm-ring/internal/policy"

// Learned speeds. Each successful answer with counts teaches its replica's
// prefill and decode rates, as an exponentially weighted mean (weight
// SpeedWeight for the new sample), so that unequal replicas and a replica
// slowed by a noisy neighbour are seen within a few answers, and one odd
// answer moves the estimate by a fifth. Samples too small to measure a rate
// are skipped: prompts of fewer than MinPrefillSample processed tokens,
// answers of fewer than MinDecodeSample generated tokens.
//
// Sources, best first: the replica's own times (llama.cpp timings
// prompt_ms and predicted_ms, which exclude queueing); else what the
// driver measured: processed prompt tokens ÷ time to first token (which
// includes any queueing: a conservative rate), and generated tokens ÷ the
// time after the first token.
const (
	SpeedWeight      = 0.2
	MinPrefillSample = 16
	MinDecodeSample  = 8
	maxSpeedSamples  = 1 << 20
)

// speeds are the learned rates by interned replica id (kept across
// membership changes). The Table's lock guards them.
type speeds []policy.Speed

// learn updates replica id's rates from out and returns them, with whether
// out taught anything.
func (s speeds) learn(id uint32, out *Outcome) (policy.Speed, bool) {
	if int(id) >= len(s) {
		return policy.Speed{}, false
	}
	sp := &s[id]
	learned := false
	if out.PromptN >= MinPrefillSample {
		d := out.PromptTime
		if d <= 0 {
			d = out.TTFT
		}
		if d > 0 {
			sp.Prefill = ewma(sp.Prefill, float64(out.PromptN)/d.Seconds())
			learned = true
		}
	}
	if out.PredictedN >= MinDecodeSample {
		d := out.PredictedTime
		if d <= 0 && out.Latency > out.TTFT && out.TTFT > 0 {
			d = out.Latency - out.TTFT
		}
		if d > 0 {
			sp.Decode = ewma(sp.Decode, float64(out.PredictedN)/d.Seconds())
			learned = true
		}
	}
	if learned {
		sp.Samples = min(sp.Samples+1, maxSpeedSamples)
	}
	return *sp, learned
}

func ewma(old, x float64) float64 {
	if old == 0 {
		return x
	}
	return old + SpeedWeight*(x-old)
}

// Speed returns the learned rates of the named replica (zero if unknown).
func (t *Table) Speed(name string) policy.Speed {
	t.mu.Lock()
	defer t.mu.Unlock()
	if id, ok := t.idOf[name]; ok {
		return t.speed[id]
	}
	return policy.Speed{}
}
