package router

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/llm-ring/llm-ring/internal/policy"
	"github.com/llm-ring/llm-ring/internal/state"
	"github.com/llm-ring/llm-ring/internal/wire"
)

// failure is how a proxied request went wrong. Its label is the
// error_kind of the request's log line and the kind label of
// llm_ring_upstream_errors_total; its status is what the request is
// recorded (and, when nothing reached the client yet, answered) with.
type failure uint8

const (
	failNone    failure = iota
	failDial            // the replica could not be reached: it never saw the request
	failStatus          // the replica answered ≥ 500, or 503/429 and the request went elsewhere
	failTimeout         // no answer headers within upstream.response_timeout
	failStall           // no byte within upstream.idle_timeout
	failBroken          // the connection to the replica failed mid-answer
	failCut             // cut at the end of shutdown_grace
	failClient          // the client went away
)

// failures holds each failure's label and HTTP status, the one place both
// are written. failStatus keeps the replica's own status (0 here).
// A client that went away gets nothing: 499 is recorded when it left before
// any byte was sent, the status it was sent otherwise.
var failures = [...]struct {
	label  string
	status int
}{
	failNone:    {"", 0},
	failDial:    {"dial", http.StatusBadGateway},
	failStatus:  {"status", 0},
	failTimeout: {"timeout", http.StatusGatewayTimeout},
	failStall:   {"stall", http.StatusGatewayTimeout},
	failBroken:  {"broken", http.StatusBadGateway},
	failCut:     {"cut", http.StatusServiceUnavailable},
	failClient:  {"client", 499},
}

func (k failure) String() string { return failures[k].label }

// upstream says whether the failure is the replica's (counted in
// llm_ring_upstream_errors_total when recorded; dial and status are
// counted where they happen, at each attempt).
func (k failure) upstream() bool { return k == failTimeout || k == failStall || k == failBroken }

// classify is the one decision of what ended a request: a cut or the
// client (the request's context ended), else the replica (stall, and
// before the answer's headers arrived also dial and timeout; any other
// error is a broken connection). err may be nil: an answer that ended
// early without an error broke off.
func (r *Router) classify(ctx context.Context, err error, headersSent bool) failure {
	switch {
	case ctx.Err() != nil && r.cut.Load():
		return failCut
	case ctx.Err() != nil:
		return failClient
	case err != nil && errors.Is(err, errUpstreamIdle):
		return failStall
	case headersSent:
		return failBroken
	case isDialError(err):
		return failDial
	case isTimeout(err):
		return failTimeout
	}
	return failBroken
}

// record sets the flight's failure, its message and its status, and counts
// a replica's failure.
func (r *Router) record(f *flight, k failure, msg string, headersSent bool) {
	f.fail, f.errMsg = k, msg
	if k != failClient || !headersSent {
		f.status = failures[k].status
	}
	if k.upstream() {
		r.metrics.upstreamErrors.WithLabelValues(f.ticket.Replica.Name, k.String()).Inc()
	}
}

const cutMsg = "cut at the end of shutdown_grace"

// proxyError is ReverseProxy's error handler: the replica could not be used
// at all and nothing has reached the client. A dial error goes to the next
// candidate when there is one (the handler's loop sends it there);
// otherwise the client gets the failure's status.
func (r *Router) proxyError(w http.ResponseWriter, req *http.Request, err error) {
	f := flightOf(req.Context())
	if errors.Is(err, errRetry) {
		return // modifyResponse chose the next candidate
	}
	k := r.classify(req.Context(), err, false)
	if k == failDial {
		r.metrics.upstreamErrors.WithLabelValues(f.ticket.Replica.Name, k.String()).Inc()
		if r.retry(f, err) {
			return
		}
	}
	name := f.ticket.Replica.Name
	var msg string
	switch k {
	case failCut:
		r.record(f, k, cutMsg, false) // the connection is closed; recorded for the log only
		return
	case failClient:
		r.record(f, k, "client went away: "+err.Error(), false) // nobody is listening
		return
	case failStall:
		msg = fmt.Sprintf("replica %s sent nothing for upstream.idle_timeout (%s)", name, r.cfg.Upstream.IdleTimeout.D())
	case failDial:
		msg = fmt.Sprintf("replica %s unreachable after %d attempt(s): %v", name, f.tries, err)
	case failTimeout:
		msg = fmt.Sprintf("replica %s did not answer within upstream.response_timeout (%s)", name, r.cfg.Upstream.ResponseTimeout.D())
	default:
		msg = fmt.Sprintf("replica %s failed: %v", name, err)
	}
	r.record(f, k, msg, false)
	r.tag(w.Header(), f)
	r.writeError(w, &httpError{f.status, wire.ErrTypeServer, msg})
}

