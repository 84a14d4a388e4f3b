package router

import (
	"log/slog"

	"github.com/llm-ring/llm-ring/internal/state"
)

// kvTokens tells admission the KV pool, in tokens, that the replicas of
// the pool whose table is t report (the pool's engine fact CacheTokens,
// the smallest replica's; 0: none reports it): with token_share set and
// no token_capacity, that pool's token capacity becomes token_share × kv
// (admission.Settings.TokenCapacityFor). Called by the facts' apply
// (facts.go) under the router's policy lock; a pool whose controller does
// not exist yet gets it on creation.
func (a *admitter) kvTokens(t *state.Table, kv float64) {
	if a == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.kv[t] == kv {
		return
	}
	if kv == 0 {
		delete(a.kv, t)
	} else {
		a.kv[t] = kv
	}
	p := a.pools[t]
	if p == nil {
		return
	}
	before := p.c.Settings().TokenCapacity
	p.c.SetKVTokens(kv)
	if after := p.c.Settings().TokenCapacity; after != before {
		a.log.Info("admission_token_capacity", slog.Float64("kv_tokens", kv), slog.Int64("token_capacity", after))
	}
}
