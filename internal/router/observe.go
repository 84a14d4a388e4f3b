package router

import (
	"bytes"
	"io"
	"sync"
	"time"

	"github.com/llm-ring/llm-ring/internal/state"
	"github.com/llm-ring/llm-ring/internal/wire"
)

// maxKeep bounds how much of a non-streamed answer the router keeps to read
// its token counts; a larger answer passes through with counts unknown.
const maxKeep = 4 << 20

// counts are the token figures a replica reported.
type counts struct {
	known                       bool
	cacheN, promptN, predictedN int
	cachedUnknown               bool    // the answer does not say how much was reused (vLLM/SGLang without their report option)
	promptMS, predictedMS       float64 // llama.cpp timings; 0 when the answer has none
}

func (c counts) outcome() state.Outcome {
	return state.Outcome{OK: true, Known: c.known, CacheN: c.cacheN, PromptN: c.promptN, PredictedN: c.predictedN,
		CachedUnknown: c.cachedUnknown,
		PromptTime:    msDuration(c.promptMS), PredictedTime: msDuration(c.predictedMS)}
}

// msDuration converts a replica's milliseconds (never trusted to be sane) to
// a duration; negative, NaN or absurd values give 0 (unknown).
func msDuration(v float64) time.Duration {
	if !(v > 0 && v < 1e9) {
		return 0
	}
	return time.Duration(v * float64(time.Millisecond))
}

// observer passes a replica's answer through to the client unchanged while
// reading the token counts out of it: from the whole JSON body, or from the
// SSE events of a stream (the last event with timings or usage wins).
//
// It knows the answer has ended when a body of known length has all its
// bytes, else at its EOF, or earlier for a stream: at "data: [DONE]"
// (OpenAI-compatible) or at the chunk with "stop": true (llama.cpp's
// /completion). Either way it then calls done once, before the bytes that
// end the answer are handed on to the client, and never under its own lock
// (done settles the request: the routing table's lock, the cluster's
// sends). Locking: mu guards the fields below it; Read runs in the proxy's
// copying goroutine, learn, complete and counts may be called from others. (Waiting for EOF alone was
// not enough: the proxy flushes every write, so a client could have the
// whole answer, and send its next turn, before the read that returns EOF.)
type observer struct {
	rc   io.ReadCloser
	sse  bool
	left int64 // bytes of a JSON body still to come (-1: length unknown)
	done func(counts)
	// onBreak is called when the body fails before the answer ended; what
	// it returns (an SSE error event) is passed to the client before the
	// failure.
	onBreak func(error) []byte
	// The proxy's flights use these instead of done and onBreak (no
	// closures to allocate): a 2xx answer's end settles fl (release), a
	// break is rt.broken's.
	rt      *Router
	fl      *flight
	release bool
	// parse, when set, reads an answer's counts instead of parseAnswer
	// (the Anthropic Messages shape): the whole body, or one SSE event's
	// data (sse true).
	parse func(data []byte, sse bool) (counts, bool)
	tail  []byte // error event still to pass on
	fail  error  // the failure to report after tail

	mu    sync.Mutex
	first time.Time // first byte from the replica
	eof   bool      // the answer has ended
	ended bool      // it ended in this Read: finish is still to be called
	buf   []byte    // whole body (JSON) or the current partial line (SSE)
	over  bool      // body larger than maxKeep
	got   counts
}

// newObserver observes rc, an SSE stream or a body of length bytes (-1:
// unknown).
func newObserver(rc io.ReadCloser, sse bool, length int64) *observer {
	return &observer{rc: rc, sse: sse, left: length}
}

// broke is what the client gets before the failure err (an SSE error
// event, or nothing).
func (o *observer) broke(err error) []byte {
	switch {
	case o.onBreak != nil:
		return o.onBreak(err)
	case o.rt != nil:
		return o.rt.broken(o.fl, err)
	}
	return nil
}

func (o *observer) Read(p []byte) (int, error) {
	if o.fail != nil {
		if len(o.tail) > 0 {
			n := copy(p, o.tail)
			o.tail = o.tail[n:]
			return n, nil
		}
		return 0, o.fail
	}
	n, err := o.rc.Read(p)
	fresh := o.first.IsZero() // only this goroutine sets it (takeLocked)
	n, err, ended, got := o.take(p, n, err)
	if fresh && o.fl != nil && !o.first.IsZero() {
		o.rt.adm.first(o.fl) // the answer's first byte: admission's work ledger (admit.go)
	}
	if ended {
		o.finish(got)
	}
	return n, err
}

