package policy

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
type LLMAware struct {
	p Params
}

var _ Policy = (*LLMAware)(nil)

// NewLLMAware returns the llm-aware policy.
func NewLLMAware(p Params) *LLMAware { return &LLMAware{p: p} }

// Name implements Policy.
func (*LLMAware) Name() string { return "llm-aware" }

// Pick implements Policy.
func (a *LLMAware) Pick(req *Request, v *View) Decision {
	home := v.ringHome(req.Hash)
	whole := wholeCost(req)
	s := boundSpec{unit: Tokens, eps: a.p.Epsilon, home: home, preferred: home, cacheAt: -1, cost: whole}
	cached := req.Last >= 0 && req.Last < len(v.Names) && req.CachedTokens > 0 && !v.Excluded(req.Last)
	if cached && a.p.PlacementMemory {
		s.preferred = req.Last
	}
	if cached && a.p.CacheAwareLoad {
		s.cacheAt = req.Last
		s.cacheCost = max(1, int64(req.PromptTokens)-int64(req.CachedTokens)) + int64(req.OutputTokens)
	}
	// The cache is likely on the preferred replica when that is where the
	// conversation was last served.
	cacheLikely := cached && s.preferred == req.Last
	if a.p.LongStickiness && cacheLikely && req.PromptTokens >= a.p.LongPromptTokens {
		s.long, s.longFactor = true, a.p.LongCapFactor
	}
	var d Decision
	d.Trace.begin("llm-aware", req, v)
	d.Trace.Memory = a.p.PlacementMemory
	d.Trace.CacheAware = a.p.CacheAwareLoad
	d.Trace.LongOn = a.p.LongStickiness
	d.Trace.LongPrompt = a.p.LongPromptTokens
	d.Trace.CacheLikely = cacheLikely
	boundedPick(req, v, &s, &d)
	d.Charge = s.costAt(d.Replica)
	return d
}
