// Package config loads llm-ring's router configuration: one YAML file, no
// defaults in code. Every key the chosen mode uses must be present; a
// missing, unknown or invalid key is an error that names the key
// (for example "llm_aware.long_cap_factor: missing").
package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"reflect"
	"slices"
	"strings"
	"time"

	shipped "github.com/llm-ring/llm-ring/config"

	"github.com/llm-ring/llm-ring/internal/policy"
	"github.com/llm-ring/llm-ring/internal/replicaset"
	"github.com/llm-ring/llm-ring/internal/state"
	"github.com/llm-ring/llm-ring/internal/strict"
)

// Router is the router's configuration (config/router.yaml).
type Router struct {
	Listen string `json:"listen"`
	Policy string `json:"policy"`
	// Policies holds each policy's settings, keyed by policy name; the keys
	// are the policy's own (internal/policy's registry decodes and
	// validates them). A policy not listed, and a key not given, take the
	// policy's documented defaults.
	Policies        map[string]json.RawMessage `json:"policies" cfg:"optional"`
	VirtualNodes    int                        `json:"virtual_nodes"`
	PlacementMemory PlacementMemory            `json:"placement_memory"`
	PrefixIndex     PrefixIndex                `json:"prefix_index"`
	Signals         Signals                    `json:"signals"`
	CharsPerToken   float64                    `json:"chars_per_token"`
	// DefaultMaxTokens is the expected output of a request that names none.
	DefaultMaxTokens int `json:"default_max_tokens"`
	// MaxOutputTokens caps max_tokens / n_predict: a request asking for
	// more is a 400 naming the field.
	MaxOutputTokens int             `json:"max_output_tokens"`
	ConversationKey ConversationKey `json:"conversation_key"`
	MaxBodyBytes    int64           `json:"max_body_bytes"`
	Server          Server          `json:"server"`
	Admin           Admin           `json:"admin"`
	Upstream        Upstream        `json:"upstream"`
	HealthCheck     HealthCheck     `json:"health_check"`
	// Engine names the replicas' engine (llamacpp, vllm, sglang or ollama;
	// package engine's presets): their health path and metric names, unless
	// health_check.path or signals.engine name their own. A replica of the
	// static list may name its own engine. Absent, signals.engine names it
	// (the key's place before engines had presets).
	Engine string `json:"engine" cfg:"optional"`
	// ShutdownDelay: on SIGTERM, readiness fails at once but the listener
	// keeps serving for this long (Kubernetes removes the endpoint), then
	// in-flight requests drain for up to ShutdownGrace.
	ShutdownDelay Duration  `json:"shutdown_delay"`
	ShutdownGrace Duration  `json:"shutdown_grace"`
	Discovery     Discovery `json:"discovery"`
	// Cluster lets several router instances route as one (gossip).
	Cluster Cluster `json:"cluster"`
	Tracing Tracing `json:"tracing" cfg:"optional"` // operator (issue 25): tracing.go
	// Admission is admission control in front of routing (issue 22): admission.go.
	Admission Admission `json:"admission" cfg:"optional"`
	// Models: pools by model, aliases, rewrites, adapters (issue 23): models.go.
	Models Models `json:"models" cfg:"optional"`
	// Facts are what the driver knows of the engine (the simulator: the
	// replica preset's model); policy settings that are engine facts take
	// them unless policies.<name> sets them (facts.go). Not configured.
	Facts policy.Facts `json:"-"`
}

// PrefixIndex sizes the approximate prefix index: per replica, the prompt
// blocks it was sent, LRU-evicted at a capacity that approximates its cache.
type PrefixIndex struct {
	// BlockChars is the block size in characters (the router has no
	// tokenizer).
	BlockChars int `json:"block_chars"`
	// CapacityTokens approximates one replica's prompt cache, in tokens.
	CapacityTokens int64 `json:"capacity_tokens"`
	// TTL forgets a block not sent for this long.
	TTL Duration `json:"ttl"`
}

// Signals configures what replicas report about themselves (their
// Prometheus /metrics, scraped on an interval).
type Signals struct {
	// Interval between scrapes of one replica; 0 disables scraping (the
	// signals stay unknown).
	Interval Duration `json:"interval"`
	Timeout  Duration `json:"timeout"`
	Path     string   `json:"path"`
	// Engine names the metric preset (llamacpp, vllm or sglang); absent or
	// "", the engine's own (none for ollama: its replicas are not scraped).
	Engine string `json:"engine" cfg:"optional"`
}

