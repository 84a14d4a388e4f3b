package config

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// Modes of Tracing.Mode.
const (
	TracingNone = "none"
	TracingOTLP = "otlp"
)

// Tracing is the optional `tracing:` block of router.yaml (issue 25):
// OpenTelemetry spans, one per proxied request, exported over OTLP/HTTP.
// Absent or mode none, the router traces nothing.
//
//	tracing:
//	  mode: otlp                           # none | otlp
//	  endpoint: http://otel-collector:4318 # OTLP/HTTP base URL (/v1/traces is appended)
//	  sample_ratio: 1                      # share of new traces kept (a client's sampled flag is followed)
//	  service_name: llm-ring
type Tracing struct {
	Mode        string  `json:"mode"`
	Endpoint    string  `json:"endpoint,omitempty" cfg:"mode=otlp"`
	SampleRatio float64 `json:"sample_ratio,omitempty" cfg:"optional"`
	ServiceName string  `json:"service_name,omitempty" cfg:"optional"`
}

// On says whether spans are recorded.
func (t Tracing) On() bool { return t.Mode == TracingOTLP }

// Validate checks the block; an empty mode is none.
func (t Tracing) Validate() error {
	switch t.Mode {
	case "", TracingNone:
		return nil
	case TracingOTLP:
	default:
		return fmt.Errorf("tracing.mode: must be %s or %s, got %q", TracingNone, TracingOTLP, t.Mode)
	}
	var errs []error
	u, err := url.Parse(t.Endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		errs = append(errs, fmt.Errorf("tracing.endpoint: must be an http:// or https:// URL of an OTLP/HTTP receiver (port 4318), got %q", t.Endpoint))
	}
	if t.SampleRatio < 0 || t.SampleRatio > 1 {
		errs = append(errs, fmt.Errorf("tracing.sample_ratio: must be between 0 and 1, got %v", t.SampleRatio))
	}
	if strings.TrimSpace(t.ServiceName) != t.ServiceName {
		errs = append(errs, fmt.Errorf("tracing.service_name: must not start or end with spaces, got %q", t.ServiceName))
	}
	return errors.Join(errs...)
}
