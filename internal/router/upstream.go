package router

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"

	"github.com/llm-ring/llm-ring/internal/wire"
)

// attempt sends req to its replica with the idle timeout on the answer,
// watched by b.
func (r *Router) attempt(req *http.Request, b *idleBody) (*http.Response, error) {
	ctx, cancel := context.WithCancelCause(req.Context())
	resp, err := r.base.RoundTrip(req.WithContext(ctx))
	if err != nil {
		cancel(nil)
		return nil, err
	}
	b.rc, b.idle, b.cancel, b.watch = resp.Body, r.cfg.Upstream.IdleTimeout.D(), cancel, &r.idle
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
