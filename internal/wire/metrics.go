package wire

import (
	"strconv"
	"strings"
)

// The names of the router's Prometheus series that the simulator writes
// too, into its run record's metrics, as the live runner records them from
// the router's /metrics. The router registers them (internal/router's
// metrics.go, which the core cannot import: it pulls in client_golang);
// TestRouterRegistersMetricNames holds the two together.
const (
	MetricRequests        = "llm_ring_requests_total"
	MetricPromptTokens    = "llm_ring_prompt_tokens_total"
	MetricPredictedTokens = "llm_ring_predicted_tokens_total"
	MetricCacheLost       = "llm_ring_cache_lost_total"
	MetricFailovers       = "llm_ring_failovers_total"
)

// The labels of MetricRequests, in the order the router declares them. The
// simulator writes all but LabelModel.
const (
	LabelPolicy  = "policy"
	LabelReplica = "replica"
	LabelReason  = "reason"
	LabelCode    = "code"
	LabelModel   = "model"
)

// MetricPromptTokens' one label and its two values: tokens the replica
// reused from its prompt cache, and tokens it processed.
const (
	LabelKind     = "kind"
	KindCached    = "cached"
	KindProcessed = "processed"
)

// RequestLabels returns the labels of MetricRequests in the router's order
// (a new slice: the core holds no mutable globals).
func RequestLabels() []string {
	return []string{LabelPolicy, LabelReplica, LabelReason, LabelCode, LabelModel}
}

// Series returns a series key as the live runner records it:
// name{label="value",…}, the pairs (label, value, label, value, …) written
// in the order given, which the caller keeps alphabetical by label as the
// runner sorts them; no braces without pairs. Values are quoted as the
// runner quotes them (strconv.Quote). An odd number of pairs is a
// programming error and panics.
func Series(name string, pairs ...string) string {
	if len(pairs)%2 != 0 {
		panic("wire.Series: label " + pairs[len(pairs)-1] + " without a value")
	}
	if len(pairs) == 0 {
		return name
	}
	var b strings.Builder
	b.WriteString(name)
	for i := 0; i < len(pairs); i += 2 {
		if i == 0 {
			b.WriteByte('{')
		} else {
			b.WriteByte(',')
		}
		b.WriteString(pairs[i])
		b.WriteByte('=')
		b.WriteString(strconv.Quote(pairs[i+1]))
	}
	b.WriteByte('}')
	return b.String()
}
