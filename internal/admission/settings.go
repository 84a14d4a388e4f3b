package admission

import (
	"errors"
	"fmt"
	"math"
	"sort"
)

// Settings configure admission. The zero value is not valid: start from
// Defaults.
type Settings struct {
	// Enabled turns admission on. Off, every request is admitted at once and
	// nothing is queued (the router's behaviour before admission existed).
	Enabled bool `json:"enabled"`

	// Saturation (see saturation.go).
	//
	// QueueThreshold is the waiting-request count at which a replica scores
	// 1 (GIE utilization-detector queueDepthThreshold, default 5).
	QueueThreshold float64 `json:"queue_threshold"`
	// KVThreshold is the KV-cache use at which a replica scores 1 (GIE
	// kvCacheUtilThreshold, default 0.8).
	KVThreshold float64 `json:"kv_threshold"`
	// TokenCapacity is the in-flight token load (the router's own count) at
	// which a replica scores 1; 0: not used (engines that report their
	// queue and KV use need no such guess).
	TokenCapacity int64 `json:"token_capacity"`
	// TokenShare derives the token capacity from the engine's KV pool when
	// TokenCapacity is 0: TokenShare × the pool's KV tokens, once the
	// driver knows them (Controller.SetKVTokens, TokenCapacityFor); 0: not
	// derived. See capacity.go.
	TokenShare float64 `json:"token_share"`
	// WorkLimitNs is the in-flight work (ns: the replica's in-flight tokens
	// at its learned prefill rate) at which a replica scores 1; 0: not used
	// unless WorkShare derives it. See work.go.
	WorkLimitNs int64 `json:"work_limit_ns"`
	// WorkShare derives WorkLimitNs when that is 0: WorkShare × the default
	// TTFT SLO the driver gives requests (Controller.SetSLO,
	// WorkLimitFor); 0: not derived.
	WorkShare float64 `json:"work_share"`
	// WorkModel is what the work term counts (work.go, ledger.go):
	// WorkCharges ("charges", the default), the policies' in-flight charges
	// at the learned per-request prefill rate; WorkInflight ("inflight"),
	// the ledger's uncached prompt tokens in flight at the replica's prefill
	// throughput; WorkBacklog ("backlog"), the ledger's prefill backlog (the
	// in-flight tokens drained at that throughput since dispatch) at it;
	// WorkPrefill ("prefill"), the ledger's uncached prompt tokens of the
	// requests not yet past their first token (Ledger.First) at it.
	WorkModel string `json:"work_model"`
	// WorkCached is which of the pick's figures the ledger takes as a
	// request's cached tokens (Controller.Expected): CachedExpect
	// ("expect", the default), placement memory's expectation
	// (Ticket.ExpectCached); CachedMatch ("match"), the prefix index's
	// match on the picked replica (Ticket.Match); CachedMin ("min"), the
	// smaller of the two.
	WorkCached string `json:"work_cached"`
	// WorkTarget, in (0, 1], lets the score's thresholds loosen while the
	// pool's first tokens come fast: the ledger keeps a multiplier m ≥ 1
	// that holds the p90 of the admitted requests' times from arrival to
	// first token at WorkTarget × the default TTFT SLO, and the score is
	// divided by it; an answer over the TPOT SLO takes it down
	// (ledger_headroom.go); 0 (the default): off.
	WorkTarget float64 `json:"work_target"`
	// DecodeShare, in (0, 4], adds the decode term to the saturation
	// score: a replica scores 1 on it when the pool's learned time per
	// output token with one more request than it has in flight reaches
	// DecodeShare × the TPOT SLO (Controller.SetTPOT; ledger_decode.go),
	// and the pool score is at least the mean of those scores (the band
	// limits scale it as they scale the other terms); 0 (the default):
	// off.
	DecodeShare float64 `json:"decode_share"`
	// DecodeQuantile, in (0, 1), lets the decode term's limit follow the
	// answers: a gain on it, in [1/4, 4], holds this quantile of the
	// answers' TPOT at the SLO (ledger_decode.go); 0 (the default): the
	// limit stays DecodeShare × the SLO.
	DecodeQuantile float64 `json:"decode_quantile"`
	// StaleAfterNs: a report older than this makes its replica count as
	// saturated (GIE: stale metrics are 100 % saturated). Default 2 s, ten
	// intervals of the shipped 200 ms scrape.
	StaleAfterNs int64 `json:"stale_after_ns"`
	// Limit is the pool score at or above which the pool is saturated
	// (GIE static-usage-limit threshold, default 1.0).
	Limit float64 `json:"limit"`

	// The queue (see queue.go).
	//
	// QueueCapacity is the most requests that may wait; 0 refuses instead of
	// queueing while saturated. Default 256 (SGLang's gateway suggests twice
	// its maximum concurrency).
	QueueCapacity int `json:"queue_capacity"`
	// QueueBytes bounds the bodies held by waiting requests; 0: no bound.
	QueueBytes int64 `json:"queue_bytes"`
	// MaxWaitNs is the longest a request without a deadline waits (SGLang
	// --queue-timeout-secs; default 30 s here).
	MaxWaitNs int64 `json:"max_wait_ns"`
	// ServiceFloorNs is the least time from dispatch to first token assumed
	// for any request (its Service when larger): a waiting request is shed
	// once its deadline is nearer than that, rather than dispatched to miss
	// it. 0 (the default): only the request's own prediction counts.
	ServiceFloorNs int64 `json:"service_floor_ns"`
	// ServiceQuantile, in (0, 1), makes the quantile of the pool's recent
	// dispatch-to-first-token times (ObserveService) the least service time
	// assumed, as ServiceFloorNs is; 0 (the default): off.
	ServiceQuantile float64 `json:"service_quantile"`
	// Order within a flow: "fcfs" or "edf" (earliest deadline first; GIE
	// fcfs-ordering-policy / slo-deadline).
	Order string `json:"order"`
	// MinShare maps a priority band to the share of dispatches it is
	// guaranteed while it has requests waiting, even when higher bands wait
	// too (0, the default: strict priority, a lower band waits as long as a
	// higher one has anything queued). Shares sum to at most 0.5.
	MinShare map[int]float64 `json:"min_share"`
	// BandLimits maps a priority band to the pool score at which that band
	// counts as saturated (headroom): a band is admitted only while the
	// pool's score is below the least of Limit and the limits of it and
	// every band above it, so the capacity between a lower band's limit and
	// Limit is held back for the bands above (GIE flow control's priority
	// bands; Dynamo's busy thresholds). A band below its MinShare may still
	// use the capacity up to Limit. Empty (the default): every band up to
	// Limit.
	BandLimits map[int]float64 `json:"band_limits"`
	// FlowWeights weights the fair share of a flow within its band; a flow
	// not listed weighs 1 (all equal: round robin).
	FlowWeights map[string]float64 `json:"flow_weights"`
	// FlowGate, in (0, 1], holds back a flow above its fair share of its
	// band's requests in flight while the pool's score is at least FlowGate
	// × the band's limit (LimitOf): such a flow waits instead of being
	// admitted at once, and the queue passes it over, so that the capacity
	// between the gate and the limit goes to the band's other flows first
	// (flowgate.go). 0 (the default): off.
	FlowGate float64 `json:"flow_gate"`
	// FlowShare is what the flow gate counts a flow's share by:
	// FlowShareInflight ("inflight", the default), its requests in flight
	// against an equal part of its band's (flowgate.go); FlowShareRate
	// ("rate"), its recent admissions against its max-min fair share, by
	// the flows' recent offers, of its band's (flowrate.go).
	FlowShare string `json:"flow_share"`
	// FlowWindowNs is the rate share's time constant: its counts decay by
	// e^(−Δt/FlowWindowNs); 0: DefaultFlowWindowNs.
	FlowWindowNs int64 `json:"flow_window_ns"`

	// Budgets (see budget.go): tokens per minute per flow; 0: no budget.
	// FlowTokensPerMinute overrides it for named flows.
	TokensPerMinute     int64            `json:"tokens_per_minute"`
	FlowTokensPerMinute map[string]int64 `json:"flow_tokens_per_minute"`
}

