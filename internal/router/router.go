// Package router is llm-ring's live driver: an HTTP proxy in front of
// llama.cpp and OpenAI-compatible replicas. For each request it identifies
// the conversation, routes it through the shared state (state.Table: policy
// pick + load acquire), forwards it with httputil.ReverseProxy (streaming
// passes through unbuffered), reads the replica's token counts from the
// answer, releases the load and feeds placement memory, and logs one JSON
// line with the decision's trace.
package router

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/semaphore"

	"github.com/llm-ring/llm-ring/internal/cluster"
	"github.com/llm-ring/llm-ring/internal/config"
	"github.com/llm-ring/llm-ring/internal/discovery"
	"github.com/llm-ring/llm-ring/internal/policy"
	"github.com/llm-ring/llm-ring/internal/prefix"
	"github.com/llm-ring/llm-ring/internal/signals"
	"github.com/llm-ring/llm-ring/internal/state"
	"github.com/llm-ring/llm-ring/internal/wire"
)

// Response headers set on every proxied answer, streaming included.
const (
	HeaderRoutedTo    = "x-routed-to"
	HeaderRouteReason = "x-route-reason"
	// HeaderEstPrompt carries the router's prompt token estimate (the figure
	// its decision used), so clients and experiments can compare it with the
	// replica's count.
	HeaderEstPrompt = "x-est-prompt-tokens"
)

// Options configure a Router.
type Options struct {
	Config *config.Router
	Logger *slog.Logger // nil: discard
	// Transport reaches the replicas; nil builds one from Config.Upstream.
	Transport http.RoundTripper
	// NodeName names this instance among its cluster peers; "" uses the
	// host name (the pod name on Kubernetes).
	NodeName string
}

// Router is the HTTP router. It is an http.Handler.
type Router struct {
	cfg     *config.Router
	log     *slog.Logger
	table   *state.Table
	reg     *prometheus.Registry
	metrics *metrics
	proxy   *httputil.ReverseProxy
	base    http.RoundTripper
	rules   keyRules
	mux     *http.ServeMux
	budget  bodyBudget

	hashers  sync.Pool        // *prefix.Hasher, one per request in flight
	scraper  *signals.Scraper // the replicas' /metrics; nil when signals.interval is 0
	mu       sync.Mutex       // guards policy settings (admin API)
	name     string
	settings policy.Settings

	draining atomic.Bool // readiness fails: Serve is shutting down
	// Every proxied request's context ends with flights: Serve cancels it
	// (stopFlights) to cut the requests still running when the grace ends.
	flights     context.Context
	stopFlights context.CancelFunc
	cut         atomic.Bool  // stopFlights was called
	inflight    atomic.Int64 // proxied requests being handled

	admin      *http.ServeMux
	adminToken [sha256.Size]byte // sha256 of the admin bearer token
	hasToken   bool
	node       *cluster.Node // the gossip membership; nil when cluster.mode is none
}

