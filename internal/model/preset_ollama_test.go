package model

import (
	"math"
	"testing"
	"time"
)

// The real server's measurements (docs/notes/ollama.md, "The fit": two
// runs of `LLM_RING_OLLAMA_FIT=1 go test -run TestOllamaFit -v
// ./internal/e2e/`, averaged), in ms.
var (
	// a fresh prompt of n tokens alone: prompt_eval_duration
	ollamaPrefill = map[int]float64{86: 9.00, 272: 74.4, 522: 286.8, 1022: 748.3, 2022: 2688.9}
	// 128 tokens generated after a fresh prompt of n tokens alone:
	// eval_duration / eval_count. The 86-token point is the mean of the
	// four samples of that workload (0.25, 0.29, 0.56, 0.55: the runs'
	// decode-alone and batch-1 rows, which differ by 2× on the busy machine).
	ollamaDecodeAlone = map[int]float64{86: 0.41, 1022: 1.172}
	// b requests of 86 prompt tokens and 128 answer tokens sent together:
	// the median of their eval_duration / eval_count
	ollamaDecodeBatch = map[int]float64{2: 0.646, 3: 0.840, 4: 1.077}
)

// ollamaTolerance is the relative miss allowed: the two measuring runs
// differ by up to 40 % on single points (the shared machine's load), the
// means by less.
const ollamaTolerance = 0.25

func checkFit(t *testing.T, what string, n int, measured, model float64) {
	t.Helper()
	miss := model/measured - 1
	t.Logf("%s n=%d: measured %.3f ms, preset %.3f ms (%+.0f %%)", what, n, measured, model, 100*miss)
	if math.Abs(miss) > ollamaTolerance {
		t.Errorf("%s n=%d: the preset gives %.3f ms, measured %.3f ms: %+.0f %%, beyond ±%.0f %%",
			what, n, model, measured, 100*miss, 100*ollamaTolerance)
	}
}

// runSlots advances r until idle and returns its results in the order
// they finished, and the time of the last event.
func runSlots(r *Replica, now time.Duration) ([]*Result, time.Duration) {
	var out []*Result
	var evs []Event
	for {
		at, ok := r.NextEvent()
		if !ok {
			return out, now
		}
		now = at
		evs = r.Advance(at, evs[:0])
		for _, e := range evs {
			if e.Kind == EventDone {
				out = append(out, e.Result)
			}
		}
	}
}

func ollamaFitConfig(t *testing.T) Config {
	cfg := mustPreset(t, PresetOllamaTinyCPU)
	cfg.AnswerMin, cfg.AnswerMax = 100000, 100000 // num_predict decides, as in the measurement
	return cfg
}

// TestOllamaTinyCPUReproducesMeasuredRates: prefill against prompt length,
// decode against context and against batch, within ollamaTolerance.
func TestOllamaTinyCPUReproducesMeasuredRates(t *testing.T) {
	cfg := ollamaFitConfig(t)
	for _, n := range []int{86, 272, 522, 1022, 2022} {
		r := newPagedReplica(t, cfg)
		r.Submit(0, Request{Tokens: toksFrom(7, n), NPredict: 1})
		res, _ := runSlots(r, 0)
		for _, res := range res {
			checkFit(t, "prefill", n, ollamaPrefill[n], ms(res.PromptTime()))
		}
	}
	for _, n := range []int{86, 1022} {
		r := newPagedReplica(t, cfg)
		r.Submit(0, Request{Tokens: toksFrom(7, n), NPredict: 128})
		res, _ := runSlots(r, 0)
		for _, res := range res {
			checkFit(t, "decode alone, context", n, ollamaDecodeAlone[n], ms(res.PredictedTime())/float64(res.PredictedN-1))
		}
	}
	for b := 2; b <= 4; b++ {
		r := newPagedReplica(t, cfg)
		for i := range b {
			r.Submit(0, Request{Tokens: toksFrom(1+1000*i, 86), NPredict: 128})
		}
		var per []float64
		res, _ := runSlots(r, 0)
		for _, res := range res {
			per = append(per, ms(res.PredictedTime())/float64(res.PredictedN-1))
		}
		checkFit(t, "decode, batch", b, ollamaDecodeBatch[b], median(per))
	}
}

// TestOllamaTinyCPUKeepsAndEvictsAsMeasured: 5 conversations of 222-token
// first turns on 4 slots, then their follow-ups newest first. The real
// server reused 237 tokens (prompt + reply − 1) for the four newest and
// nothing but the 9-token template start for the oldest, whose slot the
// fifth conversation had taken: least recently used.
func TestOllamaTinyCPUKeepsAndEvictsAsMeasured(t *testing.T) {
	r := newPagedReplica(t, ollamaFitConfig(t))
	prompts := make([][]Token, 5)
	var now time.Duration
	for c := range prompts {
		prompts[c] = toksFrom(1+5000*c, 222)
		r.Submit(now, Request{Tokens: prompts[c], NPredict: 16})
		var res []*Result
		res, now = runSlots(r, now)
		for _, res := range res {
			prompts[c] = concat(concat(prompts[c], res.Output.Tokens), toksFrom(3+5000*c, 20))
		}
	}
	want := []bool{true, true, true, true, false} // conversations 4, 3, 2, 1, 0
	for i, c := range []int{4, 3, 2, 1, 0} {
		r.Submit(now, Request{Tokens: prompts[c], NPredict: 16})
		var res []*Result
		res, now = runSlots(r, now)
		for _, res := range res {
			if hit := res.CacheN >= 222; hit != want[i] {
				t.Errorf("conversation %d's follow-up reused %d of %d tokens; the real server reused %s",
					c, res.CacheN, res.PromptTokens, map[bool]string{true: "237", false: "none"}[want[i]])
			}
		}
	}
}

// TestOllamaTinyCPUSimTokensPrefillsTheSameText: a prompt of n of the
// simulator's tokens costs, in the sim-token preset, what n × r real
// tokens cost in the fitted one, within 2 % (the chunks' step overheads
// and the pair counts, n(n−1)/2·r² against rn(rn−1)/2, differ slightly).
func TestOllamaTinyCPUSimTokensPrefillsTheSameText(t *testing.T) {
	real, sim := ollamaFitConfig(t), mustPreset(t, PresetOllamaTinyCPUSimTokens)
	sim.AnswerMin, sim.AnswerMax = 100000, 100000
	for _, n := range []int{50, 200, 500} {
		prefill := func(c Config, n int) float64 {
			r := newPagedReplica(t, c)
			r.Submit(0, Request{Tokens: toksFrom(7, n), NPredict: 1})
			res, _ := runSlots(r, 0)
			return ms(res[0].PromptTime())
		}
		want := prefill(real, int(math.Round(float64(n)*OllamaRealPerSimToken)))
		if got := prefill(sim, n); math.Abs(got/want-1) > 0.02 {
			t.Errorf("%d sim tokens: %.2f ms, %d real tokens in the fitted preset: %.2f ms", n, got, int(float64(n)*OllamaRealPerSimToken), want)
		}
	}
}
