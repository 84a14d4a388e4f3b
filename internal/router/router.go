// Package router is llm-ring's live driver: an HTTP proxy in front of
// llama.cpp and OpenAI-compatible replicas. For each request it identifies
// the conversation, routes it through the shared state (state.Table: policy
// pick + load acquire), forwards it with httputil.ReverseProxy (streaming
// passes through unbuffered), reads the replica's token counts from the
// answer, releases the load and feeds placement memory, and logs one JSON
// line with the decision's trace.
package router

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
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
	"github.com/llm-ring/llm-ring/internal/h1"
	"github.com/llm-ring/llm-ring/internal/pool"
	"github.com/llm-ring/llm-ring/internal/prefix"
	"github.com/llm-ring/llm-ring/internal/replicaset"
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
	cfg   *config.Router
	log   *slog.Logger
	pools *pool.Set   // one routing table per model served (issue 23; pools.go)
	pcfg  pool.Config // the models section pools was built from
	// decisionObs is each pool's llm_ring_decision_seconds series
	// (*pool.Pool -> prometheus.Observer).
	decisionObs sync.Map
	table       *state.Table // the catch-all pool's: every replica's without model lists (legacy)
	reg         *prometheus.Registry
	metrics     *metrics
	proxy       *httputil.ReverseProxy
	base        http.RoundTripper
	rules       keyRules
	mux         *http.ServeMux
	budget      bodyBudget

	hashers sync.Pool        // *prefix.Hasher, one per request in flight
	scraper *signals.Scraper // the replicas' /metrics; nil when signals.interval is 0
	facts   *liveFacts       // the engine facts they report (facts.go); nil with no scraper
	health  healthNotes      // what the health checks found wrong with the configuration
	mu      sync.Mutex       // serializes policy changes (admin API)

	draining atomic.Bool // readiness fails: Serve is shutting down
	// Every proxied request's context ends with flights: Serve cancels it
	// (stopFlights) to cut the requests still running when the grace ends.
	flights     context.Context
	stopFlights context.CancelFunc
	cut         atomic.Bool  // stopFlights was called
	inflight    atomic.Int64 // proxied requests being handled
	idle        idleWatch    // the answers' idle timeout (idlewatch.go)

	admin      *http.ServeMux
	adminToken [sha256.Size]byte // sha256 of the admin bearer token
	hasToken   bool
	node       *cluster.Node // the gossip membership; nil when cluster.mode is none
	operator                 // operator hook (issue 25): status page and tracing, status.go

	urls atomic.Pointer[map[string]*url.URL] // the replicas' parsed URLs, by URL (SetReplicas)
	adm  *admitter                           // admission control (issue 22, admit.go); nil when off
	// direct is the logger's handler when it is NewLogHandler's, which the
	// request line is written through directly (loghandler.go); else nil.
	direct *logHandler
	// adminAll is the last PUT /admin/policy addressed to every pool (nil:
	// none): the pools created after it take it too (admin.go).
	adminAll atomic.Pointer[PolicyUpdate]
}

// New builds a Router with no replicas; feed it with SetReplicas (or Serve
// with a discovery source).
func New(opts Options) (*Router, error) {
	cfg := opts.Config
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &Router{
		cfg:    cfg,
		log:    log,
		direct: directLog(log),
		reg:    prometheus.NewRegistry(),
		base:   opts.Transport,
		rules: keyRules{
			headers:     cfg.ConversationKey.Headers,
			canon:       keyHeaders(cfg.ConversationKey.Headers),
			bodyField:   cfg.ConversationKey.BodyField,
			prefixChars: cfg.ConversationKey.PrefixChars,
			defaultMax:  cfg.DefaultMaxTokens,
			blockChars:  cfg.PrefixIndex.BlockChars,
			maxOutput:   cfg.MaxOutputTokens,
			names:       &modelNames{},
		},
	}
	pcfg, err := r.poolConfig()
	if err != nil {
		return nil, err
	}
	r.pcfg = pcfg
	if r.pools, err = pool.New(pcfg, r.newTable); err != nil {
		return nil, fmt.Errorf("models.%w", err)
	}
	r.table = r.pools.Pool("").Table()
	r.flights, r.stopFlights = context.WithCancel(context.WithValue(context.Background(), flightsKey{}, r))
	r.budget.sem, r.budget.wait = semaphore.NewWeighted(cfg.Server.MaxBufferedBodyBytes), cfg.Server.MaxBufferedBodyWait.D()
	if r.base == nil {
		r.base = newTransport(cfg)
	}
	r.hashers.New = func() any { return new(prefix.Hasher) }
	r.metrics = newMetrics(r.reg, r, &r.budget)
	if r.scraper, err = r.newScraper(); err != nil {
		return nil, err
	}
	if r.adm, err = newAdmitter(cfg, r.table, r.reg, log); err != nil {
		return nil, err
	}
	r.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	r.proxy = &httputil.ReverseProxy{
		Rewrite:   r.rewrite,
		Transport: roundTripFunc(r.countedAttempt),
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
	r.routes()
	if err := r.newCluster(opts.NodeName); err != nil {
		return nil, err
	}
	if err := r.initAdmin(); err != nil {
		return nil, err
	}
	return r, nil
}

// routes registers the client listener's paths.
func (r *Router) routes() {
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
				strings.Join(proxiedPaths, ", "), strings.Join(listPaths, ", "))})
	})
}

