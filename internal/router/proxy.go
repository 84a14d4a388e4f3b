package router

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/llm-ring/llm-ring/internal/engine"
	"github.com/llm-ring/llm-ring/internal/policy"
	"github.com/llm-ring/llm-ring/internal/pool"
	"github.com/llm-ring/llm-ring/internal/prefix"
	"github.com/llm-ring/llm-ring/internal/state"
	"github.com/llm-ring/llm-ring/internal/wire"
)

// The request path of a proxied request: serveProxied reads and routes it,
// forward sends it (and fails it over), modifyResponse starts observing
// the answer, settle releases the load, finish (logline.go) logs it.

// flight is one proxied request, from routing to release.
type flight struct {
	ctx    context.Context // the request's, ended by the client or by a cut
	start  time.Time
	kind   apiKind
	path   string        // the request's path, as logged
	pol    policy.Policy // routes with this policy instead of the configured one (nil: configured)
	pool   *pool.Pool    // the pool its model resolved to (issue 23; pools.go)
	model  string        // the model sent upstream ("" the request named none and none applied)
	in     state.Input
	p      parsed
	body   []byte
	ticket state.Ticket
	d      policy.Decision
	held   bool // ticket not yet released
	// injected: the router added stream_options.include_usage to the body
	// (prepareStream); the answer's usage-only chunk is removed again.
	injected bool
	// adm is what admission control decided (adm.on: it was asked; issue 22).
	adm    admitted
	failed []string
	tries  int

	next *retryTo // the candidate a failed attempt goes to (retry); nil: none

	// recycle's conditions: forward returned (no abort), and whether an
	// attempt went over a transport that may hold it after (rewrite).
	returned, shared bool

	// Held in the flight rather than allocated on their own: the attempts'
	// context (serveProxied), the answer's observer (modifyResponse) and
	// its first bytes (peek); the first attempt's body reader, URL and idle
	// watch (a retry's are allocated: its predecessor's transport may still
	// hold them).
	fctx     flightCtx
	observer observer
	filter   engine.Filter // a stream's (wrapStream)
	peeked   peeked
	head     [512]byte
	first    attemptParts
	cur      *attemptParts // the current attempt's

	status int     // HTTP status sent to the client
	fail   failure // what went wrong, if anything
	errMsg string
	obs    *observer
	out    state.Outcome  // what the ticket was released with
	fb     state.Feedback // what the release learned
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

// flightCtx is the context of a flight's attempts: the request's, carrying
// the flight (flightOf) without a context of its own to allocate.
type flightCtx struct {
	context.Context
	f *flight
}

func (c *flightCtx) Value(key any) any {
	if key == (flightKey{}) {
		return c.f
	}
	return c.Context.Value(key)
}

func flightOf(ctx context.Context) *flight {
	if c, ok := ctx.(*flightCtx); ok {
		return c.f
	}
	f, _ := ctx.Value(flightKey{}).(*flight)
	return f
}

// flightsKey marks the base context of Serve's listener (r.flights): a
// request whose context carries it is cut with r.flights already.
type flightsKey struct{}

func (r *Router) serveProxied(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		r.fail(w, &httpError{http.StatusMethodNotAllowed, wire.ErrTypeInvalidRequest, req.URL.Path + " accepts POST only"})
		return
	}
	r.inflight.Add(1)
	defer r.inflight.Add(-1)
	ctx := req.Context()
	if ctx.Value(flightsKey{}) != r {
		// Not from Serve's listener, whose requests' contexts descend from
		// r.flights (clientServer): the cut at the end of shutdown_grace must
		// reach this request too.
		c, cancel := context.WithCancel(ctx)
		defer cancel()
		defer context.AfterFunc(r.flights, cancel)()
		ctx = c
	}
	defer r.startSpan(&ctx, req)() // operator hook (issue 25): the request's span, tracing.go
	if ctx != req.Context() {
		req = req.WithContext(ctx) // (a copy of the request: only when its context changed)
	}
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
	defer recycle(f) // last of the flight's defers: after finish and admission's done
	f.start = start
	if r.adm != nil { // admission control (issue 22): wait, or answer shed, before routing
		w0 := time.Now()
		f.adm, ok = r.adm.admit(ctx, w, req, f)
		r.traceAdmission(ctx, w, w0, f.adm.queued, ok) // operator hook (issue 25): the admission on the span, tracing.go
		if !ok {
			return
		}
		defer r.adm.done(req, f) // after finish: the budget corrected, a waiting request let go
	}
	t0 := time.Now()
	f.ticket, f.d, err = r.route(f, t0.UnixNano())
	if r.adm != nil {
		r.adm.routed(f.adm, &f.ticket, err == nil) // charged to the table (or refused): no longer pending; the work ledger
	}
	r.decisionObserver(f.pool).Observe(time.Since(t0).Seconds())
	if err != nil {
		r.fail(w, &httpError{http.StatusServiceUnavailable, wire.ErrTypeUnavailable, wire.ErrTextNoReplica})
		return
	}
	f.held = true
	// Deferred: ReverseProxy aborts the handler with a panic when the replica's
	// body breaks off mid-answer, and the load must be released then too.
	defer r.finish(req.Context(), f)
	f.fctx = flightCtx{Context: req.Context(), f: f}
	r.forward(w, req.WithContext(&f.fctx), f)
	f.returned = true // not aborted by ReverseProxy's panic
}

