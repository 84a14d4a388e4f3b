package config

import (
	"slices"
	"strings"
	"testing"

	"github.com/llm-ring/llm-ring/internal/policy"
	"github.com/llm-ring/llm-ring/internal/pool"
	"github.com/llm-ring/llm-ring/internal/replicaset"
	"github.com/llm-ring/llm-ring/internal/state"
)

// twoModels is a models section as docs/pools.md shows it.
const twoModels = `
models:
  default: llama
  aliases: {llama: llama-8b}
  pools:
    llama-8b:
      policy: bounded
      policies: {bounded: {epsilon: 0.5}}
      adapters: [sql-lora, chat-lora]
    qwen:
      policies: {llm-aware: {long_cap_factor: 3}}
  rewrites:
    - from: gpt-4o
      to: [{model: llama-8b, weight: 90}, {model: llama-70b, weight: 10}]
  max_model_labels: 4
  adapter_affinity: false
`

func withModels(t *testing.T, section string) (*Router, error) {
	t.Helper()
	return Parse([]byte(example(t) + section))
}

// TestModelsLegacy: the shipped configuration has no models section: one
// catch-all pool, adapter affinity on, the global policy.
func TestModelsLegacy(t *testing.T) {
	c, err := Parse([]byte(example(t)))
	if err != nil {
		t.Fatal(err)
	}
	if !c.Models.AdapterAffinityOn() || !c.StateConfig().AdapterAffinity {
		t.Error("adapter_affinity absent: want true")
	}
	pc := c.PoolConfig()
	if pc.Default != "" || len(pc.Aliases)+len(pc.Rewrites)+len(pc.Adapters) != 0 || pc.MaxLabels != 0 {
		t.Errorf("no models section: pool config %+v, want empty", pc)
	}
	s, err := c.NewPools(nil)
	if err != nil {
		t.Fatal(err)
	}
	s.SetReplicas(c.Discovery.Static)
	rt, err := s.Resolve("whatever", 1)
	if err != nil || rt.Pool.Model() != "" || rt.Rewritten || rt.Pool.Table().Policy().Name() != "llm-aware" {
		t.Fatalf("legacy: %+v, %v; want the catch-all pool with llm-aware, untouched", rt, err)
	}
	if n := len(rt.Pool.Table().Status().Replicas); n != 3 {
		t.Errorf("catch-all pool has %d replicas, want the 3 static ones", n)
	}
}

// TestModelsSection: the section decodes into pool.Config, and each
// pool's table gets its policy with the pool's settings over the global
// ones.
func TestModelsSection(t *testing.T) {
	c, err := withModels(t, twoModels)
	if err != nil {
		t.Fatal(err)
	}
	pc := c.PoolConfig()
	want := pool.Config{Default: "llama", Aliases: map[string]string{"llama": "llama-8b"}, MaxLabels: 4,
		Adapters: map[string]string{"sql-lora": "llama-8b", "chat-lora": "llama-8b"},
		Rewrites: []pool.Rewrite{{From: "gpt-4o", Targets: []pool.Target{{Model: "llama-8b", Weight: 90}, {Model: "llama-70b", Weight: 10}}}}}
	if pc.Default != want.Default || pc.MaxLabels != 4 || len(pc.Aliases) != 1 || pc.Aliases["llama"] != "llama-8b" ||
		len(pc.Adapters) != 2 || pc.Adapters["sql-lora"] != "llama-8b" || pc.Adapters["chat-lora"] != "llama-8b" ||
		len(pc.Rewrites) != 1 || pc.Rewrites[0].From != "gpt-4o" || !slices.Equal(pc.Rewrites[0].Targets, want.Rewrites[0].Targets) {
		t.Errorf("pool config %+v, want %+v", pc, want)
	}
	if c.StateConfig().AdapterAffinity {
		t.Error("adapter_affinity: false not applied")
	}
	newTable := c.NewTable(nil)
	llama, err := newTable("llama-8b")
	if err != nil {
		t.Fatal(err)
	}
	if b, ok := llama.Policy().(*policy.Bounded); !ok || b.Epsilon != 0.5 || b.Unit != policy.Requests {
		t.Errorf("llama-8b pool policy %#v, want bounded with epsilon 0.5 and the global load_unit", llama.Policy())
	}
	s, err := c.PoolPolicySettings("qwen", "llm-aware")
	if err != nil {
		t.Fatal(err)
	}
	if a := s.(*policy.LLMAware); a.LongCapFactor != 3 || a.Epsilon != 0.25 || a.LongPromptTokens != 800 {
		t.Errorf("qwen llm-aware settings %+v, want long_cap_factor 3 over the global ones", a)
	}
	if name := c.PoolPolicyName("qwen"); name != "llm-aware" {
		t.Errorf("qwen's policy %q, want the global llm-aware", name)
	}
	if name := c.PoolPolicyName(""); name != "llm-aware" {
		t.Errorf("catch-all policy %q, want the global llm-aware", name)
	}
	// A driver's adjustment reaches each pool's state configuration.
	var seen []string
	set, err := c.NewPools(func(model string, cfg *state.Config) {
		seen = append(seen, model)
		cfg.AdapterSpill = -1
	})
	if err != nil {
		t.Fatal(err)
	}
	set.SetReplicas([]replicaset.Replica{{Name: "a", URL: "http://a", Models: []replicaset.Model{{Name: "qwen"}}}})
	if !slices.Equal(seen, []string{"", "qwen"}) {
		t.Errorf("extra called for %q, want the catch-all, then qwen", seen)
	}
	if p := set.Pool("qwen").Table().Policy(); p.Name() != "llm-aware" {
		t.Errorf("qwen pool policy %s, want llm-aware", p.Name())
	}
}

