package config

import "strings"

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
}

// HealthCheck configures active health checks of the replicas.
type HealthCheck struct {
	// Interval between checks of each replica; 0 disables health checks.
	Interval Duration `json:"interval"`
	// Timeout of one check; no answer in time is a failure.
	Timeout Duration `json:"timeout"`
	// Path is requested with GET on each replica (llama.cpp: /health,
	// 200 when ready, 503 while loading).
	Path string `json:"path"`
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
	if c.Upstream.IdleTimeout <= 0 {
		bad("upstream.idle_timeout", "must be > 0")
	}
	h := c.HealthCheck
	if h.Interval < 0 {
		bad("health_check.interval", "must not be negative (0 disables health checks)")
	}
	if h.Interval > 0 {
		if h.Timeout <= 0 {
			bad("health_check.timeout", "must be > 0")
		}
		if len(h.Path) == 0 || h.Path[0] != '/' {
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