// forward is the retry loop: each pass is one attempt through ReverseProxy
// on the flight's replica. An attempt that failed before anything reached
// the client (a dial error, a 503 or 429) and found a next candidate
// (retry) leaves f.next set and has written nothing; the loop moves the
// flight there and tries again. Once a replica has begun an answer, nothing
// is retried.
func (r *Router) forward(w http.ResponseWriter, req *http.Request, f *flight) {
	for {
		r.proxy.ServeHTTP(w, req)
		if f.next == nil {
			return
		}
		r.failover(f)
	}
}

// attempt counts and sends one attempt (ReverseProxy's transport).
func (r *Router) countedAttempt(req *http.Request) (*http.Response, error) {
	f := flightOf(req.Context())
	f.tries++
	return r.attempt(req, &f.cur.idle)
}

// rewrite points the outgoing request at the picked replica.
func (r *Router) rewrite(pr *httputil.ProxyRequest) {
	f := flightOf(pr.In.Context())
	if err := f.target(pr.Out, r.baseURL(f.ticket.Replica.URL)); err != nil {
		// The URL came from discovery and was validated; keep the request
		// failing visibly rather than sending it anywhere else.
		pr.Out.URL = &url.URL{Scheme: "http", Host: "invalid.invalid"}
	}
	setXForwarded(pr.Out, pr.In)
	if st, ok := r.base.(synchronous); !ok || !st.Synchronous(pr.Out) {
		f.shared = true // its transport may hold the request after the attempt: not recycled
	}
}

// synchronous is a transport that says when it is done with a request as
// soon as its answer's body is closed (h1.Transport).
type synchronous interface{ Synchronous(*http.Request) bool }

// flightPool holds flights for the next requests (issue 21: a flight is
// 3.4 KB, a third of what a request allocated). Every flight in it is zero.
var flightPool = sync.Pool{New: func() any { return new(flight) }}

// recycle returns f to flightPool when nothing can still reach it: the
// proxy's flight, after its last defer, whose attempts all went over a
// synchronous transport (the replicas' own client, not Go's Transport,
// whose connection loops may still hold a request's body or context after
// the answer), with no failover and no abort (a broken answer's panic).
// Otherwise it is left to the collector.
func recycle(f *flight) {
	if !f.returned || f.shared || f.next != nil || len(f.failed) > 0 || f.tries > 1 {
		return
	}
	*f = flight{}
	flightPool.Put(f)
}