// SignalEngines are the metric presets signals.engine may name.
var SignalEngines = []string{"llamacpp", "vllm", "sglang"}

// PlacementMemory bounds the router's memory of where conversations were served.
type PlacementMemory struct {
	MaxEntries int      `json:"max_entries"`
	TTL        Duration `json:"ttl"`
}

// ConversationKey says how a request's conversation is identified.
type ConversationKey struct {
	Headers     []string `json:"headers"`
	BodyField   string   `json:"body_field"`
	PrefixChars int      `json:"prefix_chars"`
}

// Upstream holds the settings for talking to replicas.
type Upstream struct {
	DialTimeout     Duration `json:"dial_timeout"`
	ResponseTimeout Duration `json:"response_timeout"`
	MaxAttempts     int      `json:"max_attempts"`
	// IdleTimeout ends an answer from which no byte came for this long.
	IdleTimeout Duration `json:"idle_timeout"`
	// Client is the HTTP client to the replicas: "llm-ring" (absent: the
	// router's own HTTP/1.1 client, internal/h1, which does each exchange
	// on the request's goroutine) or "net/http" (Go's Transport).
	Client string `json:"client,omitempty" cfg:"optional"`
}

// The upstream.client values.
const (
	ClientOwn     = "llm-ring"
	ClientNetHTTP = "net/http"
)

// Discovery says where the replica set comes from, and where each
// replica's models come from (issue 23: pools by model; the model_* keys
// are optional, see discovery_models.go).
type Discovery struct {
	Mode       string               `json:"mode"`
	Static     []replicaset.Replica `json:"static,omitempty" cfg:"mode=static"`
	Kubernetes *Kubernetes          `json:"kubernetes,omitempty" cfg:"mode=kubernetes"`
	// ModelSource is replicas, labels, static or none (absent: none).
	ModelSource string `json:"model_source,omitempty" cfg:"optional"`
	// ModelRefresh is the interval between polls of a replica's model list
	// (absent: 30s).
	ModelRefresh *Duration `json:"model_refresh,omitempty" cfg:"optional"`
	// ModelLabel is the Kubernetes label naming a replica's model (absent:
	// llm-ring.io/model); the annotation "<model_label>s" lists several.
	ModelLabel string `json:"model_label,omitempty" cfg:"optional"`
}

// Kubernetes configures EndpointSlice discovery.
type Kubernetes struct {
	// Namespace and Service select the EndpointSlices labelled
	// kubernetes.io/service-name=<Service>.
	Namespace string `json:"namespace"`
	Service   string `json:"service"`
	// PortName is the EndpointSlice port whose number forms the replica URL.
	PortName string `json:"port_name"`
	// Kubeconfig is a kubeconfig path; "" means in-cluster configuration.
	Kubeconfig string `json:"kubeconfig"`
}

// PolicySettings returns the settings of the named policy: its defaults
// with the keys of policies.<name> on top. Errors name the key.
func (c *Router) PolicySettings(name string) (policy.Settings, error) {
	sp, err := policy.Lookup(name)
	if err != nil {
		return nil, err
	}
	s, err := sp.Decode(nil, c.Policies[name])
	if err != nil {
		return nil, fmt.Errorf("policies.%s.%w", name, err)
	}
	return c.withFacts(name, s)
}

// SetPolicySetting sets one key of a policy's settings (as `llm-ring sim
// --set NAME.KEY=VALUE` does); value is JSON, or a bare string. The result
// is validated; errors name the key.
func (c *Router) SetPolicySetting(name, key, value string) error {
	sp, err := policy.Lookup(name)
	if err != nil {
		return err
	}
	base, err := c.PolicySettings(name)
	if err != nil {
		return err
	}
	v := json.RawMessage(value)
	if !json.Valid(v) {
		v, _ = json.Marshal(value)
	}
	patch, _ := json.Marshal(map[string]json.RawMessage{key: v})
	if _, err := sp.Decode(base, patch); err != nil {
		return fmt.Errorf("policies.%s.%w", name, err)
	}
	return c.setPolicyKey(name, key, v)
}