// TestStaticReplicaModels: static replicas may list their models and
// adapters; the lists reach the pools.
func TestStaticReplicaModels(t *testing.T) {
	ex := strings.Replace(example(t), `{name: llm-0, url: "http://127.0.0.1:8081"}`,
		`{name: llm-0, url: "http://127.0.0.1:8081", models: [{name: llama-8b}, {name: sql-lora, parent: llama-8b}]}`, 1)
	ex = strings.Replace(ex, `{name: llm-1, url: "http://127.0.0.1:8082"}`, `{name: llm-1, url: "http://127.0.0.1:8082", models: [{name: qwen}]}`, 1)
	c, err := Parse([]byte(ex))
	if err != nil {
		t.Fatal(err)
	}
	want := []replicaset.Model{{Name: "llama-8b"}, {Name: "sql-lora", Parent: "llama-8b"}}
	if got := c.Discovery.Static[0].Models; !slices.Equal(got, want) {
		t.Fatalf("llm-0 models %+v, want %+v", got, want)
	}
	if c.Discovery.Static[2].Models != nil {
		t.Fatalf("llm-2 lists none: models %+v, want nil (unknown: the catch-all pool)", c.Discovery.Static[2].Models)
	}
	s, err := c.NewPools(nil)
	if err != nil {
		t.Fatal(err)
	}
	s.SetReplicas(c.Discovery.Static)
	if rt, err := s.Resolve("sql-lora", 0); err != nil || rt.Pool.Model() != "llama-8b" || rt.Adapter != "sql-lora" {
		t.Errorf("sql-lora: %+v, %v; want llama-8b's pool, adapter sql-lora", rt, err)
	}
	for _, tt := range []struct{ edit, want string }{
		{`{name: qwen}`, ""},
		// Decoded strictly (the values are checked with the discovery keys,
		// discovery_models.go).
		{`{parent: qwen}`, "discovery.static[1].models[0].name: missing"},
		{`{name: qwen, base: x}`, "discovery.static[1].models[0].base: unknown key"},
	} {
		_, err := Parse([]byte(strings.Replace(ex, `[{name: qwen}]`, "["+tt.edit+"]", 1)))
		if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("models [%s]: err = %v, want %q", tt.edit, err, tt.want)
		}
	}
}

