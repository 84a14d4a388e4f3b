package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"github.com/llm-ring/llm-ring/internal/policy"
	"github.com/llm-ring/llm-ring/internal/pool"
	"github.com/llm-ring/llm-ring/internal/state"
	"github.com/llm-ring/llm-ring/internal/strict"
)

// Models is the optional `models:` section of router.yaml (issue 23: many
// models behind one router, docs/pools.md). Every key is optional; with
// none, every replica whose model list is unknown serves whatever a request
// asks for (one catch-all pool), as before pools.
//
//	models:
//	  default: llama-3.1-8b-instruct   # a request without a model
//	  aliases: {llama: llama-3.1-8b-instruct}
//	  pools:                           # per model; absent keys take the global ones
//	    llama-3.1-8b-instruct:
//	      policy: llm-aware
//	      policies: {llm-aware: {epsilon: 0.5}}
//	      adapters: [sql-lora, chat-lora]
//	  rewrites:
//	    - from: gpt-4o
//	      to: [{model: llama-3.1-8b-instruct, weight: 90}, {model: llama-3.3-70b-instruct, weight: 10}]
//	  max_model_labels: 16
//	  adapter_affinity: true
type Models struct {
	Default string            `json:"default" cfg:"optional"`
	Aliases map[string]string `json:"aliases" cfg:"optional"`
	// Pools holds per-model settings (checked by checkModels: a map's
	// values are not reached by the strict walk).
	Pools          map[string]ModelPool `json:"pools" cfg:"optional"`
	Rewrites       []ModelRewrite       `json:"rewrites" cfg:"optional"`
	MaxModelLabels int                  `json:"max_model_labels" cfg:"optional"`
	// AdapterAffinity: absent means true; false routes as if requests named
	// no adapter (the baseline of the measurements).
	AdapterAffinity *bool `json:"adapter_affinity" cfg:"optional"`
}

// ModelPool is one model's pool settings: its policy and the policies'
// settings over the global ones, and its LoRA adapters known in advance.
type ModelPool struct {
	Policy   string                     `json:"policy" cfg:"optional"`
	Policies map[string]json.RawMessage `json:"policies" cfg:"optional"`
	Adapters []string                   `json:"adapters" cfg:"optional"`
}

// ModelRewrite sends requests for From to its targets, split by weight per
// conversation.
type ModelRewrite struct {
	From string          `json:"from"`
	To   []RewriteTarget `json:"to"`
}

// RewriteTarget is one target of a rewrite.
type RewriteTarget struct {
	Model  string  `json:"model"`
	Weight float64 `json:"weight"`
}

// AdapterAffinityOn reports adapter_affinity (true when absent).
func (m Models) AdapterAffinityOn() bool { return m.AdapterAffinity == nil || *m.AdapterAffinity }

// checkModels is the strict decoder's hook for models.pools: each pool's
// settings are decoded strictly on their own, errors naming the key
// (models.pools.NAME.KEY).
func checkModels(raw any, t reflect.Type, path string) (bool, error) {
	switch t {
	case reflect.TypeOf(ModelRewrite{}), reflect.TypeOf(RewriteTarget{}):
		return false, checkScalars(raw, t, path)
	case reflect.TypeOf(map[string]ModelPool{}):
	default:
		return false, nil
	}
	m, ok := raw.(map[string]any)
	if !ok {
		return false, nil // the decoder names the type error
	}
	for _, name := range slices.Sorted(maps.Keys(m)) {
		key := strings.TrimPrefix(path, ".") + "." + name
		if m[name] == nil {
			return true, fmt.Errorf("%s: must be a mapping, not empty", key)
		}
		b, err := json.Marshal(m[name])
		if err != nil {
			return true, fmt.Errorf("%s: %v", key, err)
		}
		var p ModelPool
		if err := strict.Decode(b, &p, checkKey); err != nil {
			return true, fmt.Errorf("%s.%w", key, err)
		}
	}
	return false, nil
}

// checkScalars names the key of a scalar of the wrong type in a list's
// entry (encoding/json's error would drop the list index).
func checkScalars(raw any, t reflect.Type, path string) error {
	m, ok := raw.(map[string]any)
	if !ok {
		return nil
	}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		v, present := m[name]
		if !present {
			continue
		}
		var good bool
		switch f.Type.Kind() {
		case reflect.String:
			_, good = v.(string)
		case reflect.Float64:
			_, good = v.(float64)
		default:
			continue
		}
		if !good {
			want := map[reflect.Kind]string{reflect.String: "a string", reflect.Float64: "a number"}[f.Type.Kind()]
			return fmt.Errorf("%s: must be %s, not %v", strict.Join(strings.TrimPrefix(path, "."), name), want, v)
		}
	}
	return nil
}

// PoolConfig returns the pools' configuration: the models section resolved
// (a pool's adapters as adapter → base model).
func (c *Router) PoolConfig() pool.Config {
	m := c.Models
	pc := pool.Config{Default: m.Default, Aliases: m.Aliases, MaxLabels: m.MaxModelLabels}
	for _, rw := range m.Rewrites {
		r := pool.Rewrite{From: rw.From}
		for _, tg := range rw.To {
			r.Targets = append(r.Targets, pool.Target{Model: tg.Model, Weight: tg.Weight})
		}
		pc.Rewrites = append(pc.Rewrites, r)
	}
	for _, base := range slices.Sorted(maps.Keys(m.Pools)) {
		for _, a := range m.Pools[base].Adapters {
			if pc.Adapters == nil {
				pc.Adapters = map[string]string{}
			}
			if _, dup := pc.Adapters[a]; !dup {
				pc.Adapters[a] = base
			}
		}
	}
	return pc
}

