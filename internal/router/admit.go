package router

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/llm-ring/llm-ring/internal/admission"
	"github.com/llm-ring/llm-ring/internal/config"
	"github.com/llm-ring/llm-ring/internal/policy"
	"github.com/llm-ring/llm-ring/internal/state"
	"github.com/llm-ring/llm-ring/internal/wire"
)

// HeaderShedReason names why admission refused a request (as the llm-d
// router's x-llm-d-request-dropped-reason does).
const HeaderShedReason = "x-llm-ring-shed-reason"

// admitPoll is how often a waiting request re-checks the pool when nothing
// else woke it (a report may have freed capacity, a deadline may pass).
const admitPoll = 50 * time.Millisecond

// admitter drives the pure admission.Controller for the live router.
//
// Locking: mu guards c, waiters and seq; it is taken after no other lock
// and released before any network write. The table's lock is taken under
// mu (LoadView), never the other way round.
type admitter struct {
	cfg     config.Admission
	hdr     config.AdmissionHeaders
	table   *state.Table
	log     *slog.Logger
	mu      sync.Mutex
	c       *admission.Controller
	waiters map[uint64]chan admission.Verdict
	seq     uint64
	pending int // dispatched from the queue, not yet routed (routed())

	queueLen   prometheus.Gauge
	queueBytes prometheus.Gauge
	saturation prometheus.Gauge
	wait       prometheus.Histogram
	outcomes   *prometheus.CounterVec
}

// newAdmitter returns nil when admission is off (nothing is registered).
func newAdmitter(cfg config.Admission, table *state.Table, reg prometheus.Registerer, log *slog.Logger) (*admitter, error) {
	s, err := cfg.Settings()
	if err != nil || !s.Enabled {
		return nil, err
	}
	a := &admitter{cfg: cfg, hdr: cfg.Headers.Names(), table: table, log: log, c: admission.New(s),
		waiters: map[uint64]chan admission.Verdict{}}
	a.queueLen = prometheus.NewGauge(prometheus.GaugeOpts{Name: "llm_ring_admission_queue_length", Help: "Requests waiting in the router for capacity."})
	a.queueBytes = prometheus.NewGauge(prometheus.GaugeOpts{Name: "llm_ring_admission_queue_bytes", Help: "Body bytes held by waiting requests."})
	a.saturation = prometheus.NewGauge(prometheus.GaugeOpts{Name: "llm_ring_admission_pool_saturation", Help: "The pool's saturation score at the last admission step (1: saturated)."})
	a.wait = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "llm_ring_admission_wait_seconds", Help: "Time admitted requests waited in the router.",
		Buckets: []float64{.001, .005, .01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}})
	a.outcomes = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "llm_ring_admission_total", Help: "Admission outcomes: admitted (at once or after waiting), shed by reason, cancelled."}, []string{"outcome"})
	for _, c := range []prometheus.Collector{a.queueLen, a.queueBytes, a.saturation, a.wait, a.outcomes} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// item reads what a request says about itself.
func (a *admitter) item(req *http.Request, f *flight, now int64) admission.Item {
	it := admission.Item{Arrived: now, Bytes: int64(len(f.body)), Priority: a.cfg.DefaultPriority,
		Flow: req.Header.Get(a.hdr.FairnessID), Tokens: int64(f.in.Chars/4 + f.in.MaxTokens)}
	if f.in.Tokens > 0 {
		it.Tokens = int64(f.in.Tokens + f.in.MaxTokens)
	}
	if p, ok := a.cfg.Objectives[req.Header.Get(a.hdr.Objective)]; ok {
		it.Priority = p
	}
	slo := time.Duration(a.cfg.DefaultSLOTTFT)
	if ms, err := strconv.ParseFloat(req.Header.Get(a.hdr.SLOTTFTMs), 64); err == nil && ms > 0 {
		slo = time.Duration(ms * float64(time.Millisecond))
	}
	if slo > 0 {
		it.Deadline = now + int64(slo)
	}
	return it
}

// saturated reads the pool's score from its table t (a.mu held).
func (a *admitter) saturated(t *state.Table, now int64) bool {
	s := a.c.Settings()
	score := t.LoadView(now, func(v *policy.View) float64 { return admission.PoolScore(v, s, a.pending) })
	a.saturation.Set(score)
	return score >= s.Limit
}

// admit decides for one request and, when it must wait, waits. It returns
// true when the request goes on to routing; otherwise it has answered the
// client (shed) or the client is gone (cancelled), and nothing reached a
// replica.
func (a *admitter) admit(ctx context.Context, w http.ResponseWriter, req *http.Request, f *flight) (admitted, bool) {
	now := time.Now().UnixNano()
	a.mu.Lock()
	a.seq++
	it := a.item(req, f, now)
	it.ID = a.seq
	v, out, displaced := a.c.Offer(it, now, a.saturated(f.table(), now))
	var ch chan admission.Verdict
	if v.Outcome == admission.Queued {
		ch = make(chan admission.Verdict, 1)
		a.waiters[it.ID] = ch
	}
	if displaced {
		a.tell(out.ID, admission.Verdict{Outcome: admission.Shed, Reason: admission.Displaced})
	}
	a.gauges()
	a.mu.Unlock()
	switch v.Outcome {
	case admission.Admitted:
		a.outcomes.WithLabelValues("admitted").Inc()
		return admitted{on: true, tokens: it.Tokens, priority: it.Priority, flow: it.Flow}, true
	case admission.Shed:
		a.shed(w, f, v)
		return admitted{}, false
	}
	ok := a.await(ctx, w, f, it, ch)
	return admitted{on: true, tokens: it.Tokens, queued: true, priority: it.Priority, flow: it.Flow,
		wait: time.Since(time.Unix(0, it.Arrived))}, ok
}

