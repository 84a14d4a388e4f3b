package config

import (
	"encoding/json"
	"testing"

	"github.com/llm-ring/llm-ring/internal/policy"
)

// TestPolicySettingsTakeFacts: a setting that is an engine fact comes from
// the driver's facts unless policies.<name> gives it; a --set of one key
// leaves the others free to take the facts.
func TestPolicySettingsTakeFacts(t *testing.T) {
	c, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	c.Policies = map[string]json.RawMessage{"predictive": json.RawMessage(`{"slots": 8}`)}
	c.Facts = policy.Facts{Slots: 256, CacheTokens: 450560, PrefillTPS: 20000, DecodeTPS: 90}
	s, err := c.PolicySettings("predictive")
	if err != nil {
		t.Fatal(err)
	}
	p := s.(*policy.Predictive)
	if p.Slots != 8 || p.CacheTokens != 450560 || p.PriorPrefill != 20000 {
		t.Errorf("settings %+v: want slots 8 (given), the facts' cache and prefill", p)
	}
	if err := c.SetPolicySetting("predictive", "margin", "0.2"); err != nil {
		t.Fatal(err)
	}
	c.Facts.CacheTokens = 1000000 // facts learned after the --set still apply
	s, err = c.PolicySettings("predictive")
	if err != nil {
		t.Fatal(err)
	}
	if p = s.(*policy.Predictive); p.Margin != 0.2 || p.Slots != 8 || p.CacheTokens != 1000000 {
		t.Errorf("after --set margin: %+v", p)
	}
	if err := c.SetPolicySetting("predictive", "slots", "0"); err == nil {
		t.Error("slots 0 accepted")
	}
	c.Facts = policy.Facts{}
	if s, err = c.PolicySettings("predictive"); err != nil || s.(*policy.Predictive).CacheTokens != policy.DefaultPredictive().CacheTokens {
		t.Errorf("without facts: %+v, %v", s, err)
	}
}

// TestWithFacts: a copy with the facts; the configuration itself keeps
// none, and a pool's configured key wins over the facts.
func TestWithFacts(t *testing.T) {
	c, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	c.Models.Pools = map[string]ModelPool{"m": {Policies: map[string]json.RawMessage{"kv-cost": json.RawMessage(`{"block_size": 64}`)}}}
	w := c.WithFacts(policy.Facts{BlockSize: 32})
	if c.Facts != (policy.Facts{}) || w.Facts.BlockSize != 32 {
		t.Fatalf("facts: config %+v, copy %+v", c.Facts, w.Facts)
	}
	for _, tt := range []struct {
		model string
		want  int
	}{{"", 32}, {"m", 64}} {
		s, err := w.PoolPolicySettings(tt.model, "kv-cost")
		if err != nil {
			t.Fatal(err)
		}
		if got := s.(*policy.KVCost).BlockSize; got != tt.want {
			t.Errorf("pool %q: block_size %d, want %d", tt.model, got, tt.want)
		}
	}
	if s, _ := c.PoolPolicySettings("", "kv-cost"); s.(*policy.KVCost).BlockSize != 16 {
		t.Errorf("the configuration itself took the facts: %+v", s)
	}
}
