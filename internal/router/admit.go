package router

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
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

// admitter drives the pure admission.Controller for the live router and
// the endpoint picker (Flight.Admit): one Controller per pool (the table a
// request is routed on: saturation, queue and pending are the pool's), one
// set of token budgets for all (a flow's budget is the flow's, whatever
// model it asks for), one set of metrics.
//
// Locking: mu guards pools, waiters, seq and kv; it is taken after no
// other lock but the router's policy lock (r.mu: the facts' apply calls
// kvTokens) and released before any network write. A table's lock is taken
// under mu (LoadView), never the other way round.
type admitter struct {
	cfg     config.Admission
	s       admission.Settings
	model   *policy.Predictive // predicts a request's service time (policy.ServiceTime)
	hdr     config.AdmissionHeaders
	log     *slog.Logger
	mu      sync.Mutex
	budgets *admission.Budgets
	pools   map[*state.Table]*admPool
	order   []*admPool // in creation order (the status page)
	waiters map[uint64]chan admission.Verdict
	seq     uint64
	kv      map[*state.Table]float64 // each pool's KV pool, tokens, from its replicas' facts (admit_facts.go)

	queueLen   prometheus.Gauge
	queueBytes prometheus.Gauge
	saturation prometheus.Gauge
	wait       prometheus.Histogram
	outcomes   *prometheus.CounterVec
}

// admPool is the admission state of one pool.
type admPool struct {
	table   *state.Table
	c       *admission.Controller
	pending int                   // dispatched from the queue, not yet routed (routed())
	cached  admission.CachedShare // the answers' share of cached prompt tokens (service)
}