// New builds a Router with no replicas; feed it with SetReplicas (or Serve
// with a discovery source).
func New(opts Options) (*Router, error) {
	cfg := opts.Config
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	pol, err := cfg.NewPolicy()
	if err != nil {
		return nil, err
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &Router{
		cfg:      cfg,
		log:      log,
		table:    state.New(cfg.StateConfig(), pol),
		reg:      prometheus.NewRegistry(),
		base:     opts.Transport,
		name:     cfg.Policy,
		settings: policy.SettingsOf(pol),
		rules: keyRules{
			headers:     cfg.ConversationKey.Headers,
			bodyField:   cfg.ConversationKey.BodyField,
			prefixChars: cfg.ConversationKey.PrefixChars,
			defaultMax:  cfg.DefaultMaxTokens,
			blockChars:  cfg.PrefixIndex.BlockChars,
			maxOutput:   cfg.MaxOutputTokens,
		},
	}
	r.flights, r.stopFlights = context.WithCancel(context.Background())
	r.budget.sem, r.budget.wait = semaphore.NewWeighted(cfg.Server.MaxBufferedBodyBytes), cfg.Server.MaxBufferedBodyWait.D()
	if r.base == nil {
		r.base = &http.Transport{
			Proxy:                 nil,
			DialContext:           (&net.Dialer{Timeout: cfg.Upstream.DialTimeout.D(), KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConns:          1024,
			MaxIdleConnsPerHost:   256,
			IdleConnTimeout:       90 * time.Second,
			ResponseHeaderTimeout: cfg.Upstream.ResponseTimeout.D(),
		}
	}
	r.hashers.New = func() any { return new(prefix.Hasher) }
	r.metrics = newMetrics(r.reg, r.table, &r.budget)
	if r.scraper, err = r.newScraper(); err != nil {
		return nil, err
	}
	r.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	r.proxy = &httputil.ReverseProxy{
		Rewrite:   r.rewrite,
		Transport: roundTripFunc(r.roundTrip),
		// 0: a JSON answer of known length is written through the server's
		// buffer and flushed when it ends; ReverseProxy flushes every write
		// of a stream itself (text/event-stream, or no Content-Length), so
		// each SSE event reaches the client as it comes.
		FlushInterval:  0,
		BufferPool:     copyBuffers{},
		ModifyResponse: r.modifyResponse,
		ErrorHandler:   r.proxyError,
		ErrorLog:       slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	r.mux = http.NewServeMux()
	for _, p := range proxiedPaths {
		r.mux.HandleFunc(p, r.serveProxied)
	}
	r.handleModels()
	for _, p := range []string{"/healthz", "/readyz", "/metrics", "/replicas"} {
		r.mux.HandleFunc(p, func(w http.ResponseWriter, req *http.Request) {
			w.Header().Set("Allow", "GET, HEAD")
			r.fail(w, &httpError{http.StatusMethodNotAllowed, wire.ErrTypeInvalidRequest, p + " accepts GET only"})
		})
	}
	r.mux.HandleFunc("GET /healthz", r.serveHealth)
	r.mux.HandleFunc("GET /readyz", r.serveReady)
	r.mux.Handle("GET /metrics", promhttp.HandlerFor(r.reg, promhttp.HandlerOpts{}))
	r.mux.HandleFunc("GET /replicas", r.serveReplicas)
	// The admin API is never served here (404): it has its own listener.
	r.mux.HandleFunc("/", func(w http.ResponseWriter, req *http.Request) {
		r.fail(w, &httpError{http.StatusNotFound, wire.ErrTypeNotFound,
			fmt.Sprintf("no route for %s %s; llm-ring routes POST %s, and GET %s", req.Method, clip(req.URL.Path, 128),
				strings.Join(proxiedPaths, ", "), strings.Join(modelsPaths, ", "))})
	})
	if err := r.newCluster(opts.NodeName); err != nil {
		return nil, err
	}
	if err := r.initAdmin(); err != nil {
		return nil, err
	}
	return r, nil
}

// ServeHTTP implements http.Handler.
func (r *Router) ServeHTTP(w http.ResponseWriter, req *http.Request) { r.mux.ServeHTTP(w, req) }

// Table is the routing state (for tests and the experiment runner).
func (r *Router) Table() *state.Table { return r.table }

// Registry is the router's Prometheus registry.
func (r *Router) Registry() *prometheus.Registry { return r.reg }

// SetReplicas replaces the replica set (a discovery update) and logs a
// replicas_changed event when it changed.
func (r *Router) SetReplicas(rs []discovery.Replica) {
	if !r.table.SetReplicas(rs) {
		return
	}
	r.scrapeTargets()
	names := make([]string, len(rs))
	for i, x := range discovery.Normalize(rs) {
		names[i] = x.Name
	}
	r.log.Info("replicas_changed", slog.Int("count", len(names)), slog.Any("replicas", names))
}

// Serve serves HTTP on ln and follows src until ctx is done, then drains
// as Kubernetes expects: readiness fails at once, the listener keeps
// accepting and serving for shutdown_delay (while the endpoint is removed
// everywhere), then it closes and in-flight requests have up to
// shutdown_grace to finish; those still running are cut, and logged as
// cut. Serve returns nil once every request has ended. A discovery source
// that fails is an error.
func (r *Router) Serve(ctx context.Context, ln net.Listener, src discovery.Source) error {
	// Discovery and health checks go on while draining.
	bg, stopBg := context.WithCancel(context.WithoutCancel(ctx))
	defer stopBg()
	srv := r.newServer(r)
	errc := make(chan error, 4)
	stopCluster := r.runCluster(bg, errc)
	defer stopCluster() // after the drain below: peers count this instance's requests until they end
	go func() {
		if err := src.Run(bg, r.SetReplicas); err != nil {
			errc <- fmt.Errorf("discovery: %w", err)
		}
	}()
	go r.runHealthChecks(bg)
	if r.scraper != nil {
		go func() {
			if err := r.scraper.Run(bg); err != nil {
				errc <- fmt.Errorf("signals: %w", err)
			}
		}()
	}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errc <- err
		}
	}()
	r.log.Info("listening", slog.String("addr", ln.Addr().String()), slog.String("policy", r.cfg.Policy))
	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errc:
	}
	r.draining.Store(true)
	delay, grace := r.cfg.ShutdownDelay.D(), r.cfg.ShutdownGrace.D()
	r.log.Info("shutting down", slog.Duration("delay", delay), slog.Duration("grace", grace))
	if runErr == nil && delay > 0 {
		select {
		case <-time.After(delay):
		case runErr = <-errc:
		}
	}
	sctx, scancel := context.WithTimeout(context.Background(), grace)
	defer scancel()
	if err := srv.Shutdown(sctx); err != nil {
		r.log.Warn("grace period over; cutting the requests still running", slog.Int64("requests", r.inflight.Load()))
		r.cut.Store(true)
		r.stopFlights()
		srv.Close()
	}
	// Wait for the cut requests' handlers to log them.
	for deadline := time.Now().Add(5 * time.Second); r.inflight.Load() > 0 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	return runErr
}

// newServer returns an HTTP server for h with the client-side limits:
// server.read_timeout for a whole request (the proxy lifts it once a body is
// read, so that it never cuts an answer) and server.idle_timeout for
// keep-alive connections.
func (r *Router) newServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:     h,
		ReadTimeout: r.cfg.Server.ReadTimeout.D(),
		IdleTimeout: r.cfg.Server.IdleTimeout.D(),
		ErrorLog:    slog.NewLogLogger(r.log.Handler(), slog.LevelWarn),
	}
}

