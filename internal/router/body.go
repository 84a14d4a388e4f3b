package router

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/llm-ring/llm-ring/internal/wire"
)

// bodyChunk is the first allocation for a request body; the buffer doubles
// from there as bytes arrive.
const bodyChunk = 64 << 10

// bodyBudget caps the request bytes the router holds at once across all
// connections (server.max_buffered_body_bytes). A body reserves budget as
// its bytes arrive (the capacity of its buffer, never the length a client
// declares), and keeps it until its answer has ended: the body is kept for
// a retry on another replica. A request that finds no room within
// server.max_buffered_body_wait is refused with 503 and Retry-After.
type bodyBudget struct {
	sem  *semaphore.Weighted
	wait time.Duration
	held atomic.Int64 // bytes reserved now (a gauge)
}

var errNoBudget = errors.New("the router holds server.max_buffered_body_bytes of request bodies")

// read reads body (already limited by http.MaxBytesReader) and returns it
// with the budget it holds; the caller releases that budget with release,
// also on error.
func (b *bodyBudget) read(ctx context.Context, body io.Reader, declared int64) ([]byte, int64, error) {
	var held int64
	grow := func(buf []byte, want int) ([]byte, error) {
		extra := int64(want - cap(buf))
		if !b.sem.TryAcquire(extra) {
			// Only a body that must wait pays for a timer.
			wctx, cancel := context.WithTimeout(ctx, b.wait)
			err := b.sem.Acquire(wctx, extra)
			cancel()
			if err != nil {
				return buf, errNoBudget
			}
		}
		held += extra
		b.held.Add(extra)
		nb := make([]byte, len(buf), want)
		copy(nb, buf)
		return nb, nil
	}
	first := bodyChunk
	if declared >= 0 && declared < int64(first) {
		first = int(declared) + 1 // +1: see EOF without growing
	}
	buf, err := grow(nil, first)
	if err != nil {
		return nil, held, err
	}
	for {
		if len(buf) == cap(buf) {
			next := 2 * cap(buf)
			if declared >= 0 && declared+1 > int64(cap(buf)) && declared+1 < int64(next) {
				next = int(declared) + 1
			}
			if buf, err = grow(buf, next); err != nil {
				return nil, held, err
			}
		}
		n, err := body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, held, err
		}
	}
	// Keep only what the body needs for the rest of the request.
	if slack := int64(cap(buf) - len(buf)); slack > 4<<10 {
		buf = append([]byte(nil), buf...)
		b.release(slack)
		held -= slack
	}
	return buf, held, nil
}

func (b *bodyBudget) release(n int64) {
	if n > 0 {
		b.held.Add(-n)
		b.sem.Release(n)
	}
}

// readRequestBody reads a proxied request's body under server.read_timeout,
// max_body_bytes and the body budget, answering the client itself when it
// cannot: 408 (too slow; the connection is closed), 413 (too large) or 503
// (no budget; the connection is closed, its body unread). It returns the
// body and the budget it holds (to release when the request ends), or
// ok=false when it answered.
func (r *Router) readRequestBody(w http.ResponseWriter, req *http.Request) (body []byte, held int64, ok bool) {
	body, held, err := r.budget.read(req.Context(), http.MaxBytesReader(w, req.Body, r.cfg.MaxBodyBytes), req.ContentLength)
	// The server's read deadline (server.read_timeout) covered the request
	// up to here; lift it so that it cannot cut the answer that follows.
	http.NewResponseController(w).SetReadDeadline(time.Time{})
	if err == nil {
		return body, held, true
	}
	r.budget.release(held)
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		r.fail(w, &httpError{http.StatusRequestEntityTooLarge, wire.ErrTypeInvalidRequest,
			fmt.Sprintf("request body exceeds max_body_bytes (%d bytes)", r.cfg.MaxBodyBytes)})
	case errors.Is(err, errNoBudget):
		r.metrics.bodyBudgetFull.Inc()
		w.Header().Set("Connection", "close")
		w.Header().Set("Retry-After", strconv.Itoa(max(1, int(math.Ceil(r.cfg.Server.MaxBufferedBodyWait.D().Seconds())))))
		r.fail(w, &httpError{http.StatusServiceUnavailable, wire.ErrTypeUnavailable,
			"the router is holding as many request bodies as server.max_buffered_body_bytes allows; retry shortly"})
	case isTimeout(err):
		w.Header().Set("Connection", "close")
		r.fail(w, &httpError{http.StatusRequestTimeout, wire.ErrTypeInvalidRequest,
			fmt.Sprintf("the request was not received within server.read_timeout (%s)", r.cfg.Server.ReadTimeout.D())})
	default:
		w.Header().Set("Connection", "close")
		r.fail(w, badRequest("could not read the request body: %v", err))
	}
	return nil, 0, false
}