// Orders within a flow.
const (
	OrderFCFS = "fcfs"
	OrderEDF  = "edf"
)

// The flow gate's shares (Settings.FlowShare).
const (
	FlowShareInflight = "inflight"
	FlowShareRate     = "rate"
)

// DefaultFlowWindowNs is the rate share's time constant when
// FlowWindowNs is 0: 4 s, many light-flow arrivals (a flow of 2–4
// requests/s) and a fifth of a 20 s measurement stage.
const DefaultFlowWindowNs = 4e9

// Work models (Settings.WorkModel).
const (
	WorkCharges  = "charges"
	WorkInflight = "inflight"
	WorkBacklog  = "backlog"
	WorkPrefill  = "prefill"
)

// The ledger's cached estimates (Settings.WorkCached).
const (
	CachedExpect = "expect"
	CachedMatch  = "match"
	CachedMin    = "min"
)

// workCharges reports whether the work term is the charges' (no ledger).
func (s *Settings) workCharges() bool { return s.WorkModel == "" || s.WorkModel == WorkCharges }

// Defaults returns the documented defaults (admission off).
func Defaults() Settings {
	return Settings{
		QueueThreshold: 5,
		KVThreshold:    0.8,
		StaleAfterNs:   2e9,
		Limit:          1.0,
		QueueCapacity:  256,
		MaxWaitNs:      30e9,
		Order:          OrderFCFS,
	}
}