// flight is one proxied request, from routing to release.
type flight struct {
	ctx    context.Context // the request's, ended by the client or by a cut
	start  time.Time
	kind   apiKind
	path   string        // the request's path, as logged
	pol    policy.Policy // routes with this policy instead of the configured one (nil: configured)
	in     state.Input
	p      parsed
	body   []byte
	ticket state.Ticket
	d      policy.Decision
	held   bool // ticket not yet released
	// injected: the router added stream_options.include_usage to the body
	// (prepareStream); the answer's usage-only chunk is removed again.
	injected bool
	failed   []string
	tries    int

	status  int    // HTTP status sent to the client
	errKind string // upstream error kind, if any
	errMsg  string
	obs     *observer
	out     state.Outcome  // what the ticket was released with
	fb      state.Feedback // what the release learned
}

// convo is the conversation as logged: a short hash of its key, never the
// key itself (it may be a user's e-mail address, and is as long as a client
// makes it).
func (f *flight) convo() string {
	var b [16]byte
	h := f.in.Hash
	for i := len(b) - 1; i >= 0; i-- {
		b[i] = "0123456789abcdef"[h&15]
		h >>= 4
	}
	return string(b[:])
}

type flightKey struct{}

func flightOf(ctx context.Context) *flight { f, _ := ctx.Value(flightKey{}).(*flight); return f }