// newAdmitter returns nil when admission is off (nothing is registered);
// table is the pool it starts with (others join on their first request).
// The service-time model is predictive's, with the configuration's
// policies.predictive settings, whatever policy routes.
func newAdmitter(rc *config.Router, table *state.Table, reg prometheus.Registerer, log *slog.Logger) (*admitter, error) {
	cfg := rc.Admission
	s, err := cfg.Settings()
	if err != nil || !s.Enabled {
		return nil, err
	}
	ps, err := rc.PolicySettings("predictive")
	if err != nil {
		return nil, err
	}
	model, _ := ps.(*policy.Predictive)
	if model == nil {
		model = policy.DefaultPredictive()
	}
	a := &admitter{cfg: cfg, s: s, model: model, hdr: cfg.Headers.Names(), log: log, budgets: admission.NewBudgets(&s),
		pools: map[*state.Table]*admPool{}, waiters: map[uint64]chan admission.Verdict{}, kv: map[*state.Table]float64{}}
	a.pool(table)
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

// pool returns table's admission state, creating it (a.mu held, or
// before the admitter is shared).
func (a *admitter) pool(table *state.Table) *admPool {
	p := a.pools[table]
	if p == nil {
		p = &admPool{table: table, c: admission.NewShared(a.s, a.budgets)}
		p.c.SetKVTokens(a.kv[table])
		p.c.SetSLO(int64(a.cfg.DefaultSLOTTFT))
		p.c.SetTPOT(int64(a.cfg.DefaultSLOTPOT))
		a.pools[table] = p
		a.order = append(a.order, p)
	}
	return p
}

// item reads what a request says about itself.
func (a *admitter) item(h http.Header, f *flight, now int64) admission.Item {
	it := admission.Item{Arrived: now, Bytes: int64(len(f.body)), Priority: a.cfg.DefaultPriority,
		Flow: h.Get(a.hdr.FairnessID), Tokens: int64(f.in.Chars/4 + f.in.OutputTokens)}
	if f.in.Tokens > 0 {
		it.Tokens = int64(f.in.Tokens + f.in.OutputTokens)
	}
	if p, ok := a.cfg.Objectives[h.Get(a.hdr.Objective)]; ok {
		it.Priority = p
	}
	slo := time.Duration(a.cfg.DefaultSLOTTFT)
	if ms, err := strconv.ParseFloat(h.Get(a.hdr.SLOTTFTMs), 64); err == nil && ms > 0 {
		slo = time.Duration(ms * float64(time.Millisecond))
	}
	if slo > 0 {
		it.Deadline = now + int64(slo)
	}
	return it
}

// service predicts it's time from dispatch to first token on the pool's
// best replica now (a.mu held); only a request with a deadline needs it.
func (a *admitter) service(p *admPool, f *flight, now int64) int64 {
	prompt := f.in.Chars / 4
	if f.in.Tokens > 0 {
		prompt = f.in.Tokens
	}
	if p.c.LedgerService() { // the work ledger's backlog and rates (admission.Ledger.Service)
		l := p.c.Ledger()
		return int64(p.table.LoadView(now, func(v *policy.View) float64 { return float64(l.Service(v, prompt)) }))
	}
	prompt = p.cached.New(prompt) // the view has no matches: the pool's recent cached share
	return int64(p.table.LoadView(now, func(v *policy.View) float64 {
		return float64(policy.ServiceTime(a.model, v, prompt))
	}))
}

// score reads the pool's saturation score from its table (a.mu held).
func (a *admitter) score(p *admPool, now int64) float64 {
	c := p.c
	score := p.table.LoadView(now, func(v *policy.View) float64 { return c.Score(v, p.pending) })
	a.saturation.Set(score)
	return score
}

// admit decides for one proxied request, on its pool's table
// (f.table()), and, when it must wait, waits. It returns true when the
// request goes on to routing; otherwise it has answered the client (shed)
// or the client is gone (cancelled), and nothing reached a replica.
func (a *admitter) admit(ctx context.Context, w http.ResponseWriter, req *http.Request, f *flight) (admitted, bool) {
	ad, shed, ok := a.decide(ctx, req.Header, f, f.table())
	if shed != nil {
		a.shed(w, f, *shed)
	}
	return ad, ok
}

// decide is admission for either driver: ok, the request goes on to
// routing; else shed is the verdict to answer, or nil when the client went
// away while it waited.
func (a *admitter) decide(ctx context.Context, h http.Header, f *flight, table *state.Table) (ad admitted, shed *admission.Verdict, ok bool) {
	now := time.Now().UnixNano()
	a.mu.Lock()
	p := a.pool(table)
	a.seq++
	it := a.item(h, f, now)
	it.ID = a.seq
	if it.Deadline > 0 {
		it.Service = a.service(p, f, now)
	}
	v, out, displaced := p.c.OfferScore(it, now, a.score(p, now))
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
	ad = admitted{on: true, id: it.ID, arrived: it.Arrived, tokens: it.Tokens, priority: it.Priority, flow: it.Flow, pool: p}
	switch v.Outcome {
	case admission.Admitted:
		a.outcomes.WithLabelValues("admitted").Inc()
		return ad, nil, true
	case admission.Shed:
		return admitted{}, &v, false
	}
	ad.queued = true
	shed, ok = a.await(ctx, f, it, p, ch)
	ad.wait = time.Since(time.Unix(0, it.Arrived))
	return ad, shed, ok
}

// admitted is what the handler keeps of an admitted request (its log line
// and trace show it).
type admitted struct {
	on       bool
	id       uint64 // the admission item's id: the work ledger's too
	arrived  int64  // when it reached the router (ns; the work ledger's headroom)
	tokens   int64  // charged to its flow's budget (the estimate)
	queued   bool   // let go from the queue: pending until routed
	priority int
	flow     string
	wait     time.Duration // in the queue
	pool     *admPool
}

// appendNote appends the admission line of the request's logged trace
// (without fmt: the text "\n  admission: band %d, flow %q: %s", with "waited
// %.1f ms in the queue" or "admitted at once").
func (ad *admitted) appendNote(dst []byte) []byte {
	dst = append(dst, "\n  admission: band "...)
	dst = strconv.AppendInt(dst, int64(ad.priority), 10)
	dst = append(dst, ", flow "...)
	dst = strconv.AppendQuote(dst, clip(ad.flow, 64))
	if !ad.queued {
		return append(dst, ": admitted at once"...)
	}
	dst = append(dst, ": waited "...)
	dst = strconv.AppendFloat(dst, float64(ad.wait.Microseconds())/1000, 'f', 1, 64)
	return append(dst, " ms in the queue"...)
}

// done runs after an admitted request's answer ended: its flow's budget is
// corrected with the counts the answer reported, the work ledger ends its
// entry and learns its replica's prefill throughput (dispatch: start + the
// wait in the queue; first token: start + its TTFT, the end when no byte
// came), and the released load may let waiting requests of its pool go.
// (The request is unused: the flow is the one admission read.)
func (a *admitter) done(_ *http.Request, f *flight) {
	if a == nil || !f.adm.on {
		return
	}
	now := time.Now().UnixNano()
	out := f.out
	if out.Known {
		a.correct(f.adm.flow, f.adm.tokens, int64(out.CacheN+out.PromptN+out.PredictedN))
	}
	a.mu.Lock()
	l := f.adm.pool.c.Ledger()
	if !out.Known {
		l.Ended(f.adm.id, now)
	} else {
		f.adm.pool.cached.Learn(out.CacheN, out.PromptN)
		if out.TTFT > 0 { // from dispatch: less the wait in the queue
			f.adm.pool.c.ObserveService(int64(out.TTFT-f.adm.wait), now)
		}
		start, first := f.start.UnixNano()+int64(f.adm.wait), now
		if out.TTFT > 0 {
			first = f.start.UnixNano() + int64(out.TTFT)
		}
		cached := out.CacheN
		if out.CachedUnknown { // not reported (vLLM without prompt token details): teaches no share
			cached = -1
		}
		l.Answered(f.adm.id, f.ticket.Replica.Name, start, first, cached, out.PromptN, now)
		if out.TTFT > 0 && out.PredictedN > 1 { // its time per output token (the headroom's decode guard)
			l.Decoded((now - first) / int64(out.PredictedN-1))
		}
	}
	a.mu.Unlock()
	a.kick(f.adm.pool)
}

// await waits for a queued request's verdict: ok, or the shed verdict, or
// neither when ctx ended (the client went away: the request is cancelled).
func (a *admitter) await(ctx context.Context, f *flight, it admission.Item, p *admPool, ch chan admission.Verdict) (*admission.Verdict, bool) {
	tick := time.NewTicker(admitPoll)
	defer tick.Stop()
	for {
		select {
		case v := <-ch:
			if v.Outcome == admission.Admitted {
				a.outcomes.WithLabelValues("admitted-after-wait").Inc()
				a.wait.Observe(time.Since(time.Unix(0, it.Arrived)).Seconds())
				return nil, true
			}
			return &v, false
		case <-ctx.Done():
			a.mu.Lock()
			cancelled := p.c.Cancel(it.ID)
			delete(a.waiters, it.ID)
			a.gauges()
			a.mu.Unlock()
			if !cancelled { // dispatched at the same moment: let the next one go
				a.release(p)
				a.kick(p)
			}
			a.outcomes.WithLabelValues("cancelled").Inc()
			a.log.Info("admission_cancelled", slog.String("conversation", f.convo()), slog.String("path", f.path))
			return nil, false
		case <-tick.C:
			a.kick(p)
		}
	}
}

// kick sheds what expired in pool p and dispatches while it has room.
// Called when an answer ends, by waiting requests on a timer, and on
// cancellation.
func (a *admitter) kick(p *admPool) {
	if a == nil || p == nil {
		return
	}
	now := time.Now().UnixNano()
	a.mu.Lock()
	defer a.mu.Unlock()
	p.c.Expire(now, func(it admission.Item, r admission.Reason) {
		a.tell(it.ID, admission.Verdict{Outcome: admission.Shed, Reason: r})
	})
	for p.c.Len() > 0 {
		it, ok := p.c.DispatchScore(now, a.score(p, now))
		if !ok {
			break
		}
		p.pending++
		a.tell(it.ID, admission.Verdict{Outcome: admission.Admitted})
	}
	a.gauges()
}

// routed says an admitted request has been charged to the table (ok, on
// tk) or never will be: it no longer counts as pending, and a routed one
// enters its pool's work ledger with its estimated prompt less what the
// pick expected cached there, as the simulator records it
// (internal/sim/admit.go).
func (a *admitter) routed(ad admitted, tk *state.Ticket, ok bool) {
	if a == nil || !ad.on {
		return
	}
	if ad.queued {
		a.release(ad.pool)
	}
	if ok {
		a.mu.Lock()
		l := ad.pool.c.Ledger()
		expect := ad.pool.c.Expected(tk.ExpectCached, tk.Match()) // placement memory's, or the prefix index's (work_cached)
		l.Dispatched(ad.id, tk.Replica.Name, l.Uncached(tk.Replica.Name, tk.EstPrompt, expect), expect, time.Now().UnixNano())
		l.Arrived(ad.id, ad.arrived)                // its time to first token includes its wait in the queue (work_target)
		ad.pool.c.Flow(ad.id, ad.priority, ad.flow) // its flow's count in flight (the flow gate)
		a.mu.Unlock()
	}
}

// first runs when the first byte of f's answer came from its replica
// (the observer, observe.go): its prefill is over and leaves the work
// ledger's prefilling work, as the simulator's first-token event does
// (internal/sim/admit.go); with the prefill model that frees capacity,
// and waiting requests of its pool may go. Allocation-free; a no-op with
// admission off or a request it did not see.
func (a *admitter) first(f *flight) {
	if a == nil || !f.adm.on {
		return
	}
	now := time.Now().UnixNano()
	a.mu.Lock()
	freed := f.adm.pool.c.FirstToken(f.adm.id, now)
	a.mu.Unlock()
	if freed {
		a.kick(f.adm.pool)
	}
}

func (a *admitter) release(p *admPool) {
	a.mu.Lock()
	p.pending = max(0, p.pending-1)
	a.mu.Unlock()
}

// tell hands a waiting request its verdict (a.mu held; never blocks).
func (a *admitter) tell(id uint64, v admission.Verdict) {
	if ch := a.waiters[id]; ch != nil {
		ch <- v
		delete(a.waiters, id)
	}
}

// gauges sets the queue gauges: the sums over the pools (a.mu held).
func (a *admitter) gauges() {
	n, b := 0, int64(0)
	for _, p := range a.order {
		n, b = n+p.c.Len(), b+p.c.Bytes()
	}
	a.queueLen.Set(float64(n))
	a.queueBytes.Set(float64(b))
}

// shed answers a refused proxied request (shedAnswer) and logs it.
func (a *admitter) shed(w http.ResponseWriter, f *flight, v admission.Verdict) {
	status, hdr, body := a.shedAnswer(f, v)
	for k, vs := range hdr {
		w.Header()[k] = vs
	}
	w.WriteHeader(status)
	w.Write(body)
}

// shedAnswer is the answer to a shed request, the same from the proxy and
// the endpoint picker: 429 (or the configured 503), Retry-After, the
// reason header and an OpenAI-style error naming the reason. It counts
// and logs the shedding.
func (a *admitter) shedAnswer(f *flight, v admission.Verdict) (int, http.Header, []byte) {
	a.outcomes.WithLabelValues("shed-" + v.Reason.String()).Inc()
	retry := max(1, (v.RetryAfterNs+int64(time.Second)-1)/int64(time.Second))
	status := a.cfg.Status()
	a.log.Info("admission_shed", slog.String("conversation", f.convo()), slog.String("path", f.path),
		slog.String("reason", v.Reason.String()), slog.Int("status", status))
	hdr := http.Header{}
	hdr.Set("Content-Type", "application/json")
	hdr.Set("Retry-After", strconv.FormatInt(retry, 10))
	hdr.Set(HeaderShedReason, v.Reason.String())
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf) // as writeJSON encodes
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	enc.Encode(wire.NewError(status, wire.ErrTypeUnavailable, "request shed by admission control: "+shedText[v.Reason]))
	return status, hdr, buf.Bytes()
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
func (a *admitter) correct(flow string, estimated, actual int64) {
	if actual <= 0 {
		return
	}
	now := time.Now().UnixNano()
	a.mu.Lock()
	a.budgets.Charge(flow, actual-estimated, now)
	a.mu.Unlock()
}

// ShedError is a request admission control refused, as the endpoint
// picker answers it (an immediate response): the proxy's status, headers
// and body for the same verdict.
type ShedError struct {
	FlightError
	Header http.Header // Content-Type, Retry-After, x-llm-ring-shed-reason
	body   []byte
}

// Body is the JSON error, byte for byte the proxy's.
func (e *ShedError) Body() []byte { return e.body }

// ErrCancelled is Admit's answer when the request's context ended while it
// waited in the queue: it never reached a replica, and nothing is to be
// answered (the client is gone).
var ErrCancelled = errors.New("admission: the request's client went away while it waited")

// Admit runs admission control for the Flight (the endpoint picker's
// driver), with the request's headers h: nil, route it now (after waiting
// in the queue, bounded by max_wait or its deadline, if the pool was
// saturated); a *ShedError to answer; or ErrCancelled when the Flight's
// context ended while it waited. With admission off it returns nil at
// once. Call it before Route, once.
func (fl *Flight) Admit(h http.Header) error {
	a, f := fl.r.adm, fl.f
	if a == nil {
		return nil
	}
	ad, shed, ok := a.decide(f.ctx, h, f, f.table())
	f.adm = ad
	switch {
	case ok:
		return nil
	case shed == nil:
		return ErrCancelled
	}
	status, hdr, body := a.shedAnswer(f, *shed) // counted as the proxy counts it
	return &ShedError{FlightError: FlightError{Status: status, Type: wire.ErrTypeUnavailable,
		Msg: "request shed by admission control: " + shedText[shed.Reason]}, Header: hdr, body: body}
}