// PoolPolicyName is the policy of model's pool: models.pools.MODEL.policy,
// else the global policy.
func (c *Router) PoolPolicyName(model string) string {
	if p := c.Models.Pools[model].Policy; p != "" {
		return p
	}
	return c.Policy
}

// PoolPolicySettings returns the settings of policy name in model's pool:
// the policy's defaults, the global policies.NAME on top, then
// models.pools.MODEL.policies.NAME. Errors name the key.
func (c *Router) PoolPolicySettings(model, name string) (policy.Settings, error) {
	base, err := c.PolicySettings(name)
	if err != nil {
		return nil, err
	}
	raw, ok := c.Models.Pools[model].Policies[name]
	if !ok {
		return base, nil
	}
	sp, err := policy.Lookup(name)
	if err != nil {
		return nil, err
	}
	s, err := sp.Decode(base, raw)
	if err != nil {
		return nil, fmt.Errorf("models.pools.%s.policies.%s.%w", model, name, err)
	}
	return s, nil
}

// PoolPolicy returns a new instance of model's pool policy with its
// settings ("" the catch-all pool: the global policy).
func (c *Router) PoolPolicy(model string) (policy.Policy, error) {
	name := c.PoolPolicyName(model)
	s, err := c.PoolPolicySettings(model, name)
	if err != nil {
		return nil, err
	}
	return policy.New(name, s)
}

// NewTable returns the constructor of each pool's routing table: the
// global routing-state settings (StateConfig, with adapter_affinity) and
// the pool's policy and settings. extra, when set, adjusts the state
// configuration of each pool (a driver's indexers).
func (c *Router) NewTable(extra func(model string, cfg *state.Config)) pool.NewTable {
	return func(model string) (*state.Table, error) {
		p, err := c.PoolPolicy(model)
		if err != nil {
			return nil, fmt.Errorf("pool %q: %w", model, err)
		}
		cfg := c.StateConfig()
		if extra != nil {
			extra(model, &cfg)
		}
		return state.New(cfg, p), nil
	}
}

// NewPools returns the pool set the configuration describes (no replicas
// yet): PoolConfig with NewTable(extra).
func (c *Router) NewPools(extra func(model string, cfg *state.Config)) (*pool.Set, error) {
	s, err := pool.New(c.PoolConfig(), c.NewTable(extra))
	if err != nil {
		return nil, fmt.Errorf("models.%w", err)
	}
	return s, nil
}

// ValidateModels checks the models section; errors name the key
// (models.rewrites[0].to[1].weight: must be > 0).
func (c *Router) ValidateModels() error {
	m := c.Models
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", key, fmt.Sprintf(format, args...)))
	}
	if m.MaxModelLabels < 0 || m.MaxModelLabels > 1000 {
		bad("models.max_model_labels", "must be between 0 and 1000 (0: %d), got %d", pool.DefaultMaxLabels, m.MaxModelLabels)
	}
	adapterOf := map[string]string{}
	for _, model := range slices.Sorted(maps.Keys(m.Pools)) {
		key := "models.pools." + model
		if strings.TrimSpace(model) == "" {
			bad("models.pools", "a pool needs a model name")
			continue
		}
		if target, alias := m.Aliases[model]; alias {
			bad(key, "%q is an alias: configure the pool of its model, %s", model, target)
		}
		errs = append(errs, c.validatePool(model))
		for i, a := range m.Pools[model].Adapters {
			akey := fmt.Sprintf("%s.adapters[%d]", key, i)
			switch base, dup := adapterOf[a]; {
			case strings.TrimSpace(a) == "":
				bad(akey, "must not be empty")
			case dup:
				bad(akey, "%q is already an adapter of %s", a, base)
			case a == model:
				bad(akey, "%q is the pool's own model", a)
			default:
				if _, isPool := m.Pools[a]; isPool {
					bad(akey, "%q is a model with its own pool", a)
				}
				adapterOf[a] = model
			}
		}
	}
	if err := c.PoolConfig().Validate(); err != nil {
		errs = append(errs, prefixEach("models.", err))
	}
	return errors.Join(errs...)
}

// validatePool checks one pool's policy and its settings.
func (c *Router) validatePool(model string) error {
	p := c.Models.Pools[model]
	key := "models.pools." + model
	if p.Policy != "" {
		if _, err := policy.Lookup(p.Policy); err != nil {
			return fmt.Errorf("%s.policy: %v", key, err)
		}
	}
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(p.Policies)) {
		if _, err := policy.Lookup(name); err != nil {
			errs = append(errs, fmt.Errorf("%s.policies.%s: %v", key, name, err))
			continue
		}
		if _, err := c.PoolPolicySettings(model, name); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// prefixEach prefixes every line of a joined error (one rule per line).
func prefixEach(prefix string, err error) error {
	var out []error
	for line := range strings.SplitSeq(err.Error(), "\n") {
		out = append(out, errors.New(prefix+line))
	}
	return errors.Join(out...)
}