func (r *Router) serveProxied(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		r.fail(w, &httpError{http.StatusMethodNotAllowed, wire.ErrTypeInvalidRequest, req.URL.Path + " accepts POST only"})
		return
	}
	r.inflight.Add(1)
	defer r.inflight.Add(-1)
	ctx, cancel := context.WithCancel(req.Context())
	defer cancel()
	defer context.AfterFunc(r.flights, cancel)()
	req = req.WithContext(ctx)
	start := time.Now()
	body, held, ok := r.readRequestBody(w, req)
	if !ok {
		return
	}
	defer r.budget.release(held) // after finish: the body is kept for retries until the answer ends
	kind := kindOf(req.URL.Path)
	var hs *prefix.Hasher
	if r.rules.blockChars > 0 {
		hs = r.hashers.Get().(*prefix.Hasher)
		hs.Reset(r.rules.blockChars)
		defer r.hashers.Put(hs) // after finish (deferred below): the ticket holds its blocks until then
	}
	f, err := r.newFlight(ctx, kind, req, body, hs)
	if err != nil {
		r.fail(w, err)
		return
	}
	f.start = start
	t0 := time.Now()
	f.ticket, f.d, err = r.route(f, t0.UnixNano())
	r.metrics.decision.Observe(time.Since(t0).Seconds())
	if err != nil {
		r.fail(w, &httpError{http.StatusServiceUnavailable, wire.ErrTypeUnavailable, "no ready replica to serve the request"})
		return
	}
	f.held = true
	// Deferred: ReverseProxy aborts the handler with a panic when the replica's
	// body breaks off mid-answer, and the load must be released then too.
	defer r.finish(req.Context(), f)
	r.proxy.ServeHTTP(w, req.WithContext(context.WithValue(req.Context(), flightKey{}, f)))
}

// rewrite points the outgoing request at the picked replica.
func (r *Router) rewrite(pr *httputil.ProxyRequest) {
	f := flightOf(pr.In.Context())
	if err := f.target(pr.Out); err != nil {
		// The URL came from discovery and was validated; keep the request
		// failing visibly rather than sending it anywhere else.
		pr.Out.URL = &url.URL{Scheme: "http", Host: "invalid.invalid"}
	}
	pr.SetXForwarded()
}

// target sets out's URL, Host and body for the flight's current replica.
func (f *flight) target(out *http.Request) error {
	base, err := url.Parse(f.ticket.Replica.URL)
	if err != nil {
		return err
	}
	u := *base
	u.Path = strings.TrimSuffix(base.Path, "/") + out.URL.Path
	u.RawPath = ""
	u.RawQuery = out.URL.RawQuery
	out.URL = &u
	out.Host = u.Host
	out.Body = io.NopCloser(bytes.NewReader(f.body))
	out.ContentLength = int64(len(f.body))
	out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(f.body)), nil }
	// Idempotent for net/http (an empty Idempotency-Key is not sent): when a
	// kept-alive connection turns out closed by the replica before any
	// answer (it restarted, or timed the connection out), the transport
	// sends the request again on a new one instead of failing it. Inference
	// changes nothing on the replica but its cache, and nothing has reached
	// the client; an answer that has begun is never replayed. A client's own
	// key is forwarded as it is.
	if _, ok := out.Header["Idempotency-Key"]; !ok {
		out.Header["Idempotency-Key"] = nil
	}
	return nil
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// roundTrip sends the request; when the replica cannot be reached (a dial
// error: it never saw the request) or answers 503 or 429 (not ready, or
// busy: nothing has reached the client yet), it asks the policy for its
// next candidate, up to max_attempts, replaying the body. Once a replica
// has begun an answer, it never retries.
func (r *Router) roundTrip(req *http.Request) (*http.Response, error) {
	f := flightOf(req.Context())
	for {
		f.tries++
		resp, err := r.attempt(req)
		if req.Context().Err() != nil {
			return resp, err
		}
		var why string
		switch {
		case err != nil && isDialError(err):
			why = "dial"
		case err == nil && retryable(resp.StatusCode):
			why = "status"
		default:
			return resp, err
		}
		if why == "dial" {
			r.metrics.upstreamErrors.WithLabelValues(f.ticket.Replica.Name, "dial").Inc()
		}
		if f.tries >= r.cfg.Upstream.MaxAttempts {
			return resp, err // the last answer (a 503 or 429) goes to the client as it is
		}
		now := time.Now().UnixNano()
		tk, d, rerr := r.route(f, now, append(f.failed, f.ticket.Replica.Name)...)
		if rerr != nil {
			return resp, err // nobody else to try: report this answer or error
		}
		if resp != nil {
			r.metrics.upstreamErrors.WithLabelValues(f.ticket.Replica.Name, "status").Inc()
			err = fmt.Errorf("answered %s", resp.Status)
			io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
			resp.Body.Close()
		}
		f.failed = append(f.failed, f.ticket.Replica.Name)
		r.settle(f, state.Outcome{}, time.Unix(0, now))
		r.metrics.failovers.Inc()
		r.log.Warn("failover", slog.String("conversation", f.convo()), slog.String("from", f.failed[len(f.failed)-1]),
			slog.String("to", tk.Replica.Name), slog.String("reason", d.Reason.String()), slog.String("error", clip(err.Error(), 256)))
		f.ticket, f.d, f.held = tk, d, true
		req = req.Clone(req.Context())
		if err := f.target(req); err != nil {
			return nil, err
		}
	}
}

func isDialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// modifyResponse tags the answer and starts observing its body.
func (r *Router) modifyResponse(resp *http.Response) error {
	f := flightOf(resp.Request.Context())
	f.status = resp.StatusCode
	resp.Header.Set(HeaderRoutedTo, f.ticket.Replica.Name)
	resp.Header.Set(HeaderRouteReason, f.d.Reason.String())
	resp.Header.Set(HeaderEstPrompt, strconv.Itoa(f.ticket.EstPrompt))
	if resp.StatusCode >= 500 {
		r.metrics.upstreamErrors.WithLabelValues(f.ticket.Replica.Name, "status").Inc()
	}
	body, err := peek(resp.Body)
	if err != nil {
		resp.Body.Close()
		return err // nothing reached the client: proxyError answers (504 when stalled)
	}
	sse := strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream")
	f.obs = newObserver(f.wrapStream(resp, body), sse, resp.ContentLength)
	if f.kind == kindMessages {
		f.obs.parse = messagesCounts
	}
	f.obs.onBreak = func(err error) []byte { return r.broken(f, err) }
	if resp.StatusCode/100 == 2 {
		// Release as soon as the replica has finished, before the last bytes
		// reach the client: a client that sends its next turn the moment the
		// answer ends must find placement memory up to date and the load gone.
		f.obs.done = func(c counts) { r.settle(f, c.outcome(), time.Now()) }
	}
	resp.Body = f.obs
	return nil
}

