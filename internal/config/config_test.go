package config

import (
	"os"
	"strings"
	"testing"

	"github.com/llm-ring/llm-ring/internal/policy"
)

func example(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../config/router.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestErrorsNameTheKey: every way a configuration can be wrong stops with
// an error naming the key.
func TestErrorsNameTheKey(t *testing.T) {
	ex := example(t)
	tests := []struct {
		name string
		edit func(string) string
		want string
	}{
		// A missing top-level key.
		{"missing virtual_nodes", func(s string) string { return strings.Replace(s, "virtual_nodes: 160", "", 1) }, "virtual_nodes: missing"},
		// A missing nested key.
		{"missing ttl", func(s string) string {
			return strings.Replace(s, "  ttl: 30m                   # forget", "  # forget", 1)
		}, "placement_memory.ttl: missing"},
		// A key of the first round's layout, moved under policies.
		{"old epsilon key", func(s string) string { return s + "epsilon: 0.3\n" }, "epsilon: unknown key (moved to policies.bounded.epsilon and policies.llm-aware.epsilon)"},
		// A whole first-round file: its moved keys are reported before the keys it lacks.
		{"first-round file", func(s string) string {
			return "llm_aware: {}\n" + strings.Replace(s, "prefix_index:", "old_prefix_index:", 1)
		}, "llm_aware: unknown key (moved to policies.llm-aware)"},
		// An unknown policy setting names the policy and lists its keys.
		{"unknown policy key", func(s string) string {
			return strings.Replace(s, "    load_unit: requests", "    load_unit: requests\n    epsilonn: 2", 1)
		}, "policies.bounded.epsilonn: unknown key (bounded has epsilon, load_unit)"},
		// Settings for a policy that does not exist.
		{"unknown policy section", func(s string) string { return strings.Replace(s, "policies:", "policies:\n  random: {}", 1) }, "policies.random: unknown policy"},
		// An unknown key, even a plausible one.
		{"unknown key", func(s string) string { return s + "admin_token: x\n" }, "admin_token: unknown key"},
		{"unknown nested key", func(s string) string {
			return strings.Replace(s, "  max_attempts: 3", "  max_attempts: 3\n  retries: 2", 1)
		}, "upstream.retries: unknown key"},
		// Wrong types.
		{"epsilon not a number", func(s string) string { return strings.Replace(s, "epsilon: 0.25", "epsilon: lots", 1) }, "policies.bounded.epsilon: must be a number"},
		{"bool as string", func(s string) string {
			return strings.Replace(s, "cache_aware_load: true", "cache_aware_load: maybe", 1)
		}, "policies.llm-aware.cache_aware_load: must be true or false"},
		{"bad duration", func(s string) string { return strings.Replace(s, "ttl: 30m", "ttl: forever", 1) }, "ttl"},
		// Invalid values.
		{"unknown policy", func(s string) string { return strings.Replace(s, "policy: llm-aware", "policy: random", 1) }, "policy: unknown policy \"random\""},
		{"epsilon zero", func(s string) string { return strings.Replace(s, "epsilon: 0.25", "epsilon: 0", 1) }, "policies.bounded.epsilon: must be > 0"},
		{"bad unit", func(s string) string {
			return strings.Replace(s, "load_unit: requests", "load_unit: bytes", 1)
		}, "policies.bounded.load_unit"},
		{"prefix block too small", func(s string) string { return strings.Replace(s, "block_chars: 256", "block_chars: 4", 1) }, "prefix_index.block_chars"},
		{"bad engine", func(s string) string { return strings.Replace(s, "engine: llamacpp", "engine: tgi", 1) }, `engine: unknown engine "tgi"`},
		{"no engine", func(s string) string { return strings.Replace(s, "engine: llamacpp", "", 1) }, "engine: missing"},
		{"bad signals engine", func(s string) string {
			return strings.Replace(s, "  path: /metrics", "  path: /metrics\n  engine: ollama\n", 1)
		}, `signals.engine: must be one of llamacpp, vllm, sglang, got "ollama"`},
		{"bad replica engine", func(s string) string {
			return strings.Replace(s, `url: "http://127.0.0.1:8082"}`, `url: "http://127.0.0.1:8082", engine: tgi}`, 1)
		}, `discovery.static[1].engine: unknown engine "tgi"`},
		{"bad replica url", func(s string) string { return strings.Replace(s, `"http://127.0.0.1:8081"`, `"127.0.0.1:8081"`, 1) }, "discovery.static[0].url"},
		{"duplicate replica", func(s string) string { return strings.Replace(s, "name: llm-1", "name: llm-0", 1) }, "discovery.static[1].name: duplicate"},
		{"bad mode", func(s string) string { return strings.Replace(s, "mode: static", "mode: consul", 1) }, "discovery.mode"},
		// kubernetes mode needs its block, static mode does not.
		{"kubernetes without block", func(s string) string { return strings.Replace(s, "mode: static", "mode: kubernetes", 1) }, "discovery.kubernetes: missing"},
		// Issue 10's keys: required, typed, validated.
		{"missing server.read_timeout", func(s string) string { return strings.Replace(s, "  read_timeout: 30s", "", 1) }, "server.read_timeout: missing"},
		{"budget under max_body_bytes", func(s string) string {
			return strings.Replace(s, "max_buffered_body_bytes: 67108864", "max_buffered_body_bytes: 1024", 1)
		}, "server.max_buffered_body_bytes: must be ≥ max_body_bytes"},
		{"admin without token", func(s string) string { return strings.Replace(s, `  listen: ""`, `  listen: "127.0.0.1:9090"`, 1) }, "admin.token_file: must be set"},
		{"no upstream idle timeout", func(s string) string { return strings.Replace(s, "idle_timeout: 2m ", "idle_timeout: 0s ", 2) }, "upstream.idle_timeout: must be > 0"},
		{"bad upstream client", func(s string) string {
			return strings.Replace(s, "client: llm-ring", "client: curl", 1)
		}, `upstream.client: must be "llm-ring" or "net/http", got "curl"`},
		{"bad health path", func(s string) string { return strings.Replace(s, `path: ""`, "path: health", 1) }, "health_check.path: must start with /"},
		{"health threshold zero", func(s string) string { return strings.Replace(s, "healthy_threshold: 1", "healthy_threshold: 0", 1) }, "health_check.healthy_threshold"},
		{"max_output_tokens under the default", func(s string) string {
			return strings.Replace(s, "max_output_tokens: 32768", "max_output_tokens: 64", 1)
		}, "default_max_tokens: must be ≤ max_output_tokens (64)"},
		{"negative shutdown_delay", func(s string) string { return strings.Replace(s, "shutdown_delay: 0s", "shutdown_delay: -1s", 1) }, "shutdown_delay: must not be negative"},
		{"not a mapping", func(string) string { return "- a\n- b\n" }, "mapping"},
		{"broken YAML", func(s string) string { return s + "\n  : :\n\t-" }, "YAML"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.edit(ex)))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

// TestKubernetesMode: the static list is not needed, the kubernetes block is.
func TestKubernetesMode(t *testing.T) {
	ex := example(t)
	i := strings.Index(ex, "discovery:")
	k8s := ex[:i] + `discovery:
  mode: kubernetes
  kubernetes: {namespace: llm-ring, service: llm, port_name: http, kubeconfig: ""}
`
	c, err := Parse([]byte(k8s))
	if err != nil {
		t.Fatal(err)
	}
	if c.Discovery.Kubernetes.Service != "llm" {
		t.Errorf("kubernetes block not read: %+v", c.Discovery.Kubernetes)
	}
	if _, err := Parse([]byte(strings.Replace(k8s, "port_name: http, ", "", 1))); err == nil || !strings.Contains(err.Error(), "discovery.kubernetes.port_name: missing") {
		t.Errorf("missing port_name: %v", err)
	}
}

// TestPolicySettings: each policy's section is decoded by its registry row;
// a key not given keeps the policy's default; a policy not listed takes its
// defaults; --set changes one key and validates it.
func TestPolicySettings(t *testing.T) {
	c, err := Parse([]byte(example(t)))
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.PolicySettings("llm-aware")
	if err != nil {
		t.Fatal(err)
	}
	if a := s.(*policy.LLMAware); a.Epsilon != 0.25 || !a.CacheAwareLoad || a.LongPromptTokens != 800 || a.LongCapFactor != 2 {
		t.Errorf("llm-aware settings = %+v", a)
	}
	partial, err := Parse([]byte(strings.Replace(example(t), "    long_cap_factor: 2.0\n", "", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := partial.PolicySettings("llm-aware"); s.(*policy.LLMAware).LongCapFactor != 2 {
		t.Errorf("a key left out does not take its default: %+v", s)
	}
	if err := c.SetPolicySetting("bounded", "load_unit", "tokens"); err != nil {
		t.Fatal(err)
	}
	if s, _ := c.PolicySettings("bounded"); s.(*policy.Bounded).Unit != policy.Tokens || s.(*policy.Bounded).Epsilon != 0.25 {
		t.Errorf("after --set bounded.load_unit=tokens: %+v", s)
	}
	if err := c.SetPolicySetting("llm-aware", "epsilon", "-1"); err == nil || !strings.Contains(err.Error(), "policies.llm-aware.epsilon: must be > 0") {
		t.Errorf("--set llm-aware.epsilon=-1: err = %v", err)
	}
	if err := c.SetPolicySetting("consistent", "epsilon", "1"); err == nil || !strings.Contains(err.Error(), "consistent takes no settings") {
		t.Errorf("--set consistent.epsilon=1: err = %v", err)
	}
	if s := c.StateConfig(); s.VirtualNodes != 160 || s.MaxEntries != 1000000 || s.TTL.Minutes() != 30 {
		t.Errorf("state config = %+v", s)
	}
}

// TestEngineSettings: the replica set's engine gives the health path and
// metric names unless health_check.path or signals.engine name their own;
// a replica naming another engine always gets that engine's; a
// configuration with only signals.engine (before the engine key) keeps
// working.
func TestEngineSettings(t *testing.T) {
	c, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	check := func(what, own, wantEngine, wantPath, wantMetrics string) {
		t.Helper()
		p, path := c.ReplicaEngine(own)
		if p.Name != wantEngine || path != wantPath || c.MetricsPreset(own) != wantMetrics {
			t.Errorf("%s: engine %s, path %s, metrics %q; want %s, %s, %q", what, p.Name, path, c.MetricsPreset(own), wantEngine, wantPath, wantMetrics)
		}
	}
	check("shipped", "", "llamacpp", "/health", "llamacpp")
	check("an Ollama replica", "ollama", "ollama", "/api/version", "")
	c.Engine = "ollama"
	check("engine: ollama", "", "ollama", "/api/version", "")
	check("a vLLM replica among Ollamas", "vllm", "vllm", "/health", "vllm")
	c.HealthCheck.Path, c.Signals.Engine = "/ready", "sglang"
	check("overrides", "", "ollama", "/ready", "sglang")
	check("overrides leave another engine's replica alone", "vllm", "vllm", "/health", "vllm")
	c.Engine, c.Signals.Engine = "", "vllm"
	check("only signals.engine", "", "vllm", "/ready", "vllm")
	if err := c.Validate(); err != nil {
		t.Errorf("a configuration with only signals.engine: %v", err)
	}
}
