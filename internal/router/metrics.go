package router

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/llm-ring/llm-ring/internal/state"
)

// metrics are the router's Prometheus series, on a registry of its own.
type metrics struct {
	requests       *prometheus.CounterVec   // by policy, replica, reason, code
	decision       prometheus.Histogram     // seconds spent routing (pick + acquire)
	latency        *prometheus.HistogramVec // by policy: request latency, seconds
	promptTokens   *prometheus.CounterVec   // by kind: cached | processed
	predicted      prometheus.Counter
	upstreamErrors *prometheus.CounterVec // by replica, kind: dial | timeout | status | stall | broken
	failovers      prometheus.Counter
	cacheLost      prometheus.Counter
	rejected       *prometheus.CounterVec // by code: requests refused before routing
	bodyBudgetFull prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, table *state.Table, budget *bodyBudget) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llm_ring_requests_total",
			Help: "Proxied requests by policy, replica, route reason and HTTP status code.",
		}, []string{"policy", "replica", "reason", "code"}),
		decision: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "llm_ring_decision_seconds",
			Help:    "Time to route a request: placement lookup, policy pick and load acquire.",
			Buckets: []float64{1e-7, 2.5e-7, 5e-7, 1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 1e-4, 1e-3},
		}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "llm_ring_request_seconds",
			Help:    "Time from receiving a request to the end of its answer, by policy.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 16),
		}, []string{"policy"}),
		promptTokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llm_ring_prompt_tokens_total",
			Help: "Prompt tokens reported by replicas: cached (reused from the prompt cache) or processed.",
		}, []string{"kind"}),
		predicted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "llm_ring_predicted_tokens_total",
			Help: "Tokens generated, as reported by replicas.",
		}),
		upstreamErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llm_ring_upstream_errors_total",
			Help: "Replica failures by replica and kind: dial (never reached), timeout (no headers within upstream.response_timeout), status (answered ≥ 500, or 503/429 retried elsewhere), stall (no byte within upstream.idle_timeout), broken (connection lost mid-answer).",
		}, []string{"replica", "kind"}),
		failovers: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "llm_ring_failovers_total",
			Help: "Requests re-routed to the policy's next candidate after a dial error or a 503/429 answer.",
		}),
		cacheLost: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "llm_ring_cache_lost_total",
			Help: "Turns routed to a replica expected to hold their cache that reported reusing less than half of it.",
		}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llm_ring_rejected_total",
			Help: "Requests answered by the router itself with an error, by HTTP status code.",
		}, []string{"code"}),
		bodyBudgetFull: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "llm_ring_body_budget_full_total",
			Help: "Requests refused with 503 because server.max_buffered_body_bytes of request bodies were held.",
		}),
	}
	for _, k := range []string{"cached", "processed"} {
		m.promptTokens.WithLabelValues(k)
	}
	reg.MustRegister(m.requests, m.decision, m.latency, m.promptTokens, m.predicted,
		m.upstreamErrors, m.failovers, m.cacheLost, m.rejected, m.bodyBudgetFull, &stateCollector{table: table},
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "llm_ring_buffered_body_bytes",
			Help: "Request body bytes held now, across all connections (capped by server.max_buffered_body_bytes).",
		}, func() float64 { return float64(budget.held.Load()) }))
	return m
}

// stateCollector exports the routing table's live state at scrape time, so
// the gauges are never out of step with what the policy sees.
type stateCollector struct{ table *state.Table }

var (
	descInflightRequests = prometheus.NewDesc("llm_ring_inflight_requests", "Requests in flight per replica.", []string{"replica"}, nil)
	descInflightTokens   = prometheus.NewDesc("llm_ring_inflight_tokens", "Token load in flight per replica (the policy's charge: cache-aware for llm-aware).", []string{"replica"}, nil)
	descRingShare        = prometheus.NewDesc("llm_ring_ring_share", "Share of the hash space each replica is ring home for.", []string{"replica"}, nil)
	descReplicas         = prometheus.NewDesc("llm_ring_replicas", "Ready replicas on the ring.", nil, nil)
	descHealthy          = prometheus.NewDesc("llm_ring_replica_healthy", "1 while the replica passes its health checks, 0 while it takes no new request.", []string{"replica"}, nil)
	descMemory           = prometheus.NewDesc("llm_ring_placement_entries", "Conversations in placement memory.", nil, nil)
	descPolicy           = prometheus.NewDesc("llm_ring_policy_info", "The routing policy in use (value 1).", []string{"policy"}, nil)
)

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descInflightRequests, descInflightTokens, descRingShare, descHealthy, descReplicas, descMemory, descPolicy} {
		ch <- d
	}
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.table.Status()
	for _, r := range st.Replicas {
		ch <- prometheus.MustNewConstMetric(descInflightRequests, prometheus.GaugeValue, float64(r.Load.Requests), r.Name)
		ch <- prometheus.MustNewConstMetric(descInflightTokens, prometheus.GaugeValue, float64(r.Load.Tokens), r.Name)
		ch <- prometheus.MustNewConstMetric(descRingShare, prometheus.GaugeValue, r.RingShare, r.Name)
		healthy := 0.0
		if r.Healthy {
			healthy = 1
		}
		ch <- prometheus.MustNewConstMetric(descHealthy, prometheus.GaugeValue, healthy, r.Name)
	}
	ch <- prometheus.MustNewConstMetric(descReplicas, prometheus.GaugeValue, float64(len(st.Replicas)))
	ch <- prometheus.MustNewConstMetric(descMemory, prometheus.GaugeValue, float64(st.Memory))
	ch <- prometheus.MustNewConstMetric(descPolicy, prometheus.GaugeValue, 1, st.Policy)
}
