package config

import (
	"os"
	"strings"
	"testing"
	"time"
)

func withAdmission(t *testing.T, block string) (*Router, error) {
	t.Helper()
	data, err := os.ReadFile("../../config/router.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return Parse(append(data, []byte("\n"+block)...))
}

func TestAdmissionBlock(t *testing.T) {
	c, err := withAdmission(t, `admission:
  enabled: true
  queue_capacity: 0
  max_wait: 5s
  order: edf
  shed_status: 503
  objectives: {interactive: 10, batch: -10}
  min_share: {"-10": 0.05}
  band_limits: {"0": 0.6}
  flow_weights: {gold: 3}
  tokens_per_minute: 100000
  flow_tokens_per_minute: {vip: 0}
  default_slo_ttft: 2s
  service_floor: 500ms
  token_share: 0.45
  headers: {fairness_id: x-tenant}
`)
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.Admission.Settings()
	if err != nil {
		t.Fatal(err)
	}
	if !s.Enabled || s.QueueCapacity != 0 || s.MaxWaitNs != int64(5*time.Second) || s.Order != "edf" ||
		s.MinShare[-10] != 0.05 || s.BandLimits[0] != 0.6 || s.ServiceFloorNs != int64(500*time.Millisecond) || s.FlowWeights["gold"] != 3 || s.TokensPerMinute != 100000 || s.QueueThreshold != 5 || s.TokenShare != 0.45 {
		t.Fatalf("settings %+v", s)
	}
	if c.Admission.Status() != 503 || c.Admission.Objectives["batch"] != -10 {
		t.Fatalf("block %+v", c.Admission)
	}
	h := c.Admission.Headers.Names()
	if h.FairnessID != "x-tenant" || h.Objective != HeaderObjective || h.SLOTTFTMs != HeaderSLOTTFT {
		t.Fatalf("headers %+v", h)
	}
	// Absent: off, defaults.
	c, err = withAdmission(t, "")
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := c.Admission.Settings(); s.Enabled || s.QueueCapacity != 256 || s.TokenShare != 0 {
		t.Fatalf("absent block: %+v", s)
	}
}

func TestAdmissionErrorsNameTheKey(t *testing.T) {
	for block, want := range map[string]string{
		"admission:\n  shed_status: 418\n":          "admission.shed_status: must be 429 or 503",
		"admission:\n  order: lifo\n":               `admission.order: must be "fcfs" or "edf"`,
		"admission:\n  min_share: {high: 0.1}\n":    `admission.min_share: key "high" is not a priority`,
		"admission:\n  kv_threshold: 2\n":           "admission.kv_threshold: must be in (0, 1]",
		"admission:\n  band_limits: {top: 0.5}\n":   `admission.band_limits: key "top" is not a priority`,
		"admission:\n  band_limits: {\"0\": 1.5}\n": "admission.band_limits[0]: must be in (0, limit 1]",
		"admission:\n  queue_capacity: -1\n":        "admission.queue_capacity: must be ≥ 0",
		"admission:\n  bogus: 1\n":                  "admission.bogus",
		"admission:\n  flow_weights: {free: -1}\n":  `admission.flow_weights["free"]: must be > 0`,
		"admission:\n  default_slo_ttft: -1s\n":     "admission.default_slo_ttft: must be ≥ 0",
		"admission:\n  token_share: 2\n":            "admission.token_share: must be in [0, 1]",
	} {
		_, err := withAdmission(t, block)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want it to name %q", block, err, want)
		}
	}
}

func TestAdmissionWorkShare(t *testing.T) {
	var a Admission
	w := 4.0
	a.WorkShare, a.WorkLimit = &w, Duration(250*time.Millisecond)
	s, err := a.Settings()
	if err != nil || s.WorkShare != 4 || s.WorkLimitNs != int64(250*time.Millisecond) {
		t.Fatalf("work_share 4, work_limit 250ms: %+v, %v", s, err)
	}
}

// TestAdmissionFlowShare: flow_share and flow_window reach the settings;
// a bad share is refused naming the key.
func TestAdmissionFlowShare(t *testing.T) {
	c, err := withAdmission(t, "admission:\n  enabled: true\n  flow_gate: 0.4\n  flow_share: rate\n  flow_window: 8s\n")
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.Admission.Settings()
	if err != nil || s.FlowGate != 0.4 || s.FlowShare != "rate" || s.FlowWindowNs != int64(8*time.Second) {
		t.Fatalf("settings %+v, %v", s, err)
	}
	for block, want := range map[string]string{
		"admission:\n  flow_share: work\n": `admission.flow_share: must be "inflight" or "rate"`,
		"admission:\n  flow_window: -1s\n": "admission.flow_window: must be ≥ 0",
	} {
		if _, err := withAdmission(t, block); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want it to name %q", block, err, want)
		}
	}
}

// TestAdmissionDecodeTerm: decode_share and decode_quantile reach the
// settings; each is refused, naming its key, without what it needs or
// outside its range.
func TestAdmissionDecodeTerm(t *testing.T) {
	c, err := withAdmission(t, "admission:\n  enabled: true\n  default_slo_tpot: 100ms\n  decode_share: 0.8\n  decode_quantile: 0.95\n")
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.Admission.Settings()
	if err != nil || s.DecodeShare != 0.8 || s.DecodeQuantile != 0.95 {
		t.Fatalf("settings %+v, %v", s, err)
	}
	for block, want := range map[string]string{
		"admission:\n  decode_share: 0.8\n":                                                "admission.decode_share: needs default_slo_tpot",
		"admission:\n  default_slo_tpot: 100ms\n  decode_quantile: 0.9\n":                  "admission.decode_quantile: needs decode_share",
		"admission:\n  default_slo_tpot: 100ms\n  decode_share: 5\n":                       "admission.decode_share: must be in [0, 4]",
		"admission:\n  default_slo_tpot: 100ms\n  decode_share: 1\n  decode_quantile: 1\n": "admission.decode_quantile: must be in [0, 1)",
	} {
		if _, err := withAdmission(t, block); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want it to name %q", block, err, want)
		}
	}
}