// TestModelsErrorsNameTheKey: every way the models section can be wrong
// stops with an error naming the key.
func TestModelsErrorsNameTheKey(t *testing.T) {
	tests := []struct {
		name, edit, want string
	}{
		{"zero weight", strings.Replace(twoModels, "weight: 10", "weight: 0", 1), "models.rewrites[0].to[1].weight: must be > 0"},
		{"from not a string", strings.Replace(twoModels, "from: gpt-4o", "from: [gpt-4o]", 1), "models.rewrites[0].from: must be a string"},
		{"weight not a number", strings.Replace(twoModels, "weight: 10", "weight: lots", 1), "models.rewrites[0].to[1].weight: must be a number"},
		{"missing weight", strings.Replace(twoModels, ", weight: 10", "", 1), "models.rewrites[0].to[1].weight: missing"},
		{"missing from", strings.Replace(twoModels, "- from: gpt-4o\n      to:", "- to:", 1), "models.rewrites[0].from: missing"},
		{"unknown rewrite key", strings.Replace(twoModels, "- from: gpt-4o", "- from: gpt-4o\n      match: x", 1), "models.rewrites[0].match: unknown key"},
		{"target is an alias", strings.Replace(twoModels, "{model: llama-70b", "{model: llama", 1), `models.rewrites[0].to[1].model: "llama" is an alias`},
		{"cycle", strings.Replace(twoModels, "  max_model_labels:", "    - from: llama-8b\n      to: [{model: gpt-4o, weight: 1}]\n  max_model_labels:", 1),
			`models.rewrites[0].to[0].model: "llama-8b" is itself rewritten (rewrites[1])`},
		{"duplicate from", strings.Replace(twoModels, "  max_model_labels:", "    - from: gpt-4o\n      to: [{model: qwen, weight: 1}]\n  max_model_labels:", 1), `models.rewrites[1].from: "gpt-4o" is already rewritten by rewrites[0]`},
		{"alias chain", strings.Replace(twoModels, "aliases: {llama: llama-8b}", "aliases: {llama: l8, l8: llama-8b}", 1), `models.aliases.llama: "l8" is itself an alias`},
		{"unknown models key", twoModels + "  canary: 10\n", "models.canary: unknown key"},
		{"unknown pool key", strings.Replace(twoModels, "      policy: bounded", "      policy: bounded\n      weight: 3", 1), "models.pools.llama-8b.weight: unknown key"},
		{"pool policy unknown", strings.Replace(twoModels, "policy: bounded", "policy: random", 1), `models.pools.llama-8b.policy: unknown policy "random"`},
		{"pool policy setting", strings.Replace(twoModels, "epsilon: 0.5", "epsilon: -1", 1), "models.pools.llama-8b.policies.bounded.epsilon: must be > 0"},
		{"pool policy setting unknown", strings.Replace(twoModels, "epsilon: 0.5", "epsilonn: 1", 1), "models.pools.llama-8b.policies.bounded.epsilonn: unknown key"},
		{"pool policies for an unknown policy", strings.Replace(twoModels, "{llm-aware: {long_cap_factor: 3}}", "{random: {}}", 1), "models.pools.qwen.policies.random: unknown policy"},
		{"pool not a mapping", strings.Replace(twoModels, "    qwen:\n      policies: {llm-aware: {long_cap_factor: 3}}", "    qwen:", 1), "models.pools.qwen: must be a mapping"},
		{"adapters not a list", strings.Replace(twoModels, "adapters: [sql-lora, chat-lora]", "adapters: sql-lora", 1), "models.pools.llama-8b.adapters: must be a list"},
		{"adapter twice", strings.Replace(twoModels, "    qwen:\n", "    qwen:\n      adapters: [sql-lora]\n", 1), `models.pools.qwen.adapters[0]: "sql-lora" is already an adapter of llama-8b`},
		{"adapter empty", strings.Replace(twoModels, "[sql-lora, chat-lora]", `[sql-lora, ""]`, 1), "models.pools.llama-8b.adapters[1]: must not be empty"},
		{"adapter is a pool", strings.Replace(twoModels, "[sql-lora, chat-lora]", "[qwen]", 1), `models.pools.llama-8b.adapters[0]: "qwen" is a model with its own pool`},
		{"pool of an alias", strings.Replace(twoModels, "    qwen:\n", "    llama:\n      policy: bounded\n    qwen:\n", 1), `models.pools.llama: "llama" is an alias: configure the pool of its model, llama-8b`},
		{"labels negative", strings.Replace(twoModels, "max_model_labels: 4", "max_model_labels: -1", 1), "models.max_model_labels: must be between 0 and 1000"},
		{"affinity not a bool", strings.Replace(twoModels, "adapter_affinity: false", "adapter_affinity: sometimes", 1), "models.adapter_affinity: must be true or false"},
		{"empty section", "\nmodels:\n", "models: must be a mapping, not empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := withModels(t, tt.edit)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

// TestModelsExample: the commented models example of router.yaml is valid.
func TestModelsExample(t *testing.T) {
	ex := example(t)
	i := strings.Index(ex, "# models:")
	j := strings.Index(ex, "cluster:")
	if i < 0 || j < i {
		t.Fatal("router.yaml has no commented models example before cluster:")
	}
	var b strings.Builder
	for _, line := range strings.Split(ex[i:j], "\n") {
		if rest, ok := strings.CutPrefix(line, "# "); ok {
			b.WriteString(rest + "\n")
		}
	}
	c, err := Parse([]byte(ex + b.String()))
	if err != nil {
		t.Fatalf("the documented models example: %v\n%s", err, b.String())
	}
	if c.Models.Default != "llama-3.1-8b-instruct" || len(c.Models.Rewrites) != 1 || len(c.Models.Pools) != 1 {
		t.Errorf("models example read as %+v", c.Models)
	}
	if _, err := c.NewPools(nil); err != nil {
		t.Errorf("pools from the example: %v", err)
	}
}
