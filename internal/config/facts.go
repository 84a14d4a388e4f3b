package config

import (
	"encoding/json"
	"fmt"
	"maps"

	"github.com/llm-ring/llm-ring/internal/policy"
)

// withFacts applies c.Facts to the settings s of the named policy: a key
// that is an engine fact takes it unless policies.<name> sets the key.
func (c *Router) withFacts(name string, s policy.Settings) (policy.Settings, error) {
	if c.Facts == (policy.Facts{}) || s == nil {
		return s, nil
	}
	var given map[string]json.RawMessage
	if raw := c.Policies[name]; len(raw) > 0 {
		_ = json.Unmarshal(raw, &given) // Decode has accepted raw: it is an object or null
	}
	policy.ApplyFacts(s, c.Facts, func(key string) bool { _, ok := given[key]; return ok })
	if err := s.Validate(); err != nil {
		return nil, fmt.Errorf("policies.%s: from the engine's facts: %w", name, err)
	}
	return s, nil
}

// setPolicyKey sets one key of policies.<name> to v (valid JSON), keeping
// the other keys as they were given: a key never given stays free to take
// the engine's facts.
func (c *Router) setPolicyKey(name, key string, v json.RawMessage) error {
	obj := map[string]json.RawMessage{}
	if raw := c.Policies[name]; len(raw) > 0 {
		if err := json.Unmarshal(raw, &obj); err != nil || obj == nil {
			obj = map[string]json.RawMessage{}
		}
	}
	obj[key] = v
	b, err := json.Marshal(obj)
	if err != nil {
		return fmt.Errorf("policies.%s.%s: %w", name, key, err)
	}
	pol := maps.Clone(c.Policies)
	if pol == nil {
		pol = map[string]json.RawMessage{}
	}
	pol[name] = b
	c.Policies = pol
	return nil
}

// WithFacts returns a copy of c whose Facts are f (the live router: what a
// pool's replicas report), so that PolicySettings, PoolPolicySettings and
// PoolPolicy apply them to every key the configuration leaves unset. c is
// not changed; the copy shares c's maps, which it only reads.
func (c *Router) WithFacts(f policy.Facts) *Router {
	cp := *c
	cp.Facts = f
	return &cp
}
