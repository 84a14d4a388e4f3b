package config

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/llm-ring/llm-ring/internal/admission"
)

// Admission is the optional `admission:` block of router.yaml (issue 22):
// admission control in front of routing (docs/admission.md). Every key is
// optional; absent keys take admission.Defaults().
//
//	admission:
//	  enabled: true
//	  queue_capacity: 256        # requests that may wait while the pool is saturated
//	  max_wait: 30s              # longest wait of a request without a TTFT SLO
//	  order: fcfs                # fcfs | edf, within a flow
//	  shed_status: 429           # 429 (with Retry-After) or 503
//	  objectives: {interactive: 10, batch: -10}   # x-gateway-inference-objective → priority
//	  min_share: {"-10": 0.05}   # a band's guaranteed share of dispatches while it waits
//	  band_limits: {"0": 0.6}    # pool score at which band 0 (and below) counts as saturated: headroom for the bands above
//	  flow_weights: {gold: 3}    # x-gateway-inference-fairness-id → weight within its band
//	  flow_gate: 0               # (0, 1]: above gate × its band's limit, a flow over its fair share of the band's in-flight requests waits; 0: off
//	  flow_share: inflight       # the gate's share: inflight (requests in flight, an equal part) | rate (recent admissions, max-min by recent demand)
//	  flow_window: 4s            # flow_share rate: the counts' time constant
//	  tokens_per_minute: 0       # per flow; 0: no budget
//	  token_share: 0.45          # token capacity = share × the engine's reported KV pool, unless token_capacity is set
//	  work_share: 0.5            # saturated when a replica's in-flight work (tokens at its learned prefill rate) exceeds share × default_slo_ttft
//	  work_limit: 0s             # that work limit as a duration; set, it wins over work_share
//	  work_model: charges        # what the work counts: charges | inflight | backlog | prefill (the work ledger; docs/admission.md)
//	  work_cached: expect        # the ledger's cached tokens of a request: expect (placement memory) | match (the prefix index) | min
//	  work_target: 0             # (0, 1]: the score's thresholds loosen while the p90 from arrival to first token stays below target × default_slo_ttft; 0: off
//	  default_slo_tpot: 0s       # the pool's TPOT SLO: with work_target an answer over it tightens the thresholds again; decode_share needs it (0: none)
//	  decode_share: 0            # (0, 4]: a replica saturates when its learned time per output token with one more request exceeds share × default_slo_tpot; 0: off
//	  decode_quantile: 0         # (0, 1): with decode_share, that limit follows the answers so that this quantile of their TPOT stays within the SLO; 0: fixed
type Admission struct {
	Enabled             bool               `json:"enabled" cfg:"optional"`
	QueueThreshold      float64            `json:"queue_threshold" cfg:"optional"`
	KVThreshold         float64            `json:"kv_threshold" cfg:"optional"`
	TokenCapacity       int64              `json:"token_capacity" cfg:"optional"`
	TokenShare          *float64           `json:"token_share" cfg:"optional"`
	WorkShare           *float64           `json:"work_share" cfg:"optional"`
	WorkLimit           Duration           `json:"work_limit" cfg:"optional"`
	WorkModel           string             `json:"work_model" cfg:"optional"`
	WorkCached          string             `json:"work_cached" cfg:"optional"`
	WorkTarget          float64            `json:"work_target" cfg:"optional"`
	DecodeShare         float64            `json:"decode_share" cfg:"optional"`
	DecodeQuantile      float64            `json:"decode_quantile" cfg:"optional"`
	StaleAfter          Duration           `json:"stale_after" cfg:"optional"`
	Limit               float64            `json:"limit" cfg:"optional"`
	QueueCapacity       *int               `json:"queue_capacity" cfg:"optional"`
	QueueBytes          int64              `json:"queue_bytes" cfg:"optional"`
	MaxWait             Duration           `json:"max_wait" cfg:"optional"`
	Order               string             `json:"order" cfg:"optional"`
	ShedStatus          int                `json:"shed_status" cfg:"optional"`
	MinShare            map[string]float64 `json:"min_share" cfg:"optional"`
	BandLimits          map[string]float64 `json:"band_limits" cfg:"optional"`
	FlowWeights         map[string]float64 `json:"flow_weights" cfg:"optional"`
	FlowGate            float64            `json:"flow_gate" cfg:"optional"`
	FlowShare           string             `json:"flow_share" cfg:"optional"`
	FlowWindow          Duration           `json:"flow_window" cfg:"optional"`
	TokensPerMinute     int64              `json:"tokens_per_minute" cfg:"optional"`
	FlowTokensPerMinute map[string]int64   `json:"flow_tokens_per_minute" cfg:"optional"`
	Objectives          map[string]int     `json:"objectives" cfg:"optional"`
	DefaultPriority     int                `json:"default_priority" cfg:"optional"`
	DefaultSLOTTFT      Duration           `json:"default_slo_ttft" cfg:"optional"`
	DefaultSLOTPOT      Duration           `json:"default_slo_tpot" cfg:"optional"`
	ServiceFloor        Duration           `json:"service_floor" cfg:"optional"`
	ServiceQuantile     float64            `json:"service_quantile" cfg:"optional"`
	Headers             AdmissionHeaders   `json:"headers" cfg:"optional"`
}

// AdmissionHeaders names the request headers admission reads; the defaults
// are the Gateway API Inference Extension's names (field-notes §1.6).
type AdmissionHeaders struct {
	Objective  string `json:"objective" cfg:"optional"`
	FairnessID string `json:"fairness_id" cfg:"optional"`
	SLOTTFTMs  string `json:"slo_ttft_ms" cfg:"optional"`
	SLOTPOTMs  string `json:"slo_tpot_ms" cfg:"optional"`
}