// StateConfig returns the routing-state settings of c.
func (c *Router) StateConfig() state.Config {
	return state.Config{
		VirtualNodes:  c.VirtualNodes,
		CharsPerToken: c.CharsPerToken,
		MaxEntries:    c.PlacementMemory.MaxEntries,
		TTL:           c.PlacementMemory.TTL.D(),
		Prefix: state.PrefixConfig{
			BlockChars:     c.PrefixIndex.BlockChars,
			CapacityTokens: c.PrefixIndex.CapacityTokens,
			TTL:            c.PrefixIndex.TTL.D(),
		},
		AdapterAffinity: c.Models.AdapterAffinityOn(),
	}
}

// NewPolicy returns the configured policy.
func (c *Router) NewPolicy() (policy.Policy, error) {
	s, err := c.PolicySettings(c.Policy)
	if err != nil {
		return nil, err
	}
	return policy.New(c.Policy, s)
}

// Duration is a time.Duration written as a Go duration string ("30s", "10m").
type Duration time.Duration

// UnmarshalJSON accepts a duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("must be a duration string such as \"30s\"")
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("invalid duration %q", s)
	}
	*d = Duration(v)
	return nil
}

// MarshalJSON writes the duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// D returns the time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// Load reads and validates a router configuration file.
func Load(path string) (*Router, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	c, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// Default returns the shipped configuration (config/router.yaml, embedded
// in the binary): every setting a router started in-process uses unless
// told otherwise.
func Default() (*Router, error) {
	c, err := Parse(shipped.RouterYAML)
	if err != nil {
		return nil, fmt.Errorf("config/router.yaml: %w", err)
	}
	return c, nil
}

// Parse decodes and validates a router configuration.
func Parse(data []byte) (*Router, error) {
	var c Router
	if err := strict.Decode(data, &c, checkKey); err != nil {
		return nil, err
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

// checkKey is the configuration's hook into the strict decoder: a duration
// must be a duration string, and a first-round file is told where its keys
// moved before anything else (its other missing keys would be reported
// first otherwise).
func checkKey(raw any, t reflect.Type, path string) (bool, error) {
	if handled, err := checkModels(raw, t, path); handled || err != nil {
		return handled, err
	}
	switch t {
	case reflect.TypeOf(Duration(0)):
		str, ok := raw.(string)
		if !ok {
			return true, fmt.Errorf("%s: must be a duration such as \"30s\"", strings.TrimPrefix(path, "."))
		}
		if _, err := time.ParseDuration(str); err != nil {
			return true, fmt.Errorf("%s: invalid duration %q (want e.g. \"30s\", \"10m\")", strings.TrimPrefix(path, "."), str)
		}
		return true, nil
	case reflect.TypeOf(Router{}):
		m, _ := raw.(map[string]any)
		for _, k := range slices.Sorted(maps.Keys(movedKeys)) {
			if _, ok := m[k]; ok {
				return true, fmt.Errorf("%s: unknown key (moved to %s)", k, movedKeys[k])
			}
		}
	}
	return false, nil
}

// validateService checks a reference to a Service's EndpointSlices (the
// replicas' for discovery, the routers' own for cluster peers).
func validateService(key, namespace, service, portName string, bad func(key, format string, args ...any)) {
	if namespace == "" {
		bad(key+".namespace", "must not be empty")
	}
	if service == "" {
		bad(key+".service", "must not be empty")
	}
	if portName == "" {
		bad(key+".port_name", "must not be empty")
	}
}

// movedKeys are the first round's policy keys and where they live now, so
// that an old configuration file gets a useful error.
var movedKeys = map[string]string{
	"epsilon":           "policies.bounded.epsilon and policies.llm-aware.epsilon",
	"bounded_load_unit": "policies.bounded.load_unit",
	"llm_aware":         "policies.llm-aware",
}

// ValidateRouting checks the keys that shape routing decisions, the ones the
// simulator uses too (policy and its settings, ring, placement memory,
// prefix index, token estimate). Errors name the key.
func (c *Router) ValidateRouting() error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", key, fmt.Sprintf(format, args...)))
	}
	if _, err := policy.Lookup(c.Policy); err != nil {
		bad("policy", "%v", err)
	}
	names := make([]string, 0, len(c.Policies))
	for name := range c.Policies {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if _, err := policy.Lookup(name); err != nil {
			bad("policies."+name, "%v", err)
			continue
		}
		if _, err := c.PolicySettings(name); err != nil {
			errs = append(errs, err)
		}
	}
	if c.VirtualNodes < 1 || c.VirtualNodes > 10000 {
		bad("virtual_nodes", "must be between 1 and 10000, got %d", c.VirtualNodes)
	}
	if c.PlacementMemory.MaxEntries < 1 {
		bad("placement_memory.max_entries", "must be ≥ 1, got %d", c.PlacementMemory.MaxEntries)
	}
	if c.PlacementMemory.TTL <= 0 {
		bad("placement_memory.ttl", "must be > 0")
	}
	if p := c.PrefixIndex; p.BlockChars < 16 || p.BlockChars > 1<<20 {
		bad("prefix_index.block_chars", "must be between 16 and 1048576, got %d", p.BlockChars)
	}
	if c.PrefixIndex.CapacityTokens < 1 {
		bad("prefix_index.capacity_tokens", "must be ≥ 1, got %d", c.PrefixIndex.CapacityTokens)
	}
	if c.PrefixIndex.TTL <= 0 {
		bad("prefix_index.ttl", "must be > 0")
	}
	if len(errs) == 0 {
		if err := c.StateConfig().Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if c.Signals.Interval < 0 {
		bad("signals.interval", "must not be negative (0 disables scraping)")
	}
	if !(c.CharsPerToken > 0) {
		bad("chars_per_token", "must be > 0, got %g", c.CharsPerToken)
	}
	errs = append(errs, c.ValidateModels())
	return errors.Join(errs...)
}

// Validate checks values and the keys the chosen modes need.
func (c *Router) Validate() error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", key, fmt.Sprintf(format, args...)))
	}
	if c.Listen == "" {
		bad("listen", "must not be empty")
	}
	errs = append(errs, c.ValidateRouting())
	if s := c.Signals; s.Interval > 0 {
		if s.Timeout <= 0 {
			bad("signals.timeout", "must be > 0")
		}
		if !strings.HasPrefix(s.Path, "/") {
			bad("signals.path", "must start with /, got %q", s.Path)
		}
		if s.Engine != "" && !slices.Contains(SignalEngines, s.Engine) {
			bad("signals.engine", "must be one of %s, got %q", strings.Join(SignalEngines, ", "), s.Engine)
		}
	}
	c.validateEngines(bad)
	if c.DefaultMaxTokens < 1 {
		bad("default_max_tokens", "must be ≥ 1, got %d", c.DefaultMaxTokens)
	}
	for i, h := range c.ConversationKey.Headers {
		if strings.TrimSpace(h) == "" {
			bad(fmt.Sprintf("conversation_key.headers[%d]", i), "must not be empty")
		}
	}
	if c.ConversationKey.PrefixChars < 1 {
		bad("conversation_key.prefix_chars", "must be ≥ 1, got %d", c.ConversationKey.PrefixChars)
	}
	if c.MaxBodyBytes < 1024 {
		bad("max_body_bytes", "must be ≥ 1024, got %d", c.MaxBodyBytes)
	}
	if c.Upstream.DialTimeout <= 0 {
		bad("upstream.dial_timeout", "must be > 0")
	}
	if c.Upstream.ResponseTimeout <= 0 {
		bad("upstream.response_timeout", "must be > 0")
	}
	if c.Upstream.MaxAttempts < 1 {
		bad("upstream.max_attempts", "must be ≥ 1, got %d", c.Upstream.MaxAttempts)
	}
	if c.ShutdownGrace < 0 {
		bad("shutdown_grace", "must not be negative")
	}
	c.validateServing(bad)
	errs = append(errs, c.Cluster.Validate())
	errs = append(errs, c.Tracing.Validate()) // operator (issue 25)
	errs = append(errs, c.Admission.Validate())
	switch c.Discovery.Mode {
	case "static":
		if len(c.Discovery.Static) == 0 {
			bad("discovery.static", "must list at least one replica")
		} else if err := replicaset.Validate(c.Discovery.Static); err != nil {
			errs = append(errs, fmt.Errorf("discovery.static%w", err))
		}
	case "kubernetes":
		k := c.Discovery.Kubernetes
		if k == nil {
			bad("discovery.kubernetes", "missing")
			break
		}
		validateService("discovery.kubernetes", k.Namespace, k.Service, k.PortName, bad)
	default:
		bad("discovery.mode", "must be static or kubernetes, got %q", c.Discovery.Mode)
	}
	c.Discovery.validateModels(bad) // discovery_models.go
	return errors.Join(errs...)
}
