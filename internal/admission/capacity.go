package admission

import "math"

// maxKVTokens bounds a pool size taken as a fact (2^40 tokens, as the
// signals' parser bounds a reported pool).
const maxKVTokens = 1 << 40

// TokenCapacityFor is the in-flight token load at which a replica of a
// pool whose engine's KV pool holds kvTokens tokens scores 1 (the
// saturation's token term, ReplicaScore):
//
//	TokenCapacity                 when configured (> 0): it wins
//	⌊TokenShare × kvTokens⌋ (≥ 1) when TokenShare > 0 and the pool is known
//	0 (the term off)              otherwise: an engine that reports no pool
//	                              (llama.cpp, Ollama) keeps the other terms
//
// kvTokens is the engine fact (policy.Facts.CacheTokens of an engine that
// reports its KV pool: vLLM num_gpu_blocks × block_size, SGLang
// max_total_num_tokens); 0, negative, NaN or infinite: unknown.
func (s *Settings) TokenCapacityFor(kvTokens float64) int64 {
	if s.TokenCapacity > 0 {
		return s.TokenCapacity
	}
	if !(s.TokenShare > 0) || !(kvTokens > 0) || math.IsInf(kvTokens, 0) {
		return 0
	}
	return max(int64(s.TokenShare*min(kvTokens, maxKVTokens)), 1)
}

// SetKVTokens tells the controller its pool's KV pool size in tokens (the
// engine fact; 0: unknown), as the driver learns it: the token capacity
// its saturation score uses (Settings().TokenCapacity) becomes
// TokenCapacityFor(kvTokens) of the settings it was made with. A
// configured token_capacity is kept whatever the pool.
func (c *Controller) SetKVTokens(kvTokens float64) {
	base := c.s
	base.TokenCapacity = c.tokenCap
	c.s.TokenCapacity = base.TokenCapacityFor(kvTokens)
}