// Header defaults.
const (
	HeaderObjective  = "x-gateway-inference-objective"
	HeaderFairnessID = "x-gateway-inference-fairness-id"
	HeaderSLOTTFT    = "x-slo-ttft-ms"
	HeaderSLOTPOT    = "x-slo-tpot-ms"
)

// Names returns the header names with the defaults filled in.
func (h AdmissionHeaders) Names() AdmissionHeaders {
	def := func(v, d string) string {
		if v == "" {
			return d
		}
		return v
	}
	return AdmissionHeaders{
		Objective: def(h.Objective, HeaderObjective), FairnessID: def(h.FairnessID, HeaderFairnessID),
		SLOTTFTMs: def(h.SLOTTFTMs, HeaderSLOTTFT), SLOTPOTMs: def(h.SLOTPOTMs, HeaderSLOTPOT),
	}
}

// HTTP statuses a shed request may get (config stays free of net/http: the
// simulator's configuration imports it).
const (
	statusTooManyRequests    = 429
	statusServiceUnavailable = 503
)

// Status is the HTTP status of a shed request (429 unless configured).
func (a Admission) Status() int {
	if a.ShedStatus == 0 {
		return statusTooManyRequests
	}
	return a.ShedStatus
}

// Settings returns the core's settings: the block over admission.Defaults().
func (a Admission) Settings() (admission.Settings, error) {
	s := admission.Defaults()
	s.Enabled = a.Enabled
	setF := func(dst *float64, v float64) {
		if v != 0 {
			*dst = v
		}
	}
	setF(&s.QueueThreshold, a.QueueThreshold)
	setF(&s.KVThreshold, a.KVThreshold)
	setF(&s.Limit, a.Limit)
	if a.StaleAfter != 0 {
		s.StaleAfterNs = int64(time.Duration(a.StaleAfter))
	}
	if a.ServiceFloor != 0 {
		s.ServiceFloorNs = int64(time.Duration(a.ServiceFloor))
	}
	s.ServiceQuantile = a.ServiceQuantile
	if a.MaxWait != 0 {
		s.MaxWaitNs = int64(time.Duration(a.MaxWait))
	}
	if a.QueueCapacity != nil {
		s.QueueCapacity = *a.QueueCapacity
	}
	if a.Order != "" {
		s.Order = a.Order
	}
	s.TokenCapacity, s.QueueBytes = a.TokenCapacity, a.QueueBytes
	if a.TokenShare != nil {
		s.TokenShare = *a.TokenShare
	}
	if a.WorkShare != nil {
		s.WorkShare = *a.WorkShare
	}
	s.WorkLimitNs = int64(time.Duration(a.WorkLimit))
	if a.WorkModel != "" {
		s.WorkModel = a.WorkModel
	}
	s.WorkCached, s.WorkTarget = a.WorkCached, a.WorkTarget
	s.DecodeShare, s.DecodeQuantile = a.DecodeShare, a.DecodeQuantile
	s.TokensPerMinute, s.FlowTokensPerMinute, s.FlowWeights = a.TokensPerMinute, a.FlowTokensPerMinute, a.FlowWeights
	s.FlowGate, s.FlowShare, s.FlowWindowNs = a.FlowGate, a.FlowShare, int64(time.Duration(a.FlowWindow))
	var err error
	if s.MinShare, err = byBand("min_share", a.MinShare); err != nil {
		return s, err
	}
	if s.BandLimits, err = byBand("band_limits", a.BandLimits); err != nil {
		return s, err
	}
	return s, nil
}

// byBand reads a map keyed by priority (YAML keys are strings); nil when
// empty.
func byBand(key string, m map[string]float64) (map[int]float64, error) {
	if len(m) == 0 {
		return nil, nil
	}
	out := map[int]float64{}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		p, err := strconv.Atoi(strings.TrimSpace(k))
		if err != nil {
			return nil, fmt.Errorf("admission.%s: key %q is not a priority (an integer)", key, k)
		}
		out[p] = m[k]
	}
	return out, nil
}

// Validate checks the block.
func (a Admission) Validate() error {
	s, err := a.Settings()
	if err != nil {
		return err
	}
	var errs []error
	if err := s.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("admission.%w", err))
	}
	if st := a.Status(); st != statusTooManyRequests && st != statusServiceUnavailable {
		errs = append(errs, fmt.Errorf("admission.shed_status: must be 429 or 503, got %d", st))
	}
	if a.DefaultSLOTTFT < 0 {
		errs = append(errs, fmt.Errorf("admission.default_slo_ttft: must be ≥ 0, got %s", time.Duration(a.DefaultSLOTTFT)))
	}
	if a.DefaultSLOTPOT < 0 {
		errs = append(errs, fmt.Errorf("admission.default_slo_tpot: must be ≥ 0, got %s", time.Duration(a.DefaultSLOTPOT)))
	}
	if a.DecodeShare > 0 && a.DefaultSLOTPOT <= 0 {
		errs = append(errs, errors.New("admission.decode_share: needs default_slo_tpot (the TPOT SLO its limit is a share of)"))
	}
	if a.DecodeQuantile > 0 && a.DecodeShare <= 0 {
		errs = append(errs, errors.New("admission.decode_quantile: needs decode_share"))
	}
	for name := range a.Objectives {
		if strings.TrimSpace(name) == "" {
			errs = append(errs, errors.New("admission.objectives: an objective needs a name"))
		}
	}
	return errors.Join(errs...)
}
