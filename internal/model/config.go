package model

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Config is the configuration of one simulated llama.cpp server. The zero
// value is not valid; start from DefaultConfig.
type Config struct {
	// NParallel is the number of slots (llama.cpp --parallel).
	NParallel int `json:"n_parallel"`
	// CtxSize is the total context (llama.cpp --ctx-size); each slot gets
	// CtxSize/NParallel tokens.
	CtxSize int `json:"ctx_size"`
	// NBatch is the most tokens one step processes (llama.cpp --batch-size):
	// one per generating slot plus prompt chunks.
	NBatch int `json:"n_batch"`
	// CacheRAMMiB is the size of the RAM prompt cache (llama.cpp
	// --cache-ram); 0 disables it.
	CacheRAMMiB int `json:"cache_ram_mib"`
	// BytesPerToken is the size of one token's KV state, which sizes the
	// entries of the RAM prompt cache. Qwen2.5-0.5B with an f16 KV cache:
	// 24 layers × 2 (K and V) × 2 KV heads × 64 dims × 2 bytes = 12 KiB.
	BytesPerToken int `json:"bytes_per_token"`

	// The cost of one step (one llama_decode of a batch), in model time:
	//   StepOverhead + Σ over the batch's tokens (TokenCost + AttnCost × position)
	// where position is the token's position in its slot's context.
	StepOverhead time.Duration `json:"step_overhead"`
	TokenCost    time.Duration `json:"token_cost"`
	AttnCost     time.Duration `json:"attn_cost"`

	// AnswerMin and AnswerMax bound the natural length of an answer, in
	// tokens: each prompt gets a length log-uniform in [AnswerMin, AnswerMax]
	// chosen by (seed, prompt); n_predict and the context can cut it.
	AnswerMin int `json:"answer_min"`
	AnswerMax int `json:"answer_max"`

	// Seed is the default seed of the generated answers; a request's own
	// seed (if non-zero) replaces it.
	Seed uint64 `json:"seed"`

	// The fields below describe a GPU engine (vLLM-like); their zero values
	// keep the llama.cpp model above exactly as it was.
	//
	// A prompt chunk of n tokens at positions pos … pos+n−1 then costs
	//   PrefillOverhead + Σ (PrefillTokenCost + PrefillAttnCost × position)
	// in its step, instead of Σ (TokenCost + AttnCost × position): on a GPU
	// a prompt token is compute-bound and a decode token mostly shares the
	// step's weight reads (StepOverhead), so the two cost differently.
	//
	// PrefillTokenCost is the cost of one prompt token (0: TokenCost).
	PrefillTokenCost time.Duration `json:"prefill_token_cost" cfg:"optional"`
	// PrefillAttnCost is the attention cost of one prompt token per earlier
	// position (0: AttnCost).
	PrefillAttnCost time.Duration `json:"prefill_attn_cost" cfg:"optional"`
	// PrefillOverhead is added once per prompt chunk in a step (0: none).
	PrefillOverhead time.Duration `json:"prefill_overhead" cfg:"optional"`
	// KVTokens, if set, is a KV pool shared by the slots, in tokens (vLLM's
	// paged KV cache): a request is admitted only when its prompt and its
	// whole answer fit beside the running requests' reservations; idle
	// slots' cached tokens count too and are evicted, least recently used
	// first, to make room. 0: no shared pool (each slot has its context).
	// It must hold at least one slot's context, as vLLM requires the
	// maximum model length to fit in its KV cache.
	KVTokens int `json:"kv_tokens" cfg:"optional"`

	// Engine is the engine modelled: "" or EngineLlamaCpp (slots, the
	// model above), EngineVLLM or EngineSGLang (a paged KV pool of
	// KVTokens tokens, or CtxSize if 0, shared by up to NParallel running
	// requests — max_num_seqs — with NBatch as max_num_batched_tokens and
	// SlotContext as max_model_len; CacheRAMMiB is not used). See
	// docs/engines.md.
	Engine string `json:"engine" cfg:"optional"`
	// BlockSize is the paged pool's block size in tokens (vLLM
	// --block-size, default 16; SGLang --page-size, default 1); 0: the
	// engine's default.
	BlockSize int `json:"block_size" cfg:"optional"`
	// SchedulePolicy is SGLang's --schedule-policy: PolicyFCFS (the
	// default, "") or PolicyLPM.
	SchedulePolicy string `json:"schedule_policy" cfg:"optional"`
	// MaxLoras is the number of LoRA adapter slots of a paged engine
	// (vLLM --max-loras, SGLang --max-loras-per-batch): at most MaxLoras
	// distinct adapters have running requests at once; a request whose
	// adapter is not resident loads it into a free slot or the slot of
	// the least recently used idle adapter, and waits (without blocking
	// other requests) while every slot holds an adapter with running
	// requests. 0: adapters are not modelled (free and unlimited; the
	// default). Engine llamacpp must leave it 0 (llama.cpp loads every
	// --lora adapter at start). See docs/engines.md.
	MaxLoras int `json:"max_loras" cfg:"optional"`
	// AdapterLoad is the model time one adapter load adds to the step
	// that first runs its request (the load runs before the step's
	// forward pass, as vLLM's worker activates adapters; every request of
	// that step waits for it). 0: DefaultAdapterLoad.
	AdapterLoad time.Duration
}

// Paged reports whether c is a paged engine (vllm or sglang).
func (c Config) Paged() bool { return c.Engine == EngineVLLM || c.Engine == EngineSGLang }