// admitted is what the handler keeps of an admitted request (its log line
// and trace show it).
type admitted struct {
	on       bool
	tokens   int64 // charged to its flow's budget (the estimate)
	queued   bool  // let go from the queue: pending until routed
	priority int
	flow     string
	wait     time.Duration // in the queue
}

// note is the admission line of the request's logged trace.
func (ad *admitted) note() string {
	how := "admitted at once"
	if ad.queued {
		how = fmt.Sprintf("waited %.1f ms in the queue", float64(ad.wait.Microseconds())/1000)
	}
	return fmt.Sprintf("\n  admission: band %d, flow %q: %s", ad.priority, clip(ad.flow, 64), how)
}

// done runs after an admitted request's answer ended: its flow's budget is
// corrected with the counts the answer reported, and the released load may
// let waiting requests go.
func (a *admitter) done(req *http.Request, f *flight) {
	if out := f.out; out.Known {
		a.correct(req, f.adm.tokens, int64(out.CacheN+out.PromptN+out.PredictedN))
	}
	a.kick(f.table())
}

// await waits for a queued request's verdict.
func (a *admitter) await(ctx context.Context, w http.ResponseWriter, f *flight, it admission.Item, ch chan admission.Verdict) bool {
	tick := time.NewTicker(admitPoll)
	defer tick.Stop()
	for {
		select {
		case v := <-ch:
			if v.Outcome == admission.Admitted {
				a.outcomes.WithLabelValues("admitted-after-wait").Inc()
				a.wait.Observe(time.Since(time.Unix(0, it.Arrived)).Seconds())
				return true
			}
			a.shed(w, f, v)
			return false
		case <-ctx.Done():
			a.mu.Lock()
			cancelled := a.c.Cancel(it.ID)
			delete(a.waiters, it.ID)
			a.gauges()
			a.mu.Unlock()
			if !cancelled { // dispatched at the same moment: let the next one go
				a.release()
				a.kick(f.table())
			}
			a.outcomes.WithLabelValues("cancelled").Inc()
			a.log.Info("admission_cancelled", slog.String("conversation", f.convo()), slog.String("path", f.path))
			return false
		case <-tick.C:
			a.kick(f.table())
		}
	}
}

// kick sheds what expired and dispatches while the pool has room. Called
// when an answer ends, by waiting requests on a timer, and on cancellation.
func (a *admitter) kick(t *state.Table) {
	if a == nil {
		return
	}
	now := time.Now().UnixNano()
	a.mu.Lock()
	defer a.mu.Unlock()
	a.c.Expire(now, func(it admission.Item, r admission.Reason) {
		a.tell(it.ID, admission.Verdict{Outcome: admission.Shed, Reason: r})
	})
	for a.c.Len() > 0 {
		it, ok := a.c.Dispatch(now, a.saturated(t, now))
		if !ok {
			break
		}
		a.pending++
		a.tell(it.ID, admission.Verdict{Outcome: admission.Admitted})
	}
	a.gauges()
}

// routed says a request let go from the queue has been charged to the table
// (or will never be): it no longer counts as pending.
func (a *admitter) routed(ad admitted) {
	if ad.queued {
		a.release()
	}
}

func (a *admitter) release() {
	a.mu.Lock()
	a.pending = max(0, a.pending-1)
	a.mu.Unlock()
}

// tell hands a waiting request its verdict (a.mu held; never blocks).
func (a *admitter) tell(id uint64, v admission.Verdict) {
	if ch := a.waiters[id]; ch != nil {
		ch <- v
		delete(a.waiters, id)
	}
}

func (a *admitter) gauges() {
	a.queueLen.Set(float64(a.c.Len()))
	a.queueBytes.Set(float64(a.c.Bytes()))
}

// shed answers a refused request: 429 (or the configured 503) with
// Retry-After, an OpenAI-style error naming the reason, and a log line.
func (a *admitter) shed(w http.ResponseWriter, f *flight, v admission.Verdict) {
	a.outcomes.WithLabelValues("shed-" + v.Reason.String()).Inc()
	retry := max(1, (v.RetryAfterNs+int64(time.Second)-1)/int64(time.Second))
	w.Header().Set("Retry-After", strconv.FormatInt(retry, 10))
	w.Header().Set(HeaderShedReason, v.Reason.String())
	status := a.cfg.Status()
	a.log.Info("admission_shed", slog.String("conversation", f.convo()), slog.String("path", f.path),
		slog.String("reason", v.Reason.String()), slog.Int("status", status))
	writeJSON(w, status, wire.NewError(status, wire.ErrTypeUnavailable, "request shed by admission control: "+shedText[v.Reason]))
}

var shedText = map[admission.Reason]string{
	admission.QueueFull: "the replicas are saturated and the router's queue is full",
	admission.Displaced: "the replicas are saturated and a higher-priority request took its place in the queue",
	admission.Deadline:  "its time-to-first-token SLO cannot be met",
	admission.Timeout:   "it waited the longest allowed for capacity",
	admission.Budget:    "its flow's token budget is spent",
}

// correct gives back (or takes) the difference between the tokens charged
// to a flow's budget on admission and what the answer reported.
func (a *admitter) correct(req *http.Request, estimated, actual int64) {
	if a == nil || actual <= 0 {
		return
	}
	now := time.Now().UnixNano()
	a.mu.Lock()
	a.c.Budgets().Charge(req.Header.Get(a.hdr.FairnessID), actual-estimated, now)
	a.mu.Unlock()
}
