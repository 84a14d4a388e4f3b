package router

import (
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/llm-ring/llm-ring/internal/pool"
	"github.com/llm-ring/llm-ring/internal/wire"
)

// metrics are the router's Prometheus series, on a registry of its own.
type metrics struct {
	requests       *prometheus.CounterVec   // by policy, replica, reason, code, model
	decision       *prometheus.HistogramVec // by model: seconds spent routing (pick + acquire)
	latency        *prometheus.HistogramVec // by policy, model: request latency, seconds
	promptTokens   *prometheus.CounterVec   // by kind: cached | processed
	predicted      prometheus.Counter
	upstreamErrors *prometheus.CounterVec // by replica, kind: dial | timeout | status | stall | broken
	failovers      prometheus.Counter
	cacheLost      prometheus.Counter
	rejected       *prometheus.CounterVec // by code: requests refused before routing
	bodyBudgetFull prometheus.Counter

	cached, processed prometheus.Counter // promptTokens' two children

	seriesMu sync.RWMutex
	series   map[seriesKey]requestSeries // see requestSeries
}

// seriesKey is a finished request's labels: requests_total's five, of
// which request_seconds' two.
type seriesKey struct{ policy, replica, reason, code, model string }

// requestSeries are the children of a label set in requests_total and
// request_seconds.
type requestSeries struct {
	requests prometheus.Counter
	latency  prometheus.Observer
}

// requestSeries is the children of k, looked up in the vectors once per
// label set (issue 21: WithLabelValues validates and hashes every label
// value on every call). A child, once made, is the vector's for good (the
// router deletes no series), so the cache holds no more entries than
// requests_total has series, and a label set's series appears when its
// first request ends, as before.
func (m *metrics) requestSeries(k seriesKey) requestSeries {
	m.seriesMu.RLock()
	s, ok := m.series[k]
	m.seriesMu.RUnlock()
	if ok {
		return s
	}
	s = requestSeries{
		requests: m.requests.WithLabelValues(k.policy, k.replica, k.reason, k.code, k.model),
		latency:  m.latency.WithLabelValues(k.policy, k.model),
	}
	m.seriesMu.Lock()
	m.series[k] = s
	m.seriesMu.Unlock()
	return s
}

// The model label (issue 23) is the pool's bounded label (pool.Pool.Label):
// the model's name for the first models.max_model_labels pools created (16
// by default), "other" for the pools after them, "" for the catch-all pool
// (every request without models configured). A name a request asks for is
// never a label value: an unknown model is refused before any labelled
// series is touched, so clients cannot grow the series.
func newMetrics(reg prometheus.Registerer, r *Router, budget *bodyBudget) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: wire.MetricRequests,
			Help: "Proxied requests by policy, replica, route reason, HTTP status code and model (the pool's bounded label).",
		}, wire.RequestLabels()),
		decision: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "llm_ring_decision_seconds",
			Help:    "Time to route a request: placement lookup, policy pick and load acquire; by model (the pool's bounded label).",
			Buckets: []float64{1e-7, 2.5e-7, 5e-7, 1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 1e-4, 1e-3},
		}, []string{"model"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "llm_ring_request_seconds",
			Help:    "Time from receiving a request to the end of its answer, by policy and model (the pool's bounded label).",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 16),
		}, []string{"policy", "model"}),
		promptTokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: wire.MetricPromptTokens,
			Help: "Prompt tokens reported by replicas: cached (reused from the prompt cache) or processed.",
		}, []string{wire.LabelKind}),
		predicted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: wire.MetricPredictedTokens,
			Help: "Tokens generated, as reported by replicas.",
		}),
		upstreamErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llm_ring_upstream_errors_total",
			Help: "Replica failures by replica and kind: dial (never reached), timeout (no headers within upstream.response_timeout), status (answered ≥ 500, or 503/429 retried elsewhere), stall (no byte within upstream.idle_timeout), broken (connection lost mid-answer).",
		}, []string{"replica", "kind"}),
		failovers: prometheus.NewCounter(prometheus.CounterOpts{
			Name: wire.MetricFailovers,
			Help: "Requests re-routed to the policy's next candidate after a dial error or a 503/429 answer.",
		}),
		cacheLost: prometheus.NewCounter(prometheus.CounterOpts{
			Name: wire.MetricCacheLost,
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
	m.cached, m.processed = m.promptTokens.WithLabelValues(wire.KindCached), m.promptTokens.WithLabelValues(wire.KindProcessed)
	m.series = map[seriesKey]requestSeries{}
	reg.MustRegister(m.requests, m.decision, m.latency, m.promptTokens, m.predicted,
		m.upstreamErrors, m.failovers, m.cacheLost, m.rejected, m.bodyBudgetFull, &stateCollector{r: r},
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "llm_ring_buffered_body_bytes",
			Help: "Request body bytes held now, across all connections (capped by server.max_buffered_body_bytes).",
		}, func() float64 { return float64(budget.held.Load()) }))
	return m
}

// stateCollector exports the routing tables' live state at scrape time, so
// the gauges are never out of step with what the policies see. A replica
// in several pools is one series: its loads summed over them.
type stateCollector struct{ r *Router }

var (
	descInflightRequests = prometheus.NewDesc("llm_ring_inflight_requests", "Requests in flight per replica.", []string{"replica"}, nil)
	descInflightTokens   = prometheus.NewDesc("llm_ring_inflight_tokens", "Token load in flight per replica (the policy's charge: cache-aware for llm-aware).", []string{"replica"}, nil)
	descRingShare        = prometheus.NewDesc("llm_ring_ring_share", "Share of the hash space each replica is ring home for.", []string{"replica"}, nil)
	descReplicas         = prometheus.NewDesc("llm_ring_replicas", "Ready replicas on the ring.", nil, nil)
	descHealthy          = prometheus.NewDesc("llm_ring_replica_healthy", "1 while the replica passes its health checks, 0 while it takes no new request.", []string{"replica"}, nil)
	descMemory           = prometheus.NewDesc("llm_ring_placement_entries", "Conversations in placement memory.", nil, nil)
	descPolicy           = prometheus.NewDesc("llm_ring_policy_info", "The routing policies in use, one series each (value 1): the catch-all pool's and every pool's with replicas.", []string{"policy"}, nil)
)

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descInflightRequests, descInflightTokens, descRingShare, descHealthy, descReplicas, descMemory, descPolicy} {
		ch <- d
	}
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.r.view()
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
	policies := []string{st.Policy}
	for _, p := range st.Pools {
		if p.Replicas > 0 && !slices.Contains(policies, p.Policy) {
			policies = append(policies, p.Policy)
		}
	}
	for _, p := range policies {
		ch <- prometheus.MustNewConstMetric(descPolicy, prometheus.GaugeValue, 1, p)
	}
}

// decisionObserver is the decision histogram of a pool's label, looked up
// once per pool (a request then observes without a label lookup).
func (r *Router) decisionObserver(p *pool.Pool) prometheus.Observer {
	if o, ok := r.decisionObs.Load(p); ok {
		return o.(prometheus.Observer)
	}
	o := r.metrics.decision.WithLabelValues(p.Label())
	r.decisionObs.Store(p, o)
	return o
}