// setXForwarded is httputil.ProxyRequest.SetXForwarded (X-Forwarded-For,
// -Host and -Proto as it sets them), and an empty User-Agent when the
// client sent none (as ReverseProxy would set after Rewrite, so that Go's
// own is not sent), with one allocation for the values instead of one
// each. TestSetXForwardedAgrees holds it to SetXForwarded.
func setXForwarded(out, in *http.Request) {
	h := out.Header
	v := make([]string, 4)
	if ip, _, err := net.SplitHostPort(in.RemoteAddr); err == nil {
		if prior := h["X-Forwarded-For"]; len(prior) > 0 {
			ip = strings.Join(prior, ", ") + ", " + ip
		}
		v[0] = ip
		h["X-Forwarded-For"] = v[0:1:1]
	} else {
		delete(h, "X-Forwarded-For")
	}
	v[1], v[2] = in.Host, "http"
	if in.TLS != nil {
		v[2] = "https"
	}
	h["X-Forwarded-Host"], h["X-Forwarded-Proto"] = v[1:2:2], v[2:3:3]
	if _, ok := h["User-Agent"]; !ok {
		h["User-Agent"] = v[3:4:4]
	}
}

// attemptParts are what one attempt needs of its own.
type attemptParts struct {
	url  url.URL
	body bytes.Reader
	idle idleBody
}

// parts are the current attempt's: the flight's own for the first.
func (f *flight) parts() *attemptParts {
	if f.tries == 0 {
		return &f.first
	}
	return new(attemptParts)
}

// target sets out's URL, Host and body for the flight's current replica,
// whose URL is base (nil: it did not parse).
func (f *flight) target(out *http.Request, base *url.URL) error {
	a := f.parts()
	f.cur = a
	if base == nil {
		return errBadURL
	}
	a.url = *base
	u := &a.url
	u.Path = strings.TrimSuffix(base.Path, "/") + out.URL.Path
	u.RawPath = ""
	u.RawQuery = out.URL.RawQuery
	out.URL = u
	out.Host = u.Host
	a.body.Reset(f.body)
	// net/http knows a body is in memory only as a *bytes.Reader (or one in
	// io.NopCloser): any other type makes it send the headers first, and a
	// kept-alive connection found closed while the body is written is then
	// not retried (TestClosedKeepAliveIsRetried). Hence the wrapper's
	// allocation.
	out.Body = io.NopCloser(&a.body)
	out.ContentLength = int64(len(f.body))
	out.GetBody = f.getBody
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

var errBadURL = errors.New("replica URL does not parse")

// getBody is a new reader of the request body, for the transport to send
// it again (a kept-alive connection found closed).
func (f *flight) getBody() (io.ReadCloser, error) {
	return io.NopCloser(bytes.NewReader(f.body)), nil
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// modifyResponse tags the answer and starts observing its body.
func (r *Router) modifyResponse(resp *http.Response) error {
	f := flightOf(resp.Request.Context())
	if r.retryStatus(f, resp) {
		return errRetry
	}
	f.status = resp.StatusCode
	r.tag(resp.Header, f)
	if resp.StatusCode >= 500 {
		r.metrics.upstreamErrors.WithLabelValues(f.ticket.Replica.Name, failStatus.String()).Inc()
	}
	body, err := peek(resp.Body, &f.peeked, f.head[:])
	if err != nil {
		resp.Body.Close()
		return err // nothing reached the client: proxyError answers (504 when stalled)
	}
	sse := strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream")
	o := &f.observer // one answer per flight: the retried ones never get here
	o.rc, o.sse, o.left = f.wrapStream(resp, body), sse, resp.ContentLength
	o.parse = countsParser(f.kind)
	o.rt, o.fl = r, f // a break is r.broken's
	// A 2xx answer releases as soon as the replica has finished, before
	// the last bytes reach the client: a client that sends its next turn
	// the moment the answer ends must find placement memory up to date and
	// the load gone.
	o.release = resp.StatusCode/100 == 2
	f.obs = o
	resp.Body = o
	return nil
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
	f.fb = f.table().Release(&f.ticket, out, now.UnixNano())
	f.out, f.held = out, false
	r.flushCluster()
}