// take reads what one Read of the replica's answer brought (n bytes of p,
// err), under the observer's lock, and reports whether the answer ended
// with it, and its counts then: Read calls the end's callback after
// unlocking, so that settling (the routing table's lock, the cluster's
// sends) never runs under this lock.
func (o *observer) take(p []byte, n int, err error) (int, error, bool, counts) {
	o.mu.Lock()
	defer o.mu.Unlock()
	n, err = o.takeLocked(p, n, err)
	ended := o.ended
	o.ended = false
	return n, err, ended, o.got
}

func (o *observer) takeLocked(p []byte, n int, err error) (int, error) {
	if err != nil && err != io.EOF && !o.eof {
		// The answer broke off: pass on what came, then the error event
		// (streams only), then the failure.
		o.fail = err
		if ev := o.broke(err); o.sse {
			o.tail = ev
		}
		if n > 0 {
			o.feed(p[:n])
		}
		return n, nil
	}
	if n > 0 {
		if o.first.IsZero() {
			o.first = time.Now()
		}
		o.feed(p[:n])
		if !o.sse && o.left >= 0 {
			o.left = max(o.left-int64(n), 0)
		}
	}
	if err == io.EOF || (!o.sse && o.left == 0) {
		o.endBody()
	}
	return n, err
}

// endBody ends a JSON answer (all its bytes are in): its counts are read,
// then done is called. For a stream it only ends the answer.
func (o *observer) endBody() {
	if o.eof {
		return
	}
	if !o.sse && !o.over {
		if o.parse != nil {
			if c, ok := o.parse(o.buf, false); ok {
				o.got = c
			}
		} else {
			var a answerFields
			if parseAnswer(o.buf, &a) == nil {
				if c, ok := a.counts(); ok {
					o.got = c
				}
			}
		}
	}
	o.end()
}

func (o *observer) feed(p []byte) {
	if !o.sse {
		if o.over || len(o.buf)+len(p) > maxKeep {
			o.over, o.buf = true, nil
			return
		}
		o.buf = append(o.buf, p...)
		return
	}
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			if len(o.buf)+len(p) <= maxKeep {
				o.buf = append(o.buf, p...)
			}
			return
		}
		o.buf = append(o.buf, p[:i]...)
		o.line(o.buf)
		o.buf = o.buf[:0]
		p = p[i+1:]
	}
}

// end marks the answer as ended, once; Read then calls finish, outside
// the lock. o.mu is held.
func (o *observer) end() {
	if o.eof {
		return
	}
	o.eof, o.ended = true, true
}

// finish is the answer's end: done, or the flight's settling, with the
// counts got. Called once, without o.mu.
func (o *observer) finish(got counts) {
	switch {
	case o.done != nil:
		o.done(got)
	case o.release:
		o.rt.settle(o.fl, got.outcome(), time.Now())
	}
}

// line reads one SSE line; only data lines that mention counts or the end
// of the answer are parsed.
func (o *observer) line(l []byte) {
	l = bytes.TrimSuffix(l, []byte("\r"))
	data, ok := bytes.CutPrefix(l, []byte("data:"))
	if !ok {
		return
	}
	data = bytes.TrimSpace(data)
	if bytes.Equal(data, []byte(wire.DataDone)) {
		o.end()
		return
	}
	if o.parse != nil {
		if c, ok := o.parse(data, true); ok {
			o.got = c
		}
		if bytes.Contains(data, messageStop) { // Anthropic: the last event
			o.end()
		}
		return
	}
	if !bytes.Contains(data, []byte(`"timings"`)) && !bytes.Contains(data, []byte(`"usage"`)) && !bytes.Contains(data, []byte(`"stop"`)) {
		return
	}
	var a answerFields
	if parseAnswer(data, &a) != nil {
		return
	}
	if c, ok := a.counts(); ok {
		o.got = c
	}
	if a.stop {
		o.end()
	}
}

func (o *observer) Close() error { return o.rc.Close() }

// messageStop is in the data of an Anthropic stream's last event.
var messageStop = []byte(`"message_stop"`)

// learn records counts read from the answer before it reached the
// observer (by engine.Filter, from a chunk the client did not ask for); a
// later event with counts still wins.
func (o *observer) learn(c counts) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.got = c
}

func (o *observer) complete() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.eof
}

func (o *observer) counts() counts {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.got
}
