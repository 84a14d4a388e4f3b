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
