package model

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// WithSpeed returns c on hardware speed times as fast: every step cost
// (StepOverhead, TokenCost, AttnCost and their prefill counterparts) is
// divided by speed, so 0.5 is a replica at half speed, each step taking
// twice as long. WithSpeed(1) returns c unchanged. speed must be positive.
func (c Config) WithSpeed(speed float64) Config {
	if speed == 1 {
		return c
	}
	scale := func(d time.Duration) time.Duration { return time.Duration(float64(d) / speed) }
	c.StepOverhead = scale(c.StepOverhead)
	c.TokenCost = scale(c.TokenCost)
	c.AttnCost = scale(c.AttnCost)
	c.PrefillTokenCost = scale(c.PrefillTokenCost)
	c.PrefillAttnCost = scale(c.PrefillAttnCost)
	c.PrefillOverhead = scale(c.PrefillOverhead)
	return c
}

// Preset names.
const (
	PresetCPU = "cpu-qwen0.5b" // the study's laptop: DefaultConfig
	PresetGPU = "gpu-h100-8b"  // an 8B model (Llama-3.1-8B class) on one H100 with vLLM
)

var presets = map[string]func() Config{
	PresetCPU:                    DefaultConfig,
	PresetGPU:                    GPUH100Llama8B,
	PresetH100Llama8B:            func() Config { return RooflineH100Llama8B().Config() },
	PresetH100Llama70B:           func() Config { return RooflineH100Llama70B().Config() },
	PresetL4Qwen05B:              func() Config { return RooflineL4Qwen05B().Config() },
	PresetOllamaTinyCPU:          OllamaTinyCPU,
	PresetOllamaTinyCPUSimTokens: OllamaTinyCPUSimTokens,
}

// PresetNames returns the names Preset knows, sorted.
func PresetNames() []string {
	names := make([]string, 0, len(presets))
	for n := range presets {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Preset returns the named replica configuration.
func Preset(name string) (Config, error) {
	f, ok := presets[name]
	if !ok {
		return Config{}, fmt.Errorf("replica preset %q: unknown (known: %s)", name, strings.Join(PresetNames(), ", "))
	}
	return f(), nil
}

// The GPU preset's figures, each with its source.
const (
	// vLLM's scheduler limits (vllm-project/vllm, vllm/engine/arg_utils.py,
	// EngineArgs defaults by usage context): max_num_seqs 256 and, for the
	// OpenAI server, max_num_batched_tokens 2048 on most GPUs. On GPUs of
	// ≥ 70 GiB other than the A100 (the H100) recent releases raise them to
	// 1024 sequences and 8192 batched tokens; we keep 256 sequences (the
	// default almost everywhere, and about where the KV pool below binds for
	// chat prompts of ~1,800 tokens: 450,560 / 256 = 1,760) and take the
	// H100's 8192-token step budget.
	gpuMaxNumSeqs         = 256
	gpuMaxNumBatchedToken = 8192
	// Llama-3.1-8B: 131,072-token context (max_position_embeddings); KV per
	// token = 2 (K, V) × 32 layers × 8 KV heads × 128 dims × 2 bytes (bf16)
	// = 131,072 bytes (the llm-d inference simulator's table gives ~128 KB
	// for Llama-3/3.1 8B: llm-d/llm-d-inference-sim, docs/latency-profiles.md).
	gpuMaxModelLen    = 131072
	gpuKVBytesPerTok  = 2 * 32 * 8 * 128 * 2
	gpuKVPoolGiB      = 55
	gpuKVTokens       = gpuKVPoolGiB << 30 / gpuKVBytesPerTok // 450,560
	gpuHBMBytesPerSec = 3.35e12                               // H100 SXM HBM3
)

// GPUH100Llama8B is an 8B model (Llama-3.1-8B class, bf16) served by vLLM
// on one H100-class GPU (80 GB):
//
// KV pool. vLLM gives the KV cache what is left of
// gpu_memory_utilization (0.9) × 79.6 GiB = 71.7 GiB after the weights
// (8.03 B parameters × 2 bytes = 16.06 GB = 14.96 GiB) and the activation
// peak of an 8192-token step (~1.5 GiB): about 55 GiB, i.e.
// 55 × 2^30 / 131,072 bytes per token = 450,560 tokens (≈ 59 GB; a flat
// 60 GB would be 457,763), shared by all sequences (KVTokens).
//
// Slots. 256 sequences (max_num_seqs) of up to 131,072 tokens each; a step
// processes at most 8192 tokens (chunked prefill: decode tokens first, then
// prompt chunks). No RAM prompt cache (vLLM keeps its prefix cache in GPU
// memory: here, the idle slots' tokens, evicted LRU from the pool).
//
// Step cost, from the llm-d inference simulator's profile "8B-class model
// on H100" (llm-d/llm-d-inference-sim, docs/latency-profiles.md and
// manifests/latency-profiles/8b-h100-balanced-per-token.yaml):
// inter-token-latency 12 ms, prefill-overhead 30 ms, prefill-time-per-token
// 250 µs, time-factor-under-load 2.0 (latency doubles, linearly in the
// requests in flight, when the engine is full). So:
//   - a decode step of b sequences costs 12 ms × (1 + (b−1)/255): 12 ms
//     alone, 24 ms at 256 — StepOverhead 11.953 ms + b × TokenCost
//     47.06 µs (12 ms / 255; also 16 GFLOP per token at ~340 TFLOPS, a
//     plausible bf16 utilisation);
//   - a prompt chunk of n tokens costs 30 ms + n × 250 µs with the step
//     overhead (PrefillOverhead = 30 ms − StepOverhead): 94 ms for 256
//     tokens (llm-d's own check), 1.03 s for 4,000;
//
// plus attention, which the llm-d figures (prompts of a few thousand
// tokens) leave out and long traces need:
//   - decode: every step reads each sequence's KV, 131,072 bytes per token
//     of context at 3.35 TB/s (H100 SXM HBM3): AttnCost 39 ns per token;
//   - prefill: 4 × 32 layers × 4096 = 524,288 FLOP per (token, earlier
//     position) pair, at ~500 TFLOPS (FlashAttention on H100, bf16):
//     PrefillAttnCost 1 ns. A 4,000-token prompt gains 8 ms (0.8 %), a
//     100,000-token one 5 s.
//
// Answers are 32 to 1024 tokens long by nature (max_tokens cuts them).
func GPUH100Llama8B() Config {
	tokenCost := 12 * time.Millisecond / (gpuMaxNumSeqs - 1)
	stepOverhead := 12*time.Millisecond - tokenCost
	return Config{
		NParallel:        gpuMaxNumSeqs,
		CtxSize:          gpuMaxNumSeqs * gpuMaxModelLen,
		NBatch:           gpuMaxNumBatchedToken,
		CacheRAMMiB:      0,
		BytesPerToken:    gpuKVBytesPerTok,
		StepOverhead:     stepOverhead,
		TokenCost:        tokenCost,
		AttnCost:         39 * time.Nanosecond, // gpuKVBytesPerTok / gpuHBMBytesPerSec = 39.1 ns
		PrefillTokenCost: 250 * time.Microsecond,
		PrefillAttnCost:  1 * time.Nanosecond,
		PrefillOverhead:  30*time.Millisecond - stepOverhead,
		KVTokens:         gpuKVTokens,
		AnswerMin:        32,
		AnswerMax:        1024,
		Seed:             1,
	}
}
