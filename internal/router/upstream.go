package router

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/llm-ring/llm-ring/internal/wire"
)

// errUpstreamIdle ends an answer from which no byte came for
// upstream.idle_timeout.
var errUpstreamIdle = errors.New("no byte from the replica within upstream.idle_timeout")

// idleBody is a replica's answer body that fails with errUpstreamIdle when
// a read waits longer than idle for the next byte. Only the time spent
// waiting on the replica counts, not the time the client takes to read.
//
// One timer per answer, not one reset per read: a read marks when it
// began (since) and clears it when it returns; the timer, when it fires,
// ends the answer only if a read has been waiting idle or longer, and
// otherwise sets itself for the rest of that read's idle time (or a whole
// idle period while no read waits). A stream's events then cost a clock
// read each instead of a timer reset and stop.
type idleBody struct {
	rc      io.ReadCloser
	idle    time.Duration
	cancel  context.CancelCauseFunc // aborts the upstream request
	timer   atomic.Pointer[time.Timer]
	since   atomic.Int64 // when the pending read began (Unix ns); 0: none pending
	stalled atomic.Bool
	closed  atomic.Bool
}

func (b *idleBody) Read(p []byte) (int, error) {
	b.since.Store(time.Now().UnixNano())
	if b.timer.Load() == nil {
		b.timer.Store(time.AfterFunc(b.idle, b.fire))
	}
	n, err := b.rc.Read(p)
	b.since.Store(0)
	if err != nil && err != io.EOF && b.stalled.Load() {
		err = errUpstreamIdle
	}
	return n, err
}

func (b *idleBody) fire() {
	t := b.timer.Load()
	if b.closed.Load() || t == nil {
		return
	}
	left := b.idle
	if since := b.since.Load(); since != 0 {
		if left -= time.Duration(time.Now().UnixNano() - since); left <= 0 {
			b.stalled.Store(true)
			b.cancel(errUpstreamIdle)
			return
		}
	}
	t.Reset(left)
}

func (b *idleBody) Close() error {
	b.closed.Store(true)
	if t := b.timer.Load(); t != nil {
		t.Stop()
	}
	err := b.rc.Close()
	b.cancel(nil)
	return err
}

// attempt sends req to its replica with the idle timeout on the answer,
// watched by b.
func (r *Router) attempt(req *http.Request, b *idleBody) (*http.Response, error) {
	ctx, cancel := context.WithCancelCause(req.Context())
	resp, err := r.base.RoundTrip(req.WithContext(ctx))
	if err != nil {
		cancel(nil)
		return nil, err
	}
	b.rc, b.idle, b.cancel = resp.Body, r.cfg.Upstream.IdleTimeout.D(), cancel
	resp.Body = b
	return resp, nil
}

// copyBuffers lends ReverseProxy the buffers it copies answers through
// (32 KiB, its default size) instead of allocating one per request.
type copyBuffers struct{}

var copyPool = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func (copyBuffers) Get() []byte  { return *copyPool.Get().(*[]byte) }
func (copyBuffers) Put(b []byte) { copyPool.Put(&b) }

// retryable says whether a replica's answer means "not now, try another":
// 503 (llama.cpp while it loads its model, or overloaded) and 429.
func retryable(status int) bool {
	return status == http.StatusServiceUnavailable || status == http.StatusTooManyRequests
}

// peeked is a body whose first bytes were read ahead.
type peeked struct {
	head []byte
	io.ReadCloser
}

func (p *peeked) Read(b []byte) (int, error) {
	if len(p.head) > 0 {
		n := copy(b, p.head)
		p.head = p.head[n:]
		return n, nil
	}
	return p.ReadCloser.Read(b)
}

// peek waits for the first bytes of an answer's body (bounded by
// upstream.idle_timeout) before anything is sent to the client, so that a
// replica that sends headers and then stalls gets the client a 504 rather
// than a 200 that never ends.
// The result is p, over body, holding its first bytes in buf.
func peek(body io.ReadCloser, p *peeked, buf []byte) (io.ReadCloser, error) {
	for {
		n, err := body.Read(buf)
		if n > 0 {
			p.head, p.ReadCloser = buf[:n], body
			return p, nil
		}
		if err == io.EOF {
			p.head, p.ReadCloser = nil, body
			return p, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// errorEvent is the SSE event a client receives when a replica's stream
// breaks: OpenAI's error shape, then the router closes the stream.
func errorEvent(status int, msg string) []byte {
	b, _ := json.Marshal(wire.NewError(status, wire.ErrTypeServer, msg))
	return fmt.Appendf(nil, "data: %s\n\n", b)
}
