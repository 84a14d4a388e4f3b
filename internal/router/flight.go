package router

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/llm-ring/llm-ring/internal/policy"
	"github.com/llm-ring/llm-ring/internal/prefix"
	"github.com/llm-ring/llm-ring/internal/replicaset"
	"github.com/llm-ring/llm-ring/internal/state"
	"github.com/llm-ring/llm-ring/internal/wire"
)

// Flight is one request routed for another driver, the endpoint picker
// (internal/epp): the proxy's own parse, route, answer observation,
// release, metrics and request log line, without the proxy's HTTP
// transport. The gateway forwards the request; the driver tells the Flight
// what it learns of the answer. A Flight is used by one goroutine.
//
// Parsing is the proxy's parseRequest, which reads a conversation through
// the shared accumulator (internal/convo): the endpoint picker reads
// requests exactly as the proxy does because it runs the same code.
type Flight struct {
	r   *Router
	f   *flight
	hs  *prefix.Hasher
	src chunkSource
	buf []byte
	end bool // Finish ran
}

// FlightError is a request the router refuses itself: its HTTP status and
// the OpenAI-style JSON body the client gets.
type FlightError struct {
	Status int
	Type   string
	Msg    string
}

func (e *FlightError) Error() string { return e.Msg }

// Body is the error as the proxy would answer it.
func (e *FlightError) Body() []byte {
	b, _ := json.Marshal(wire.NewError(e.Status, e.Type, e.Msg))
	return b
}

// errNoReplica is the refusal when no replica can take the request.
func errNoReplica() *FlightError {
	return &FlightError{http.StatusServiceUnavailable, wire.ErrTypeUnavailable, wire.ErrTextNoReplica}
}

// NewFlight parses a request (method, path, headers and body as the client
// sent them) exactly as the proxy does. A path the proxy does not route by
// conversation (embeddings, a GET) goes where the load is lowest, as the
// proxy's placement-free paths do. Errors are *FlightError (400s naming
// the field).
func (r *Router) NewFlight(ctx context.Context, method, path string, h http.Header, body []byte) (*Flight, error) {
	kind := kindOf(path)
	if method != http.MethodPost || kind == 0 {
		kind = kindByLoad
	}
	fl := &Flight{r: r}
	if r.rules.blockChars > 0 && kind != kindByLoad {
		fl.hs = r.hashers.Get().(*prefix.Hasher)
		fl.hs.Reset(r.rules.blockChars)
	}
	req := &http.Request{Method: method, URL: &url.URL{Path: path}, Header: h}
	f, err := r.newFlight(ctx, kind, req, body, fl.hs)
	if err != nil {
		fl.putHasher()
		if e := unknownModel(err); e != nil {
			r.metrics.rejected.WithLabelValues("404").Inc()
			return nil, &FlightError{http.StatusNotFound, wire.ErrTypeInvalidRequest, modelNotFoundText(e)}
		}
		var he *httpError
		if errors.As(err, &he) {
			r.metrics.rejected.WithLabelValues(fmt.Sprint(he.status)).Inc()
			return nil, &FlightError{he.status, he.typ, he.msg}
		}
		return nil, err
	}
	// The gateway forwards the body as the client sent it: no usage
	// request is added (the EPP cannot take the usage chunk out again).
	f.body, f.injected = body, false
	f.start = time.Now()
	fl.f = f
	return fl, nil
}

func (fl *Flight) putHasher() {
	if fl.hs != nil {
		fl.r.hashers.Put(fl.hs)
		fl.hs = nil
	}
}

// Route picks the replica and charges it, skipping exclude (names). The
// error is a 503 *FlightError when no replica can take the request.
func (fl *Flight) Route(exclude ...string) error {
	r, f := fl.r, fl.f
	t0 := time.Now()
	tk, d, err := r.route(f, t0.UnixNano(), exclude...)
	r.adm.routed(f.adm, &tk, err == nil) // admission (admit.go): no longer pending; the work ledger
	r.decisionObserver(f.pool).Observe(time.Since(t0).Seconds())
	if err != nil {
		r.metrics.rejected.WithLabelValues("503").Inc()
		return errNoReplica()
	}
	f.ticket, f.d, f.held, f.tries = tk, d, true, 1
	return nil
}

// Replica is the replica the request is charged to.
func (fl *Flight) Replica() replicaset.Replica { return fl.f.ticket.Replica }

// Decision is the policy's decision (reason and trace).
func (fl *Flight) Decision() policy.Decision { return fl.f.d }

// EstPrompt is the prompt token estimate the decision used.
func (fl *Flight) EstPrompt() int { return fl.f.ticket.EstPrompt }

// Reject counts a request refused before routing (by code), as the proxy's
// refusals are counted.
func (fl *Flight) Reject(status int) { fl.r.metrics.rejected.WithLabelValues(fmt.Sprint(status)).Inc() }

// Stream reports whether the client asked for a streamed answer.
func (fl *Flight) Stream() bool { return fl.f.p.stream }