// proxyError answers when the replica could not be used at all.
func (r *Router) proxyError(w http.ResponseWriter, req *http.Request, err error) {
	f := flightOf(req.Context())
	var he *httpError
	switch {
	case req.Context().Err() != nil && r.cut.Load():
		f.errKind, f.errMsg = "cut", "cut at the end of shutdown_grace"
		f.status = http.StatusServiceUnavailable // the connection is closed; recorded for the log only
		return
	case req.Context().Err() != nil:
		f.errKind, f.errMsg = "client", "client went away: "+err.Error()
		f.status = 499 // nobody is listening; recorded for the log only
		return
	case errors.Is(err, errUpstreamIdle):
		f.errKind = "stall"
		r.metrics.upstreamErrors.WithLabelValues(f.ticket.Replica.Name, "stall").Inc()
		he = &httpError{http.StatusGatewayTimeout, wire.ErrTypeServer,
			fmt.Sprintf("replica %s sent nothing for upstream.idle_timeout (%s)", f.ticket.Replica.Name, r.cfg.Upstream.IdleTimeout.D())}
	case isDialError(err):
		f.errKind = "dial"
		he = &httpError{http.StatusBadGateway, wire.ErrTypeServer,
			fmt.Sprintf("replica %s unreachable after %d attempt(s): %v", f.ticket.Replica.Name, f.tries, err)}
	case isTimeout(err):
		f.errKind = "timeout"
		r.metrics.upstreamErrors.WithLabelValues(f.ticket.Replica.Name, "timeout").Inc()
		he = &httpError{http.StatusGatewayTimeout, wire.ErrTypeServer,
			fmt.Sprintf("replica %s did not answer within upstream.response_timeout (%s)", f.ticket.Replica.Name, r.cfg.Upstream.ResponseTimeout.D())}
	default:
		f.errKind = "broken"
		r.metrics.upstreamErrors.WithLabelValues(f.ticket.Replica.Name, "broken").Inc()
		he = &httpError{http.StatusBadGateway, wire.ErrTypeServer, fmt.Sprintf("replica %s failed: %v", f.ticket.Replica.Name, err)}
	}
	f.status, f.errMsg = he.status, he.msg
	w.Header().Set(HeaderRoutedTo, f.ticket.Replica.Name)
	w.Header().Set(HeaderRouteReason, f.d.Reason.String())
	w.Header().Set(HeaderEstPrompt, strconv.Itoa(f.ticket.EstPrompt))
	r.writeError(w, he)
}

// broken records an answer that broke off after its headers reached the
// client (the replica died, or stalled past upstream.idle_timeout) and
// returns the SSE error event the client gets before the stream is closed.
func (r *Router) broken(f *flight, err error) []byte {
	switch {
	case f.ctx.Err() != nil && r.cut.Load():
		f.errKind, f.errMsg, f.status = "cut", "cut at the end of shutdown_grace", http.StatusServiceUnavailable
		return errorEvent(f.status, "the router is shutting down: "+f.errMsg)
	case f.ctx.Err() != nil:
		f.errKind, f.errMsg = "client", "client disconnected before the answer ended"
		return nil
	}
	if errors.Is(err, errUpstreamIdle) {
		f.errKind, f.status = "stall", http.StatusGatewayTimeout
		f.errMsg = fmt.Sprintf("replica %s sent nothing for upstream.idle_timeout (%s)", f.ticket.Replica.Name, r.cfg.Upstream.IdleTimeout.D())
	} else {
		f.errKind, f.status = "broken", http.StatusBadGateway
		f.errMsg = fmt.Sprintf("replica %s's answer broke off: %v", f.ticket.Replica.Name, err)
	}
	r.metrics.upstreamErrors.WithLabelValues(f.ticket.Replica.Name, f.errKind).Inc()
	return errorEvent(f.status, f.errMsg)
}

func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}

// settle releases the flight's ticket, once, and feeds placement memory
// with the outcome.
func (r *Router) settle(f *flight, out state.Outcome, now time.Time) {
	if !f.held {
		return
	}
	if f.pol != nil {
		out = state.Outcome{} // placement does not matter: return the load, learn nothing
	}
	if out.OK {
		out.Latency = now.Sub(f.start)
		if f.obs != nil && !f.obs.first.IsZero() {
			out.TTFT = f.obs.first.Sub(f.start)
		}
	}
	f.fb = r.table.Release(&f.ticket, out, now.UnixNano())
	f.out, f.held = out, false
	r.flushCluster()
}

