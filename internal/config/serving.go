package config

import (
	"fmt"
	"strings"

	"github.com/llm-ring/llm-ring/internal/engine"
)

// Server holds the client-side limits of the router's listener.
type Server struct {
	// ReadTimeout bounds reading a whole request, body included; a client
	// too slow gets 408 and its connection is closed.
	ReadTimeout Duration `json:"read_timeout"`
	// IdleTimeout closes keep-alive connections idle for this long.
	IdleTimeout Duration `json:"idle_timeout"`
	// MaxBufferedBodyBytes caps the request bytes held at once across all
	// connections (bodies are kept for replay until their answer ends).
	MaxBufferedBodyBytes int64 `json:"max_buffered_body_bytes"`
	// MaxBufferedBodyWait is how long a request waits for room under that
	// cap before it gets 503 with Retry-After.
	MaxBufferedBodyWait Duration `json:"max_buffered_body_wait"`
}

// Admin configures the admin API (PUT /admin/policy, POST /admin/reset).
type Admin struct {
	// Listen is the admin API's own address; "" disables the admin API. It is
	// never served on the client listener.
	Listen string `json:"listen"`
	// TokenFile holds the bearer token the admin API requires (required
	// when Listen is set; surrounding white space is ignored).
	TokenFile string `json:"token_file"`
	// StatusPath is where the admin listener serves the status page
	// (status_path.go); absent or "": "/".
	StatusPath string `json:"status_path" cfg:"optional"`
}

// HealthCheck configures active health checks of the replicas.
type HealthCheck struct {
	// Interval between checks of each replica; 0 disables health checks.
	Interval Duration `json:"interval"`
	// Timeout of one check; no answer in time is a failure.
	Timeout Duration `json:"timeout"`
	// Path is requested with GET on each replica; absent or "", the
	// engine's (llama.cpp, vLLM, SGLang: /health; Ollama: /api/version).
	// A path the replica does not serve (404) is logged as a configuration
	// mismatch and the replica stays routable while it answers.
	Path string `json:"path" cfg:"optional"`
	// UnhealthyThreshold consecutive failures take a replica out of routing;
	// HealthyThreshold consecutive successes bring it back.
	UnhealthyThreshold int `json:"unhealthy_threshold"`
	HealthyThreshold   int `json:"healthy_threshold"`
}

// validateServing checks the listener, admin, upstream-idle, health-check
// and drain keys.
func (c *Router) validateServing(bad func(key, format string, args ...any)) {
	if c.MaxOutputTokens < 1 {
		bad("max_output_tokens", "must be ≥ 1, got %d", c.MaxOutputTokens)
	} else if c.DefaultMaxTokens > c.MaxOutputTokens {
		bad("default_max_tokens", "must be ≤ max_output_tokens (%d), got %d", c.MaxOutputTokens, c.DefaultMaxTokens)
	}
	s := c.Server
	if s.ReadTimeout <= 0 {
		bad("server.read_timeout", "must be > 0")
	}
	if s.IdleTimeout <= 0 {
		bad("server.idle_timeout", "must be > 0")
	}
	if s.MaxBufferedBodyBytes < c.MaxBodyBytes {
		bad("server.max_buffered_body_bytes", "must be ≥ max_body_bytes (%d), got %d", c.MaxBodyBytes, s.MaxBufferedBodyBytes)
	}
	if s.MaxBufferedBodyWait < 0 {
		bad("server.max_buffered_body_wait", "must not be negative")
	}
	if c.Admin.Listen != "" && c.Admin.TokenFile == "" {
		bad("admin.token_file", "must be set when admin.listen is set (the admin API requires a bearer token)")
	}
	if c.Admin.Listen != "" && c.Admin.Listen == c.Listen && !strings.HasSuffix(c.Listen, ":0") {
		bad("admin.listen", "must differ from listen (the admin API never shares the client listener)")
	}
	c.Admin.checkStatusPath(bad)
	if c.Upstream.IdleTimeout <= 0 {
		bad("upstream.idle_timeout", "must be > 0")
	}
	switch c.Upstream.Client {
	case "", ClientOwn, ClientNetHTTP:
	default:
		bad("upstream.client", "must be %q or %q, got %q", ClientOwn, ClientNetHTTP, c.Upstream.Client)
	}
	h := c.HealthCheck
	if h.Interval < 0 {
		bad("health_check.interval", "must not be negative (0 disables health checks)")
	}
	if h.Interval > 0 {
		if h.Timeout <= 0 {
			bad("health_check.timeout", "must be > 0")
		}
		if h.Path != "" && h.Path[0] != '/' {
			bad("health_check.path", "must start with /, got %q", h.Path)
		}
		if h.UnhealthyThreshold < 1 {
			bad("health_check.unhealthy_threshold", "must be ≥ 1, got %d", h.UnhealthyThreshold)
		}
		if h.HealthyThreshold < 1 {
			bad("health_check.healthy_threshold", "must be ≥ 1, got %d", h.HealthyThreshold)
		}
	}
	if c.ShutdownDelay < 0 {
		bad("shutdown_delay", "must not be negative")
	}
}

// validateEngines checks the engine keys: the replica set's engine (or the
// signals.engine that stands for it) and every static replica's.
func (c *Router) validateEngines(bad func(key, format string, args ...any)) {
	if c.Engine == "" && c.Signals.Engine == "" {
		bad("engine", "missing (one of %s)", strings.Join(engine.Names(), ", "))
	} else if _, err := engine.PresetOf(c.EngineName()); err != nil {
		bad("engine", "%v", err)
	}
	if c.Discovery.Mode != "static" {
		return
	}
	for i, r := range c.Discovery.Static {
		if r.Engine == "" {
			continue
		}
		if _, err := engine.PresetOf(r.Engine); err != nil {
			bad(fmt.Sprintf("discovery.static[%d].engine", i), "%v", err)
		}
	}
}

// EngineName is the replica set's engine: the engine key, or signals.engine
// where the configuration predates it.
func (c *Router) EngineName() string {
	if c.Engine != "" {
		return c.Engine
	}
	return c.Signals.Engine
}

// ReplicaEngine returns the preset of a replica whose own engine setting is
// own ("" for the replica set's), and the health path to probe it on: the
// configured health_check.path for replicas of the set's engine, the
// engine's own path for a replica that names another engine. The
// configuration must be valid.
func (c *Router) ReplicaEngine(own string) (engine.Preset, string) {
	name := c.EngineName()
	if own != "" {
		name = own
	}
	p, _ := engine.PresetOf(name)
	if c.HealthCheck.Path != "" && (own == "" || own == c.EngineName()) {
		return p, c.HealthCheck.Path
	}
	return p, p.HealthPath
}

// MetricsPreset returns the signals preset of a replica whose own engine
// setting is own: signals.engine when it is set and the replica is of the
// set's engine, else the engine's own ("" when it publishes no metrics).
func (c *Router) MetricsPreset(own string) string {
	p, _ := c.ReplicaEngine(own)
	if c.Signals.Engine != "" && (own == "" || own == c.EngineName()) {
		return c.Signals.Engine
	}
	return p.Metrics
}