// newTransport is the replicas' transport under the upstream settings:
// the router's own HTTP/1.1 client (internal/h1) with Go's Transport for
// what it does not carry (https, bodies of unknown length), or Go's alone
// (upstream.client: net/http).
func newTransport(cfg *config.Router) http.RoundTripper {
	std := stdTransport(cfg)
	if cfg.Upstream.Client == config.ClientNetHTTP {
		return std
	}
	return &h1.Transport{
		DialTimeout:           cfg.Upstream.DialTimeout.D(),
		ResponseHeaderTimeout: cfg.Upstream.ResponseTimeout.D(),
		IdleTimeout:           90 * time.Second,
		MaxIdlePerHost:        256,
		Fallback:              std,
	}
}

// stdTransport is Go's Transport under the upstream settings.
func stdTransport(cfg *config.Router) *http.Transport {
	return &http.Transport{
		Proxy:                 nil,
		DialContext:           (&net.Dialer{Timeout: cfg.Upstream.DialTimeout.D(), KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          1024,
		MaxIdleConnsPerHost:   256,
		IdleConnTimeout:       90 * time.Second,
		ResponseHeaderTimeout: cfg.Upstream.ResponseTimeout.D(),
		// No Accept-Encoding of the router's own: the answer is read (its
		// counts) and relayed, so a compressed one would only be inflated
		// again here; a client's own Accept-Encoding is forwarded as it is.
		DisableCompression: true,
	}
}

// ServeHTTP implements http.Handler.
func (r *Router) ServeHTTP(w http.ResponseWriter, req *http.Request) { r.mux.ServeHTTP(w, req) }

// Table is the catch-all pool's routing state: with no models configured
// or discovered, the whole router's (for tests, the experiment runner and
// the endpoint picker, which drive one pool).
func (r *Router) Table() *state.Table { return r.table }

// Pools is the router's pools by model (issue 23).
func (r *Router) Pools() *pool.Set { return r.pools }

// Registry is the router's Prometheus registry.
func (r *Router) Registry() *prometheus.Registry { return r.reg }

// SetReplicas replaces the replica set (a discovery update) and logs a
// replicas_changed event when it changed.
func (r *Router) SetReplicas(rs []replicaset.Replica) {
	urls := make(map[string]*url.URL, len(rs))
	for _, x := range rs {
		if u, err := url.Parse(x.URL); err == nil {
			urls[x.URL] = u
		}
	}
	rs = replicaset.Normalize(rs)
	changed, err := r.pools.SetReplicas(rs)
	if err != nil {
		r.log.Error("replicas_rejected", slog.String("error", err.Error()))
		return
	}
	r.urls.Store(&urls)
	if len(changed) == 0 {
		return
	}
	r.scrapeTargets()
	names := make([]string, len(rs))
	for i, x := range rs {
		names[i] = x.Name
	}
	attrs := []any{slog.Int("count", len(names)), slog.Any("replicas", names)}
	if len(changed) > 1 || changed[0] != "" {
		attrs = append(attrs, slog.Any("models", changed))
	}
	r.log.Info("replicas_changed", attrs...)
}

// baseURL is a replica's URL, parsed once per membership change (nil: it
// does not parse). A replica routed in the moment between a change of the
// table and of the parsed set is parsed on the spot.
func (r *Router) baseURL(raw string) *url.URL {
	if m := r.urls.Load(); m != nil {
		if u, ok := (*m)[raw]; ok {
			return u
		}
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil
	}
	return u
}

// Serve serves HTTP on ln and follows src until ctx is done, then drains
// as Kubernetes expects: readiness fails at once, the listener keeps
// accepting and serving for shutdown_delay (while the endpoint is removed
// everywhere), then it closes and in-flight requests have up to
// shutdown_grace to finish; those still running are cut, and logged as
// cut. Serve returns nil once every request has ended, and only after the
// goroutines it started (discovery, health checks, scrapes, the cluster
// node, the HTTP server) have returned. A discovery source that fails is an
// error.
func (r *Router) Serve(ctx context.Context, ln net.Listener, src discovery.Source) error {
	var wg sync.WaitGroup
	defer wg.Wait() // last: after bg is cancelled and the server closed
	// Discovery and health checks go on while draining.
	bg, stopBg := context.WithCancel(context.WithoutCancel(ctx))
	defer stopBg()
	defer r.shutdownTracing() // operator hook (issue 25): flush the last spans, tracing.go
	srv := r.clientServer()
	errc := make(chan error, 4) // one slot per goroutine that reports: none blocks
	stopCluster := r.runCluster(bg, errc)
	defer stopCluster() // after the drain below: peers count this instance's requests until they end
	wg.Go(func() {
		if err := src.Run(bg, r.SetReplicas); err != nil {
			errc <- fmt.Errorf("discovery: %w", err)
		}
	})
	wg.Go(func() { r.runHealthChecks(bg) })
	if r.scraper != nil {
		wg.Go(func() {
			if err := r.scraper.Run(bg); err != nil {
				errc <- fmt.Errorf("signals: %w", err)
			}
		})
	}
	wg.Go(func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errc <- err
		}
	})
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

// clientServer is the server of the client listener: every request's
// context descends from r.flights, so that the cut at the end of
// shutdown_grace ends them without a watch per request.
func (r *Router) clientServer() *http.Server {
	srv := r.newServer(r)
	srv.BaseContext = func(net.Listener) context.Context { return r.flights }
	return srv
}

// fail answers a request the router refuses itself.
func (r *Router) fail(w http.ResponseWriter, err error) {
	if e := unknownModel(err); e != nil {
		r.writeModelNotFound(w, e)
		return
	}
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
