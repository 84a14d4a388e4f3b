package prefix

import "github.com/cespare/xxhash/v2"

// A salt keeps one LoRA adapter's blocks apart from another's and from the
// base model's in an Index, as the engines keep them apart in their caches:
// vLLM puts the LoRA's name into every block hash (vllm/v1/core/
// kv_cache_utils.py, _gen_lora_extra_hash_keys), so blocks cached for one
// adapter never serve another, nor the base model. The drivers hash a
// prompt's blocks without knowing the adapter (the same Hasher, once per
// request); the Index keys each block as block ^ salt instead
// (MatchSalted, InsertSalted, EvictSalted), without copying the caller's
// slice. Salt 0 is the base model: its keys are the blocks themselves,
// exactly as Match, Insert and Evict key them.

// saltMix is xored into an adapter's name hash, and stands in for it when
// that is 0, so that no adapter's salt is 0 (the base model's).
const saltMix uint64 = 0x9e3779b97f4a7c15 // 2^64 / the golden ratio

// Salt returns the salt of a LoRA adapter's blocks: 0 for "" (no adapter,
// the base model), otherwise a non-zero hash of the name. Every router
// instance and the simulator compute the same salt for the same name. It
// allocates nothing.
func Salt(adapter string) uint64 {
	if adapter == "" {
		return 0
	}
	if s := xxhash.Sum64String(adapter) ^ saltMix; s != 0 {
		return s
	}
	return saltMix
}