// finish releases the load if the answer's end did not already, and logs
// the request.
func (r *Router) finish(ctx context.Context, f *flight) {
	now := time.Now()
	var out state.Outcome
	var c counts
	complete := f.obs != nil && f.obs.complete()
	if f.obs != nil {
		c = f.obs.counts()
		if !complete && f.errKind == "" {
			switch {
			case ctx.Err() != nil && r.cut.Load():
				f.errKind, f.errMsg, f.status = "cut", "cut at the end of shutdown_grace", http.StatusServiceUnavailable
			case ctx.Err() != nil:
				f.errKind, f.errMsg = "client", "client disconnected before the answer ended"
			default:
				f.errKind, f.errMsg, f.status = "broken", "the replica's answer broke off", http.StatusBadGateway
				r.metrics.upstreamErrors.WithLabelValues(f.ticket.Replica.Name, "broken").Inc()
			}
		}
	}
	if complete && f.status/100 == 2 {
		out = c.outcome()
	}
	r.settle(f, out, now)
	out, fb := f.out, f.fb
	policyName := f.d.Trace.Policy
	code := statusLabel(f.status)
	r.metrics.requests.WithLabelValues(policyName, f.ticket.Replica.Name, f.d.Reason.String(), code).Inc()
	latency := now.Sub(f.start)
	r.metrics.latency.WithLabelValues(policyName).Observe(latency.Seconds())
	if out.Known {
		r.metrics.promptTokens.WithLabelValues("cached").Add(float64(out.CacheN))
		r.metrics.promptTokens.WithLabelValues("processed").Add(float64(out.PromptN))
		r.metrics.predicted.Add(float64(out.PredictedN))
	}
	if fb.CacheLost {
		r.metrics.cacheLost.Inc()
	}
	level := slog.LevelInfo
	if f.errKind != "" && f.errKind != "client" || f.status >= 500 {
		level = slog.LevelWarn
	}
	if !r.log.Enabled(ctx, level) {
		return
	}
	attrs := []slog.Attr{
		slog.String("conversation", f.convo()),
		slog.String("key_source", f.p.keySource),
		slog.Int("turn", f.p.turn),
		slog.String("path", f.path),
		slog.Bool("stream", f.p.stream),
		slog.String("policy", policyName),
		slog.String("replica", f.ticket.Replica.Name),
		slog.String("cached_on", f.ticket.CachedOn),
		slog.String("reason", f.d.Reason.String()),
		slog.Int("est_prompt_tokens", f.ticket.EstPrompt),
		slog.Int64("charge", f.ticket.Charge),
		slog.Int("expect_cached", f.ticket.ExpectCached),
		slog.Bool("counts_known", out.Known),
		slog.Int("cache_n", c.cacheN),
		slog.Int("prompt_n", c.promptN),
		slog.Int("predicted_n", c.predictedN),
		slog.Bool("cache_lost", fb.CacheLost),
		slog.Int("status", f.status),
		slog.Float64("latency_ms", ms(latency)),
		slog.Int("attempts", f.tries),
	}
	if f.obs != nil && !f.obs.first.IsZero() {
		attrs = append(attrs, slog.Float64("ttft_ms", ms(f.obs.first.Sub(f.start))))
	}
	if f.errKind != "" {
		attrs = append(attrs, slog.String("error_kind", f.errKind), slog.String("error", clip(f.errMsg, 512)))
	}
	attrs = append(attrs, slog.String("trace", clip(f.d.Format(), 4096)))
	r.log.LogAttrs(ctx, level, "request", attrs...)
}

// statusLabel is an HTTP status as a metric label, without allocating for
// the usual ones.
func statusLabel(status int) string {
	if status >= 100 && status < 600 {
		return statusLabels[status-100]
	}
	return strconv.Itoa(status)
}

var statusLabels = func() (s [500]string) {
	for i := range s {
		s[i] = strconv.Itoa(i + 100)
	}
	return s
}()

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// fail answers a request the router refuses itself.
func (r *Router) fail(w http.ResponseWriter, err error) {
	var he *httpError
	if !errors.As(err, &he) {
		he = &httpError{http.StatusInternalServerError, wire.ErrTypeServer, err.Error()}
	}
	r.metrics.rejected.WithLabelValues(statusLabel(he.status)).Inc()
	r.writeError(w, he)
}

// writeError is the one place an error becomes an HTTP answer: OpenAI-style
// {"error": {"code", "message", "type"}}.
func (r *Router) writeError(w http.ResponseWriter, he *httpError) {
	writeJSON(w, he.status, wire.NewError(he.status, he.typ, he.msg))
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false) // messages say "> 0", not "\u003e 0"
	enc.Encode(v)
}