// blockSize is the paged pool's block size.
func (c Config) blockSize() int {
	switch {
	case c.BlockSize > 0:
		return c.BlockSize
	case c.Engine == EngineSGLang:
		return 1
	}
	return 16
}

// kvPoolTokens is the paged pool's size in tokens.
func (c Config) kvPoolTokens() int {
	if c.KVTokens > 0 {
		return c.KVTokens
	}
	return c.CtxSize
}

// DefaultConfig is the server of the original study: Qwen2.5-0.5B on a
// laptop CPU, 4 slots of 4096 tokens, a 512 MiB RAM prompt cache, and step
// costs calibrated to the study's measurements (see docs/notes/replica-model.md):
// a 28-token prompt takes 375 ms cold and 31.7 ms from cache.
func DefaultConfig() Config {
	return Config{
		NParallel:     4,
		CtxSize:       16384,
		NBatch:        2048,
		CacheRAMMiB:   512,
		BytesPerToken: 12 << 10,
		StepOverhead:  19 * time.Millisecond,
		TokenCost:     12700 * time.Microsecond,
		AttnCost:      1 * time.Microsecond,
		AnswerMin:     32,
		AnswerMax:     400,
		Seed:          1,
	}
}

// SlotContext is the context of one slot, in tokens.
func (c Config) SlotContext() int { return c.CtxSize / c.NParallel }

// Validate reports the first invalid setting, by name.
func (c Config) Validate() error {
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	check(c.NParallel >= 1, "n_parallel: must be at least 1, got %d", c.NParallel)
	check(c.NParallel < 1 || c.CtxSize/max(c.NParallel, 1) >= 8,
		"ctx_size: %d gives fewer than 8 tokens per slot with %d slots", c.CtxSize, c.NParallel)
	check(c.NBatch >= max(c.NParallel, 1), "n_batch: must be at least n_parallel (%d), got %d", c.NParallel, c.NBatch)
	check(c.CacheRAMMiB >= 0, "cache_ram_mib: must not be negative, got %d", c.CacheRAMMiB)
	check(c.BytesPerToken >= 1, "bytes_per_token: must be at least 1, got %d", c.BytesPerToken)
	check(c.StepOverhead >= 0, "step_overhead: must not be negative, got %v", c.StepOverhead)
	check(c.TokenCost >= 0, "token_cost: must not be negative, got %v", c.TokenCost)
	check(c.AttnCost >= 0, "attn_cost: must not be negative, got %v", c.AttnCost)
	check(c.StepOverhead+c.TokenCost > 0, "step_overhead and token_cost: must not both be zero")
	check(c.AnswerMin >= 1, "answer_min: must be at least 1, got %d", c.AnswerMin)
	check(c.AnswerMax >= c.AnswerMin, "answer_max: must be at least answer_min (%d), got %d", c.AnswerMin, c.AnswerMax)
	check(c.PrefillTokenCost >= 0, "prefill_token_cost: must not be negative, got %v", c.PrefillTokenCost)
	check(c.PrefillAttnCost >= 0, "prefill_attn_cost: must not be negative, got %v", c.PrefillAttnCost)
	check(c.PrefillOverhead >= 0, "prefill_overhead: must not be negative, got %v", c.PrefillOverhead)
	check(c.KVTokens == 0 || c.NParallel < 1 || c.KVTokens >= c.SlotContext(),
		"kv_tokens: %d cannot hold one slot's context of %d tokens (vLLM refuses a maximum model length beyond its KV cache)",
		c.KVTokens, c.CtxSize/max(c.NParallel, 1))
	check(c.KVTokens >= 0, "kv_tokens: must not be negative, got %d", c.KVTokens)
	c.validatePaged(check)
	return errors.Join(errs...)
}

func (c Config) validatePaged(check func(bool, string, ...any)) {
	check(c.Engine == "" || c.Engine == EngineLlamaCpp || c.Paged(),
		"engine: %q is not one of %s", c.Engine, strings.Join(Engines, ", "))
	check(c.BlockSize >= 0 && c.BlockSize <= 1024, "block_size: must be in [0, 1024], got %d", c.BlockSize)
	check(c.SchedulePolicy == "" || c.SchedulePolicy == PolicyFCFS || (c.SchedulePolicy == PolicyLPM && c.Engine == EngineSGLang),
		"schedule_policy: %q is not fcfs, or lpm with engine sglang", c.SchedulePolicy)
	check(c.MaxLoras >= 0, "max_loras: must not be negative, got %d", c.MaxLoras)
	check(c.MaxLoras == 0 || c.Paged(),
		"max_loras: %d needs engine vllm or sglang (llama.cpp loads every --lora adapter at start: no slots to model)", c.MaxLoras)
	check(c.AdapterLoad >= 0, "adapter_load: must not be negative, got %v", c.AdapterLoad)
	if !c.Paged() || c.NParallel < 1 {
		return
	}
	pool := c.kvPoolTokens() / c.blockSize() * c.blockSize()
	check(pool >= c.SlotContext(),
		"kv pool: %d tokens in blocks of %d cannot hold one request of max_model_len %d (vLLM refuses this)",
		pool, c.blockSize(), c.SlotContext())
}

// PoolShape returns the block size and number of blocks of c's paged KV
// pool (zero for llama.cpp), as vLLM's cache_config_info reports them.
func PoolShape(c Config) Stats {
	if !c.Paged() {
		return Stats{}
	}
	bs := c.blockSize()
	return Stats{BlockSize: bs, NumBlocks: c.kvPoolTokens() / bs}
}