// Fallbacks returns up to n further replicas in the policy's failover
// order (state.Table.Candidates), skipping exclude; nothing is charged.
func (fl *Flight) Fallbacks(dst []replicaset.Replica, n int, exclude ...string) []replicaset.Replica {
	f := fl.f
	return f.table().Candidates(dst, f.in, &f.ticket, time.Now().UnixNano(), n, exclude...)
}

// Served records that the gateway's answer came from replica name (the
// data plane's served endpoint). When that is not the picked replica (a
// fallback took it), the pick's load is returned as a failed attempt, as
// the proxy's failover does, and the request is charged to the served
// replica, which learns from the answer. It reports whether it moved the
// request; an unknown name changes nothing.
func (fl *Flight) Served(name string) bool {
	r, f := fl.r, fl.f
	if !f.held || name == f.ticket.Replica.Name {
		return false
	}
	st := f.table().Status()
	others := make([]string, 0, len(st.Replicas))
	found := false
	for _, x := range st.Replicas {
		if x.Name == name {
			found = true
			continue
		}
		others = append(others, x.Name)
	}
	if !found {
		return false
	}
	now := time.Now()
	tk, d, err := r.route(f, now.UnixNano(), others...)
	if err != nil {
		return false // it is down: keep the request where it was charged
	}
	f.failed = append(f.failed, f.ticket.Replica.Name)
	r.settle(f, state.Outcome{}, now)
	r.metrics.failovers.Inc()
	r.log.Warn("failover", slog.String("conversation", f.convo()), slog.String("from", f.failed[len(f.failed)-1]),
		slog.String("to", tk.Replica.Name), slog.String("reason", d.Reason.String()),
		slog.String("error", "the gateway served the request from a fallback endpoint"))
	f.ticket, f.d, f.held = tk, d, true
	f.tries++
	return true
}

// ResponseHeaders starts following the answer: its status, content type
// and length (-1: unknown). A 2xx answer releases the load as soon as its
// body has ended, with the counts read from it (the proxy's observer).
func (fl *Flight) ResponseHeaders(status int, contentType string, length int64) {
	r, f := fl.r, fl.f
	f.status = status
	if status >= 500 {
		r.metrics.upstreamErrors.WithLabelValues(f.ticket.Replica.Name, "status").Inc()
	}
	fl.src = chunkSource{}
	f.obs = newObserver(&fl.src, strings.HasPrefix(contentType, "text/event-stream"), length)
	if f.kind == kindMessages {
		f.obs.parse = messagesCounts
	}
	if status/100 == 2 {
		f.obs.done = func(c counts) { r.settle(f, c.outcome(), time.Now()) }
	}
}

// ResponseBody feeds a piece of the answer's body; end says it is the last.
func (fl *Flight) ResponseBody(p []byte, end bool) {
	o := fl.f.obs
	if o == nil {
		return
	}
	if fl.buf == nil {
		fl.buf = *readBufs.Get().(*[]byte)
	}
	fresh := o.first.IsZero()
	fl.src.p = p
	for len(fl.src.p) > 0 {
		if n, _ := o.Read(fl.buf); n == 0 {
			break // the observer failed (it read nothing): never spin
		}
	}
	if fresh && !o.first.IsZero() {
		fl.r.adm.first(fl.f) // the answer's first byte: admission's work ledger, as the proxy's observer says
	}
	if end {
		fl.src.eof = true
		o.Read(fl.buf)
	}
}

// Finish ends the request, once: the load is released if the answer's end
// did not already release it (a request whose answer did not end, because
// ctx ended or the stream broke off, is released as a failure), and the
// request's metrics and log line are written, as the proxy writes them.
func (fl *Flight) Finish(ctx context.Context) {
	if fl.end || fl.f == nil {
		return
	}
	fl.end = true
	if f := fl.f; f.obs == nil && ctx.Err() != nil && f.fail == failNone {
		f.fail, f.errMsg, f.status = failClient, "client went away before the answer began", failures[failClient].status
	}
	if fl.f.ticket.Replica.Name != "" {
		fl.r.finish(ctx, fl.f)
	}
	fl.r.adm.done(nil, fl.f) // admission (admit.go): the budget corrected, a waiting request let go
	fl.putHasher()
	if fl.buf != nil {
		b := fl.buf
		fl.buf = nil
		readBufs.Put(&b)
	}
}

// readBufs are the buffers Flights read answers through (the observer
// copies into them).
var readBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// chunkSource hands the observer the piece of body it was given, and
// io.EOF once eof is set and nothing is left.
type chunkSource struct {
	p   []byte
	eof bool
}

func (c *chunkSource) Read(b []byte) (int, error) {
	if len(c.p) == 0 {
		if c.eof {
			return 0, io.EOF
		}
		return 0, nil
	}
	n := copy(b, c.p)
	c.p = c.p[n:]
	return n, nil
}

func (c *chunkSource) Close() error { return nil }
