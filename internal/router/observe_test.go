package router

import (
	"io"
	"testing"
)

// chunks is a body that hands out its parts one Read at a time, and io.EOF
// only on the Read after the last part (as a network body may).
type chunks struct{ parts []string }

func (c *chunks) Read(p []byte) (int, error) {
	if len(c.parts) == 0 {
		return 0, io.EOF
	}
	n := copy(p, c.parts[0])
	c.parts[0] = c.parts[0][n:]
	if c.parts[0] == "" {
		c.parts = c.parts[1:]
	}
	return n, nil
}

func (c *chunks) Close() error { return nil }

// A JSON answer of known length ends (its counts read, done called) in the
// Read that returns its last bytes, before they are handed on to the client:
// the proxy flushes every write, so waiting for the EOF of the next Read
// let a client with no think time send its next turn before the release.
// Without a length, the answer ends at EOF.
func TestObserverEndsWithTheLastByte(t *testing.T) {
	body := `{"content":"ok","timings":{"cache_n":5,"prompt_n":7,"predicted_n":3}}`
	for _, length := range []int64{int64(len(body)), -1} {
		var got *counts
		o := newObserver(&chunks{parts: []string{body[:20], body[20:]}}, false, length)
		o.done = func(c counts) { got = &c }
		buf := make([]byte, 64)
		var reads int
		for got == nil && reads < 5 {
			if _, err := o.Read(buf); err != nil && err != io.EOF {
				t.Fatal(err)
			}
			reads++
		}
		want := 2 // the Read that returns the last bytes
		if length < 0 {
			want = 3 // the Read that returns EOF
		}
		if got == nil || reads != want {
			t.Fatalf("length %d: done after %d reads (called: %v), want after %d", length, reads, got != nil, want)
		}
		if got.cacheN != 5 || got.promptN != 7 || got.predictedN != 3 {
			t.Fatalf("length %d: counts %+v", length, *got)
		}
		if n, err := o.Read(buf); n != 0 || err != io.EOF {
			t.Fatalf("length %d: after the end: %d, %v; want 0, EOF", length, n, err)
		}
	}
}

// The end's callback settles the request (the routing table's lock, the
// cluster's sends): it must not run under the observer's own lock, for a
// JSON body and for a stream, and it runs once.
func TestObserverEndRunsOutsideItsLock(t *testing.T) {
	for _, c := range []struct {
		name string
		sse  bool
		body string
	}{
		{"json", false, `{"content":"ok","timings":{"cache_n":1,"prompt_n":2,"predicted_n":3}}`},
		{"stream", true, "data: {\"choices\":[]}\n\ndata: [DONE]\n\n"},
	} {
		o := newObserver(&chunks{parts: []string{c.body}}, c.sse, -1)
		calls := 0
		o.done = func(counts) {
			calls++
			if !o.mu.TryLock() {
				t.Errorf("%s: done runs under the observer's lock", c.name)
				return
			}
			o.mu.Unlock()
			if !o.complete() {
				t.Errorf("%s: done before the answer is marked ended", c.name)
			}
		}
		buf := make([]byte, 256)
		for range 4 {
			if _, err := o.Read(buf); err == io.EOF {
				break
			}
		}
		if calls != 1 {
			t.Errorf("%s: done called %d times, want 1", c.name, calls)
		}
	}
}
