package config

import (
	"testing"
)

// TestTwoModelsFile: the README's two-model configuration loads, and it
// says what the README says: two pools' replicas, an adapter, an alias, a
// per-pool policy.
func TestTwoModelsFile(t *testing.T) {
	c, err := Load("../../config/two-models.yaml")
	if err != nil {
		t.Fatal(err)
	}
	pc := c.PoolConfig()
	if pc.Aliases["llama"] != "llama-3.1-8b-instruct" {
		t.Errorf("aliases %v", pc.Aliases)
	}
	if got := c.PoolPolicyName("qwen2.5-7b-instruct"); got != "least-loaded" {
		t.Errorf("qwen's pool policy %q, want least-loaded", got)
	}
	if got := c.PoolPolicyName("llama-3.1-8b-instruct"); got != c.Policy {
		t.Errorf("llama's pool policy %q, want the global %q", got, c.Policy)
	}
	if len(c.Discovery.Static) != 3 || len(c.Discovery.Static[0].Models) != 2 || c.Discovery.Static[0].Models[1].Parent != "llama-3.1-8b-instruct" {
		t.Errorf("static list %+v", c.Discovery.Static)
	}
	if c.Engine != "vllm" || c.Listen != "127.0.0.1:18080" {
		t.Errorf("engine %q, listen %q", c.Engine, c.Listen)
	}
}