// Validate names the first setting that is out of range.
func (s *Settings) Validate() error {
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	check(s.QueueThreshold > 0 && !math.IsInf(s.QueueThreshold, 0), "queue_threshold: must be > 0, got %v", s.QueueThreshold)
	check(s.KVThreshold > 0 && s.KVThreshold <= 1, "kv_threshold: must be in (0, 1], got %v", s.KVThreshold)
	check(s.TokenCapacity >= 0, "token_capacity: must be ≥ 0, got %d", s.TokenCapacity)
	check(s.TokenShare >= 0 && s.TokenShare <= 1, "token_share: must be in [0, 1], got %v", s.TokenShare)
	check(s.WorkLimitNs >= 0, "work_limit: must be ≥ 0, got %dns", s.WorkLimitNs)
	check(s.WorkShare >= 0 && !math.IsInf(s.WorkShare, 0), "work_share: must be ≥ 0, got %v", s.WorkShare)
	check(s.workCharges() || s.WorkModel == WorkInflight || s.WorkModel == WorkBacklog || s.WorkModel == WorkPrefill,
		"work_model: must be %q, %q, %q or %q, got %q", WorkCharges, WorkInflight, WorkBacklog, WorkPrefill, s.WorkModel)
	check(s.WorkCached == "" || s.WorkCached == CachedExpect || s.WorkCached == CachedMatch || s.WorkCached == CachedMin,
		"work_cached: must be %q, %q or %q, got %q", CachedExpect, CachedMatch, CachedMin, s.WorkCached)
	check(s.WorkTarget >= 0 && s.WorkTarget <= 1, "work_target: must be in [0, 1], got %v", s.WorkTarget)
	check(s.DecodeShare >= 0 && s.DecodeShare <= 4, "decode_share: must be in [0, 4], got %v", s.DecodeShare)
	check(s.DecodeQuantile >= 0 && s.DecodeQuantile < 1, "decode_quantile: must be in [0, 1), got %v", s.DecodeQuantile)
	check(s.StaleAfterNs > 0, "stale_after: must be > 0, got %dns", s.StaleAfterNs)
	check(s.Limit > 0 && !math.IsInf(s.Limit, 0), "limit: must be > 0, got %v", s.Limit)
	check(s.QueueCapacity >= 0, "queue_capacity: must be ≥ 0, got %d", s.QueueCapacity)
	check(s.QueueBytes >= 0, "queue_bytes: must be ≥ 0, got %d", s.QueueBytes)
	check(s.ServiceFloorNs >= 0, "service_floor: must be ≥ 0, got %dns", s.ServiceFloorNs)
	check(s.ServiceQuantile >= 0 && s.ServiceQuantile < 1, "service_quantile: must be in [0, 1), got %v", s.ServiceQuantile)
	check(s.MaxWaitNs > 0, "max_wait: must be > 0, got %dns", s.MaxWaitNs)
	check(s.Order == OrderFCFS || s.Order == OrderEDF, "order: must be %q or %q, got %q", OrderFCFS, OrderEDF, s.Order)
	check(s.FlowGate >= 0 && s.FlowGate <= 1, "flow_gate: must be in [0, 1], got %v", s.FlowGate)
	check(s.FlowShare == "" || s.FlowShare == FlowShareInflight || s.FlowShare == FlowShareRate,
		"flow_share: must be %q or %q, got %q", FlowShareInflight, FlowShareRate, s.FlowShare)
	check(s.FlowWindowNs >= 0, "flow_window: must be ≥ 0, got %dns", s.FlowWindowNs)
	check(s.TokensPerMinute >= 0, "tokens_per_minute: must be ≥ 0, got %d", s.TokensPerMinute)
	sum := 0.0
	for _, b := range sortedBands(s.MinShare) {
		v := s.MinShare[b]
		check(v >= 0 && v < 1, "min_share[%d]: must be in [0, 1), got %v", b, v)
		sum += v
	}
	check(sum <= 0.5, "min_share: shares sum to %v, more than 0.5", sum)
	for _, b := range sortedBands(s.BandLimits) {
		v := s.BandLimits[b]
		check(v > 0 && v <= s.Limit, "band_limits[%d]: must be in (0, limit %v], got %v", b, s.Limit, v)
	}
	for _, f := range sortedKeys(s.FlowWeights) {
		w := s.FlowWeights[f]
		check(w > 0 && !math.IsInf(w, 0), "flow_weights[%q]: must be > 0, got %v", f, w)
	}
	for _, f := range sortedKeys(s.FlowTokensPerMinute) {
		check(s.FlowTokensPerMinute[f] >= 0, "flow_tokens_per_minute[%q]: must be ≥ 0, got %d", f, s.FlowTokensPerMinute[f])
	}
	return errors.Join(errs...)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func sortedBands(m map[int]float64) []int {
	keys := make([]int, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Ints(keys)
	return keys
}
