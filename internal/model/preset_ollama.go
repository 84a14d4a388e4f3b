package model

import "time"

// PresetOllamaTinyCPU is the real Ollama server of the end-to-end tests,
// fitted to its measured rates (docs/notes/ollama.md, "The fit").
const PresetOllamaTinyCPU = "ollama-tiny-cpu"

// OllamaTinyCPU is Ollama 0.17.4 (its own engine, OLLAMA_NEW_ENGINE=1)
// serving hack/tinymodel's model (llama architecture, 2 layers × 64, f16
// KV) on one CPU thread, with OLLAMA_NUM_PARALLEL=4 and the multi-user
// cache, as internal/e2e starts it. Ollama runs llama.cpp-style slots, so
// this is the slots model:
//
// Slots. 4 (OLLAMA_NUM_PARALLEL), each of num_ctx 4096 tokens (the
// Modelfile's; Ollama multiplies num_ctx by the parallel count for the
// runner's whole context: ollama/ollama, llm/server.go); a step takes at
// most 512 tokens (num_batch's default: api/types.go DefaultOptions). No
// RAM prompt cache: a slot keeps its last prompt and answer until another
// request takes it, and a new conversation takes the least recently used
// slot (measured: 5 conversations on 4 slots, the oldest one's follow-up
// finds nothing; ollama/ollama runner/ollamarunner/cache.go,
// findBestCacheSlot). KV per token: 2 layers × 2 (K, V) × 64 × 2 bytes.
//
// Step cost, least squares on the measurements of
// `LLM_RING_OLLAMA_FIT=1 go test -run TestOllamaFit ./internal/e2e/`
// (two runs, averaged; the shared 2-core machine's noise between runs is
// up to 40 %, see the notes):
//   - decode: the per-token time grows with the context by 0.96 µs per
//     position (0.27 ms at 86 tokens, 1.17 ms at 1,022): AttnCost 0.9 µs;
//     with 1 to 4 sequences decoding together (contexts of about 150) a
//     step costs about 0.13 ms + 0.11 ms per sequence beyond attention:
//     StepOverhead 130 µs, TokenCost 110 µs;
//   - prefill: a fresh prompt of n tokens costs n × 49.5 µs plus
//     1.43 µs per (token, earlier position) pair (relative least squares
//     over 86 … 2,022 tokens, the step overheads of its 512-token chunks
//     taken out): PrefillTokenCost 50 µs, PrefillAttnCost 1.43 µs.
//
// Answers: the tiny model's random weights rarely stop on their own, so
// n_predict (num_predict) decides; the natural length is 32 to 400 tokens
// as in DefaultConfig.
func OllamaTinyCPU() Config {
	return Config{
		NParallel:        4,
		CtxSize:          4 * 4096,
		NBatch:           512,
		CacheRAMMiB:      0,
		BytesPerToken:    2 * 2 * 64 * 2,
		StepOverhead:     130 * time.Microsecond,
		TokenCost:        110 * time.Microsecond,
		AttnCost:         900 * time.Nanosecond,
		PrefillTokenCost: 50 * time.Microsecond,
		PrefillAttnCost:  1430 * time.Nanosecond,
		AnswerMin:        32,
		AnswerMax:        400,
		Seed:             1,
	}
}

// PresetOllamaTinyCPUSimTokens is PresetOllamaTinyCPU counted in the
// simulator's tokens instead of the tiny model's.
const PresetOllamaTinyCPUSimTokens = "ollama-tiny-cpu-simtok"

// OllamaRealPerSimToken is how many of the tiny model's tokens (one per
// character) one of the simulator's tokens (Qwen2.5-like pieces) stands
// for: 3.91, the ratio of the real servers' prompt_eval_count to the
// simulated PromptTokens over the same 18 first-turn prompts
// (docs/notes/ollama.md, "Live against simulated"; 3.70 to 4.16 per prompt).
const OllamaRealPerSimToken = 3.91

// OllamaTinyCPUSimTokens is OllamaTinyCPU for the simulator's tokenizer:
// the same text is OllamaRealPerSimToken times fewer tokens, so a prompt
// token costs that many real ones (PrefillTokenCost × r), a pair of them
// r² pairs (PrefillAttnCost × r²), a context position r positions
// (AttnCost × r), and the context and the step budget hold r times fewer
// tokens. A generated token stays one generated token (the answers are
// max_tokens long in both), so StepOverhead and TokenCost do not change.
func OllamaTinyCPUSimTokens() Config {
	c := OllamaTinyCPU()
	r := OllamaRealPerSimToken
	scale := func(d time.Duration, k float64) time.Duration { return time.Duration(float64(d) * k) }
	c.PrefillTokenCost = scale(c.PrefillTokenCost, r)
	c.PrefillAttnCost = scale(c.PrefillAttnCost, r*r)
	c.AttnCost = scale(c.AttnCost, r)
	c.CtxSize = int(float64(c.CtxSize) / r)
	c.NBatch = int(float64(c.NBatch) / r)
	c.BytesPerToken = int(float64(c.BytesPerToken) * r)
	return c
}
