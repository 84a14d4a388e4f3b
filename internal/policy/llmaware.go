package policy

import (
	"fmt"
)

// LLMAware is bounded loads in tokens with three additions for LLM serving,
// each switchable for ablations:
//
// Cache-aware load. On the replica believed to hold the conversation's
// cache (where it was last served), a request costs only its new tokens:
//
//	cost(cache replica) = max(1, prompt − cached) + output
//	cost(elsewhere)     = prompt + output
//
// Placement memory. The preferred replica is where the conversation was last
// served, not its ring home, so after a redirect it stays with its cache
// instead of paying a second full reprocess back home (reason sticky).
//
// Long-conversation stickiness. A cached conversation with prompt ≥
// LongPromptTokens may stay on its preferred replica up to
// LongCapFactor × average load (reasons home-long, sticky-long), since
// moving it costs the most.
//
// The cap is the bounded one in tokens, with total = Σ load + cost on the
// preferred replica. With all three additions off, LLMAware is Bounded in
// tokens mode.
//
// Its settings (config key policies.llm-aware) are the struct itself.
type LLMAware struct {
	// Epsilon: cap = (1+ε) × average token load. Default 0.25.
	Epsilon float64 `json:"epsilon"`
	// CacheAwareLoad: on the replica holding the cache, a turn costs only
	// its new tokens. Default true.
	CacheAwareLoad bool `json:"cache_aware_load"`
	// PlacementMemory: keep a conversation where it was last served (after
	// a redirect). Default true.
	PlacementMemory bool `json:"placement_memory"`
	// LongStickiness: long cached conversations may stay up to
	// LongCapFactor × average load. Default true.
	LongStickiness bool `json:"long_stickiness"`
	// LongPromptTokens: a conversation is long from this many prompt
	// tokens. Default 800.
	LongPromptTokens int `json:"long_prompt_tokens"`
	// LongCapFactor: the long-conversation cap, × average load. Default 2.
	LongCapFactor float64 `json:"long_cap_factor"`
}

var _ Policy = (*LLMAware)(nil)

// Reason codes of llm-aware, besides the bounded walk's.
const (
	// Sticky: llm-aware kept the conversation where it was last served (its
	// cache), away from its ring home, within the cap.
	Sticky Reason = "sticky"
	// HomeLong: the ring home (which holds the cache) was over the normal
	// cap but within the long-conversation cap.
	HomeLong Reason = "home-long"
	// StickyLong: like Sticky, within the long-conversation cap only.
	StickyLong Reason = "sticky-long"
)

// Name implements Policy.
func (*LLMAware) Name() string { return "llm-aware" }

// Validate implements Settings.
func (a *LLMAware) Validate() error {
	if err := validEpsilon(a.Epsilon); err != nil {
		return err
	}
	if a.LongPromptTokens < 1 {
		return fmt.Errorf("long_prompt_tokens: must be ≥ 1, got %d", a.LongPromptTokens)
	}
	if !(a.LongCapFactor >= 1 && a.LongCapFactor <= 100) {
		return fmt.Errorf("long_cap_factor: must be ≥ 1 and ≤ 100, got %g", a.LongCapFactor)
	}
	return nil
}

func explainLLMAware(d *Decision, b []byte) []byte { return d.Trace.writeBounded(b, d, true) }

// Pick implements Policy.
func (a *LLMAware) Pick(req *Request, v *View, d *Decision) {
	home := v.ringHome(req.Hash)
	whole := wholeCost(req)
	s := boundSpec{unit: Tokens, eps: a.Epsilon, home: home, preferred: home, cacheAt: -1, cost: whole}
	cached := req.Last >= 0 && req.Last < len(v.Names) && req.CachedTokens > 0 && !v.Excluded(req.Last)
	if cached && a.PlacementMemory {
		s.preferred = req.Last
	}
	if cached && a.CacheAwareLoad {
		s.cacheAt = req.Last
		s.cacheCost = max(1, int64(req.PromptTokens)-int64(req.CachedTokens)) + int64(req.OutputTokens)
	}
	// The cache is likely on the preferred replica when that is where the
	// conversation was last served.
	cacheLikely := cached && s.preferred == req.Last
	if a.LongStickiness && cacheLikely && req.PromptTokens >= a.LongPromptTokens {
		s.long, s.longFactor = true, a.LongCapFactor
	}
	*d = Decision{}
	d.Trace.begin("llm-aware", req, v)
	d.Trace.Explain = explainLLMAware
	d.Trace.Memory = a.PlacementMemory
	d.Trace.CacheAware = a.CacheAwareLoad
	d.Trace.LongOn = a.LongStickiness
	d.Trace.LongPrompt = a.LongPromptTokens
	d.Trace.CacheLikely = cacheLikely
	boundedPick(req, v, &s, d)
	d.Charge = s.costAt(d.Replica)
}
