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
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/llm-ring/llm-ring/internal/cluster"
	"github.com/llm-ring/llm-ring/internal/config"
	"github.com/llm-ring/llm-ring/internal/discovery"
	"github.com/llm-ring/llm-ring/internal/policy"
	"github.com/llm-ring/llm-ring/internal/prefix"
	"github.com/llm-ring/llm-ring/internal/ring"
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

	hashers  sync.Pool        // *prefix.Hasher, one per request in flight
	scraper  *signals.Scraper // the replicas' /metrics; nil when signals.interval is 0
	mu       sync.Mutex       // guards policy settings (admin API)
	name     string
	settings policy.Settings
	node     *cluster.Node // the gossip membership; nil when cluster.mode is none
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
		},
	}
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
	r.metrics = newMetrics(r.reg, r.table)
	if r.scraper, err = r.newScraper(); err != nil {
		return nil, err
	}
	r.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	r.proxy = &httputil.ReverseProxy{
		Rewrite:        r.rewrite,
		Transport:      roundTripFunc(r.roundTrip),
		FlushInterval:  -1, // stream every byte as it comes (SSE)
		ModifyResponse: r.modifyResponse,
		ErrorHandler:   r.proxyError,
		ErrorLog:       slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	r.mux = http.NewServeMux()
	for _, p := range []string{wire.PathCompletion, wire.PathChatCompletions, wire.PathCompletions} {
		r.mux.HandleFunc(p, r.serveProxied)
	}
	r.mux.HandleFunc("GET /healthz", r.serveHealth)
	r.mux.HandleFunc("GET /readyz", r.serveReady)
	r.mux.Handle("GET /metrics", promhttp.HandlerFor(r.reg, promhttp.HandlerOpts{}))
	r.mux.HandleFunc("GET /replicas", r.serveReplicas)
	r.mux.HandleFunc("GET /admin/policy", r.serveGetPolicy)
	r.mux.HandleFunc("PUT /admin/policy", r.servePutPolicy)
	r.mux.HandleFunc("POST /admin/reset", r.serveReset)
	r.mux.HandleFunc("/", func(w http.ResponseWriter, req *http.Request) {
		r.fail(w, &httpError{http.StatusNotFound, wire.ErrTypeNotFound,
			fmt.Sprintf("no route for %s %s; llm-ring proxies POST %s, %s and %s", req.Method, req.URL.Path,
				wire.PathCompletion, wire.PathChatCompletions, wire.PathCompletions)})
	})
	if err := r.newCluster(opts.NodeName); err != nil {
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

// Serve serves HTTP on ln and follows src until ctx is done, then stops
// accepting, lets in-flight requests finish for up to shutdown_grace, and
// returns nil. A discovery source that fails is an error.
func (r *Router) Serve(ctx context.Context, ln net.Listener, src discovery.Source) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	srv := &http.Server{Handler: r, ReadHeaderTimeout: 30 * time.Second, ErrorLog: slog.NewLogLogger(r.log.Handler(), slog.LevelWarn)}
	errc := make(chan error, 4)
	stopCluster := r.runCluster(ctx, errc)
	defer stopCluster() // after the drain below
	go func() {
		if err := src.Run(ctx, r.SetReplicas); err != nil {
			errc <- fmt.Errorf("discovery: %w", err)
		}
	}()
	if r.scraper != nil {
		go func() {
			if err := r.scraper.Run(ctx); err != nil {
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
	grace := r.cfg.ShutdownGrace.D()
	r.log.Info("shutting down", slog.Duration("grace", grace))
	sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), grace)
	defer scancel()
	if err := srv.Shutdown(sctx); err != nil {
		r.log.Warn("grace period over; closing remaining connections", slog.Any("error", err))
		srv.Close()
	}
	return runErr
}

// flight is one proxied request, from routing to release.
type flight struct {
	start  time.Time
	kind   apiKind
	in     state.Input
	p      parsed
	body   []byte
	ticket state.Ticket
	d      policy.Decision
	held   bool // ticket not yet released
	failed []string
	tries  int

	status  int    // HTTP status sent to the client
	errKind string // upstream error kind, if any
	errMsg  string
	obs     *observer
	out     state.Outcome  // what the ticket was released with
	fb      state.Feedback // what the release learned
}

type flightKey struct{}

func flightOf(ctx context.Context) *flight { f, _ := ctx.Value(flightKey{}).(*flight); return f }

func (r *Router) serveProxied(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		r.fail(w, &httpError{http.StatusMethodNotAllowed, wire.ErrTypeInvalidRequest, req.URL.Path + " accepts POST only"})
		return
	}
	start := time.Now()
	body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, r.cfg.MaxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			r.fail(w, &httpError{http.StatusRequestEntityTooLarge, wire.ErrTypeInvalidRequest,
				fmt.Sprintf("request body exceeds max_body_bytes (%d bytes)", r.cfg.MaxBodyBytes)})
			return
		}
		r.fail(w, badRequest("could not read the request body: %v", err))
		return
	}
	kind := kindOf(req.URL.Path)
	var hs *prefix.Hasher
	if r.rules.blockChars > 0 {
		hs = r.hashers.Get().(*prefix.Hasher)
		hs.Reset(r.rules.blockChars)
		defer r.hashers.Put(hs) // after finish (deferred below): the ticket holds its blocks until then
	}
	p, err := parseRequest(kind, req.Header, body, &r.rules, hs)
	if err != nil {
		r.fail(w, err)
		return
	}
	f := &flight{start: start, kind: kind, p: p, body: body,
		in: state.Input{Key: p.key, Hash: ring.HashString(p.key), Chars: p.chars, Tokens: p.tokens, MaxTokens: p.maxTokens,
			Blocks: p.blocks, FirstUser: p.firstUser}}
	t0 := time.Now()
	f.ticket, f.d, err = r.table.Route(f.in, t0.UnixNano())
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
	return nil
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// roundTrip sends the request; when the replica cannot be reached (a dial
// error: it never saw the request) it asks the policy for its next candidate,
// up to max_attempts. Once bytes may have reached a replica, it never retries.
func (r *Router) roundTrip(req *http.Request) (*http.Response, error) {
	f := flightOf(req.Context())
	for {
		f.tries++
		resp, err := r.base.RoundTrip(req)
		if err == nil || !isDialError(err) || req.Context().Err() != nil {
			return resp, err
		}
		r.metrics.upstreamErrors.WithLabelValues(f.ticket.Replica.Name, "dial").Inc()
		if f.tries >= r.cfg.Upstream.MaxAttempts {
			return nil, err
		}
		now := time.Now().UnixNano()
		f.failed = append(f.failed, f.ticket.Replica.Name)
		r.settle(f, state.Outcome{}, time.Unix(0, now))
		tk, d, rerr := r.table.Route(f.in, now, f.failed...)
		if rerr != nil {
			return nil, err // nobody else to try: report the dial error
		}
		r.metrics.failovers.Inc()
		r.log.Warn("failover", slog.String("conversation", f.p.key), slog.String("from", f.failed[len(f.failed)-1]),
			slog.String("to", tk.Replica.Name), slog.String("reason", d.Reason.String()), slog.Any("error", err))
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
	f.obs = newObserver(resp.Body, strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream"))
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
	case req.Context().Err() != nil:
		f.errKind, f.errMsg = "client", "client went away: "+err.Error()
		f.status = 499 // nobody is listening; recorded for the log only
		return
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
	if out.OK {
		out.Latency = now.Sub(f.start)
		if f.obs != nil && !f.obs.first.IsZero() {
			out.TTFT = f.obs.first.Sub(f.start)
		}
	}
	f.fb = r.table.Release(&f.ticket, out, now.UnixNano())
	f.out, f.held = out, false
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
			if ctx.Err() != nil {
				f.errKind, f.errMsg = "client", "client disconnected before the answer ended"
			} else {
				f.errKind, f.errMsg = "broken", "the replica's answer broke off"
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
	code := fmt.Sprint(f.status)
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
		slog.String("conversation", f.p.key),
		slog.String("key_source", f.p.keySource),
		slog.Int("turn", f.p.turn),
		slog.String("path", kindPath(f.kind)),
		slog.Bool("stream", f.p.stream),
		slog.String("policy", policyName),
		slog.String("replica", f.ticket.Replica.Name),
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
		attrs = append(attrs, slog.String("error_kind", f.errKind), slog.String("error", f.errMsg))
	}
	attrs = append(attrs, slog.String("trace", f.d.Format()))
	r.log.LogAttrs(ctx, level, "request", attrs...)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func kindPath(k apiKind) string {
	switch k {
	case kindCompletion:
		return wire.PathCompletion
	case kindChat:
		return wire.PathChatCompletions
	case kindCompletions:
		return wire.PathCompletions
	}
	return ""
}

// fail answers a request the router refuses itself.
func (r *Router) fail(w http.ResponseWriter, err error) {
	var he *httpError
	if !errors.As(err, &he) {
		he = &httpError{http.StatusInternalServerError, wire.ErrTypeServer, err.Error()}
	}
	r.metrics.rejected.WithLabelValues(fmt.Sprint(he.status)).Inc()
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