// broken records an answer that broke off after its headers reached the
// client (the replica died, or stalled past upstream.idle_timeout) and
// returns the SSE error event the client gets before the stream is closed.
func (r *Router) broken(f *flight, err error) []byte {
	switch k := r.classify(f.ctx, err, true); k {
	case failCut:
		r.record(f, k, cutMsg, true)
		return errorEvent(f.status, "the router is shutting down: "+f.errMsg)
	case failClient:
		r.record(f, k, "client disconnected before the answer ended", true)
		return nil
	case failStall:
		r.record(f, k, fmt.Sprintf("replica %s sent nothing for upstream.idle_timeout (%s)", f.ticket.Replica.Name, r.cfg.Upstream.IdleTimeout.D()), true)
	default:
		r.record(f, k, fmt.Sprintf("replica %s's answer broke off: %v", f.ticket.Replica.Name, err), true)
	}
	return errorEvent(f.status, f.errMsg)
}

// unfinished records an answer that ended before its end without an error
// the observer saw (the handler was aborted).
func (r *Router) unfinished(ctx context.Context, f *flight) {
	switch k := r.classify(ctx, nil, true); k {
	case failCut:
		r.record(f, k, cutMsg, true)
	case failClient:
		r.record(f, k, "client disconnected before the answer ended", true)
	default:
		r.record(f, k, "the replica's answer broke off", true)
	}
}

// errRetry ends an attempt whose answer (503 or 429) is dropped for the
// next candidate.
var errRetry = errors.New("retried on the next candidate")

// retry decides whether a failed attempt (a dial error, or a 503/429
// answer: nothing has reached the client) goes to the policy's next
// candidate: while the client waits, up to upstream.max_attempts, when
// the policy has another replica. The candidate is routed (and charged)
// now; the handler's loop sends the request there (failover).
func (r *Router) retry(f *flight, cause error) bool {
	if f.ctx.Err() != nil || f.tries >= r.cfg.Upstream.MaxAttempts {
		return false
	}
	now := time.Now()
	tk, d, err := r.route(f, now.UnixNano(), append(f.failed, f.ticket.Replica.Name)...)
	if err != nil {
		return false // nobody else to try: report this answer or error
	}
	f.next = &retryTo{ticket: tk, d: d, cause: cause, at: now}
	return true
}

// retryTo is the candidate a failed attempt goes to.
type retryTo struct {
	ticket state.Ticket
	d      policy.Decision
	cause  error
	at     time.Time
}

// failover moves the flight to its next candidate: the failed replica's
// ticket is released (learning nothing) and the move counted and logged.
func (r *Router) failover(f *flight) {
	n := f.next
	f.next = nil
	f.failed = append(f.failed, f.ticket.Replica.Name)
	r.settle(f, state.Outcome{}, n.at)
	r.metrics.failovers.Inc()
	r.log.Warn("failover", slog.String("conversation", f.convo()), slog.String("from", f.ticket.Replica.Name),
		slog.String("to", n.ticket.Replica.Name), slog.String("reason", n.d.Reason.String()), slog.String("error", clip(n.cause.Error(), 256)))
	f.ticket, f.d, f.held = n.ticket, n.d, true
}

// retryStatus is modifyResponse's part of the retry decision: a 503 or 429
// goes to the next candidate when there is one (its body drained, so the
// connection is kept); the last one goes to the client as it is.
func (r *Router) retryStatus(f *flight, resp *http.Response) bool {
	if !retryable(resp.StatusCode) || !r.retry(f, fmt.Errorf("answered %s", resp.Status)) {
		return false
	}
	r.metrics.upstreamErrors.WithLabelValues(f.ticket.Replica.Name, failStatus.String()).Inc()
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	return true
}

// tag sets the routing headers of an answer (the replica's, or the
// router's error).
func (r *Router) tag(h http.Header, f *flight) {
	v := make([]string, 3) // one allocation for the three (Header.Set allocates one each)
	v[0], v[1], v[2] = f.ticket.Replica.Name, f.d.Reason.String(), strconv.Itoa(f.ticket.EstPrompt)
	h[keyRoutedTo], h[keyRouteReason], h[keyEstPrompt] = v[0:1:1], v[1:2:2], v[2:3:3]
}

// The routing headers' canonical keys (Header.Set would canonicalize, and
// allocate, on every call).
var (
	keyRoutedTo    = http.CanonicalHeaderKey(HeaderRoutedTo)
	keyRouteReason = http.CanonicalHeaderKey(HeaderRouteReason)
	keyEstPrompt   = http.CanonicalHeaderKey(HeaderEstPrompt)
)

func isDialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}
