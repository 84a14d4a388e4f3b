package policy

import "math"

// Facts are what an engine is, as opposed to how a policy should weigh it:
// the requests a replica serves at once, its prompt cache's capacity, its
// KV block size, and how fast it prefills and decodes. A policy setting
// that is such a fact takes it from the engine (the simulator: the replica
// preset's model; the live router: what the configuration's engine says)
// unless the configuration sets the key itself. Zero fields are unknown and
// change nothing.
type Facts struct {
	Slots       int     // requests served at once (llama.cpp --parallel, vLLM max_num_seqs)
	CacheTokens float64 // prompt-cache capacity, tokens (slots' contexts + RAM cache; a paged KV pool)
	BlockSize   int     // KV block size, tokens (vLLM --block-size)
	PrefillTPS  float64 // prompt tokens per second, one request alone
	DecodeTPS   float64 // output tokens per second, one sequence alone
}

// FactTaker is the settings of a policy some of whose keys are engine
// facts.
type FactTaker interface {
	Settings
	// TakeFacts sets, from f, each fact key the configuration did not give
	// (given reports the keys it did) and f knows.
	TakeFacts(f Facts, given func(key string) bool)
}

// ApplyFacts applies f to s when s has fact keys (FactTaker); given reports
// the keys the configuration set itself, which keep their values. It
// returns s.
func ApplyFacts(s Settings, f Facts, given func(key string) bool) Settings {
	if ft, ok := s.(FactTaker); ok && f != (Facts{}) {
		ft.TakeFacts(f, given)
	}
	return s
}

// usable reports a fact worth taking: known, finite and positive.
func usable(x float64) bool { return x > 0 && !math.IsInf(x, 0) }

// TakeFacts: slots, cache_tokens and the speed priors are the engine's.
func (p *Predictive) TakeFacts(f Facts, given func(string) bool) {
	if f.Slots > 0 && !given("slots") {
		p.Slots = min(f.Slots, 1<<20)
	}
	if usable(f.CacheTokens) && !given("cache_tokens") {
		p.CacheTokens = min(f.CacheTokens, 1<<40)
	}
	if usable(f.PrefillTPS) && !given("prior_prefill_tps") {
		p.PriorPrefill = f.PrefillTPS
	}
	if usable(f.DecodeTPS) && !given("prior_decode_tps") {
		p.PriorDecode = f.DecodeTPS
	}
}

// TakeFacts: block_size is the engine's KV block size.
func (k *KVCost) TakeFacts(f Facts, given func(string) bool) {
	if f.BlockSize > 0 && !given("block_size") {
		k.BlockSize = min(f.BlockSize, 1<<16)
	}
}

var (
	_ FactTaker = (*Predictive)(nil)
	_ FactTaker = (*KVCost)(nil)
)
