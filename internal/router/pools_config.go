package router

import (
	"github.com/llm-ring/llm-ring/internal/policy"
	"github.com/llm-ring/llm-ring/internal/pool"
	"github.com/llm-ring/llm-ring/internal/state"
)

// poolConfig is the configuration's models section as the pool.Set reads
// it (aliases, default, rewrites, adapters, the label bound).
func (r *Router) poolConfig() (pool.Config, error) { return r.cfg.PoolConfig(), nil }

// poolTable is a new pool's table: the configured state settings and the
// pool's policy (models.pools.MODEL over the global settings).
func (r *Router) poolTable(model string) (*state.Table, error) { return r.cfg.NewTable(nil)(model) }

// poolPolicySettings are policy name's configured settings for model's
// pool (a PUT /admin/policy that switches the policy starts from them).
func (r *Router) poolPolicySettings(model, name string) (policy.Settings, error) {
	return r.factsConfig(model).PoolPolicySettings(model, name)
}
