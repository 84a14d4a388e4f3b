package router

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/llm-ring/llm-ring/internal/policy"
)

// The status board (issue 25) remembers what the status page shows beyond
// the routing table's live state: the last decisions with their traces,
// and per-interval totals of requests, errors, prompt-cache hits and cached
// tokens over the last minutes. It also exports the series the dashboard
// needs that the request path does not count itself: time to first token,
// prompt-cache hits and misses, and the replicas' own reported signals.
// Recording a request takes one lock and copies values: no allocation.

const (
	statusRecent  = 32               // decisions kept for the page
	statusBucket  = 10 * time.Second // width of one history interval
	statusBuckets = 30               // history kept: 5 minutes
)

// decisionRecord is one finished request as the page shows it.
type decisionRecord struct {
	at           time.Time
	conv         uint64
	path         string
	replica      string
	status       int
	attempts     int
	estPrompt    int
	expectCached int
	known        bool
	cacheN       int
	promptN      int
	predictedN   int
	latency      time.Duration
	ttft         time.Duration // 0: no byte came
	errKind      string
	d            policy.Decision // its trace, formatted when the page asks
}

// statusInterval is one history interval's totals.
type statusInterval struct {
	start         int64 // unix seconds of its start; 0 unused
	requests      int
	errors        int // status ≥ 500 or a replica failure
	known         int // answers that reported their token counts
	hits          int // of those, reporting prompt tokens reused from cache
	cachedTokens  int
	promptTokens  int // cached + processed
	ttftSum       time.Duration
	ttftN         int
	latencySum    time.Duration
	latencyN      int
	totalAttempts int
}

type statusBoard struct {
	mu      sync.Mutex
	recent  [statusRecent]decisionRecord
	n       int // requests recorded since start
	history [statusBuckets]statusInterval

	ttft      *prometheus.HistogramVec // by policy
	hits      *prometheus.CounterVec   // by result: hit | miss
	hit, miss prometheus.Counter       // its two children
}

func newStatusBoard(reg prometheus.Registerer, r *Router) *statusBoard {
	b := &statusBoard{
		ttft: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "llm_ring_ttft_seconds",
			Help:    "Time from receiving a request to the replica's first answer byte, by policy.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14),
		}, []string{"policy"}),
		hits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llm_ring_prompt_cache_requests_total",
			Help: "Answered requests that reported their prompt token counts, by result: hit (some prompt tokens reused from the replica's cache) or miss.",
		}, []string{"result"}),
	}
	b.hit, b.miss = b.hits.WithLabelValues("hit"), b.hits.WithLabelValues("miss")
	reg.MustRegister(b.ttft, b.hits, &reportedCollector{r: r})
	return b
}

// record adds a finished flight (called once per proxied request that was
// routed, from finish).
func (b *statusBoard) record(f *flight, c counts, now time.Time) {
	rec := decisionRecord{
		at: now, conv: f.in.Hash, path: f.path, replica: f.ticket.Replica.Name, status: f.status,
		attempts: f.tries, estPrompt: f.ticket.EstPrompt, expectCached: f.ticket.ExpectCached,
		known: c.known && !c.cachedUnknown, cacheN: c.cacheN, promptN: c.promptN, predictedN: c.predictedN,
		latency: now.Sub(f.start), errKind: f.fail.String(), d: f.d,
	}
	if f.obs != nil && !f.obs.first.IsZero() {
		rec.ttft = f.obs.first.Sub(f.start)
		b.ttft.WithLabelValues(f.d.Trace.Policy).Observe(rec.ttft.Seconds())
	}
	if rec.known {
		if rec.cacheN > 0 {
			b.hit.Inc()
		} else {
			b.miss.Inc()
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.recent[b.n%statusRecent] = rec
	b.n++
	iv := b.interval(now)
	iv.requests++
	iv.totalAttempts += rec.attempts
	if rec.status >= 500 || rec.errKind != "" && rec.errKind != "client" {
		iv.errors++
	}
	if rec.known {
		iv.known++
		if rec.cacheN > 0 {
			iv.hits++
		}
		iv.cachedTokens += rec.cacheN
		iv.promptTokens += rec.cacheN + rec.promptN
	}
	if rec.ttft > 0 {
		iv.ttftSum += rec.ttft
		iv.ttftN++
	}
	iv.latencySum += rec.latency
	iv.latencyN++
}

// interval returns the history slot of now's interval, cleared when it
// last held an older one; b.mu is held.
func (b *statusBoard) interval(now time.Time) *statusInterval {
	w := int64(statusBucket / time.Second)
	start := now.Unix() / w * w
	iv := &b.history[(start/w)%statusBuckets]
	if iv.start != start {
		*iv = statusInterval{start: start}
	}
	return iv
}

// snapshot copies the recent decisions (newest first) and the history
// intervals of the last statusBuckets×statusBucket (oldest first, empty
// ones included) as of now.
func (b *statusBoard) snapshot(now time.Time) ([]decisionRecord, []statusInterval) {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := min(b.n, statusRecent)
	recs := make([]decisionRecord, 0, k)
	for i := range k {
		recs = append(recs, b.recent[(b.n-1-i)%statusRecent])
	}
	w := int64(statusBucket / time.Second)
	last := now.Unix() / w * w
	ivs := make([]statusInterval, statusBuckets)
	for i := range statusBuckets {
		start := last - int64(statusBuckets-1-i)*w
		iv := b.history[(start/w)%statusBuckets]
		if iv.start != start {
			iv = statusInterval{start: start}
		}
		ivs[i] = iv
	}
	return recs, ivs
}

// reportedCollector exports what each replica last reported about itself
// (its /metrics, read by the signals scraper), as the policies see it.
type reportedCollector struct{ r *Router }

// Staleness is llm_ring_scrape_last_success_age_seconds (internal/signals).
var descReported = prometheus.NewDesc("llm_ring_replica_reported",
	"A replica's own last reported signal, by signal: running and waiting requests, kv_use (KV cache use, 0-1). Absent while unknown.",
	[]string{"replica", "signal"}, nil)

func (c *reportedCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descReported
}

func (c *reportedCollector) Collect(ch chan<- prometheus.Metric) {
	for _, x := range c.r.view().Replicas {
		rep := x.Reported
		if rep.HasQueue {
			ch <- prometheus.MustNewConstMetric(descReported, prometheus.GaugeValue, rep.Running, x.Name, "running")
			ch <- prometheus.MustNewConstMetric(descReported, prometheus.GaugeValue, rep.Waiting, x.Name, "waiting")
		}
		if rep.HasKV {
			ch <- prometheus.MustNewConstMetric(descReported, prometheus.GaugeValue, rep.KVUse, x.Name, "kv_use")
		}
	}
}

// operator is the Router's issue-25 state (embedded in Router).
type operator struct {
	status     *statusBoard // the status page's records
	tracing    *tracing     // nil when tracing is off (tracing.go)
	statusPage string       // admin.status_path (default "/")
	statusData string       // its status.json, beside it
}

// initOperator builds the status board and, when configured, the tracer
// (called from initAdmin, in New).
func (r *Router) initOperator() error {
	r.status = newStatusBoard(r.reg, r)
	r.statusPage, r.statusData = r.cfg.Admin.StatusPage()
	return r.initTracing()
}

// onFinish is the request path's hook at the end of every routed request
// (finish, after the metrics): c is what the answer reported.
func (r *Router) onFinish(f *flight, c counts, now time.Time) {
	r.status.record(f, c, now)
	r.traceFinish(f, c)
}
