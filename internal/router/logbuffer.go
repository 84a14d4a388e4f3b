package router

import (
	"io"
	"log/slog"
	"sync"
	"time"
)

// logFlushSize is the most a buffered log holds before it writes, whatever
// its interval: a 64 KiB write, a hundred-odd request lines.
const logFlushSize = 64 << 10

// NewBufferedLogHandler is NewLogHandler with the per-request lines
// buffered (issue 21): they are written together every flushEvery, or as
// soon as logFlushSize bytes wait, instead of one write(2) per request —
// the access-log buffering of nginx (`access_log … buffer= flush=`) and
// Envoy (`--file-flush-interval-msec`, 10 s by default). Every other line
// (startup, membership, warnings, errors) is written at once, after the
// request lines before it, so the order of the lines is the order they
// were logged. stop writes what waits and ends the flushing; a process
// killed without it loses at most flushEvery of request lines.
// flushEvery ≤ 0 is NewLogHandler: every line written at once.
func NewBufferedLogHandler(w io.Writer, opts *slog.HandlerOptions, flushEvery time.Duration) (h slog.Handler, stop func()) {
	lh := NewLogHandler(w, opts).(*logHandler)
	if flushEvery <= 0 {
		return lh, func() {}
	}
	lh.w.buffered = true
	done, ended := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(ended)
		t := time.NewTicker(flushEvery)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				lh.w.flush()
			case <-done:
				lh.w.flush()
				return
			}
		}
	}()
	var once sync.Once
	return lh, func() { once.Do(func() { close(done); <-ended }) }
}

// line is the direct path's write of one request line: into the buffer
// when the log is buffered (written when it fills or at the next flush),
// else written at once.
func (l *lockedWriter) line(p []byte) {
	if !l.buffered {
		l.Write(p)
		return
	}
	l.mu.Lock()
	l.buf = append(l.buf, p...)
	if len(l.buf) < logFlushSize {
		l.mu.Unlock()
		return
	}
	l.writeOutLocked()
}

// flush writes the buffered lines.
func (l *lockedWriter) flush() {
	l.mu.Lock()
	if len(l.buf) == 0 {
		l.mu.Unlock()
		return
	}
	l.writeOutLocked()
}

// writeOutLocked writes the buffer, called with mu held, which it releases:
// the buffer is swapped for the spare so that request lines go on being
// appended while the write is under way, and out (taken before mu is let
// go) keeps the writes in the order their lines were buffered.
func (l *lockedWriter) writeOutLocked() {
	b := l.buf
	l.buf, l.spare = l.spare[:0], nil
	l.out.Lock()
	l.mu.Unlock()
	l.w.Write(b)
	l.out.Unlock()
	l.mu.Lock()
	if l.spare == nil && cap(b) <= 4*logFlushSize {
		l.spare = b[:0]
	}
	l.mu.Unlock()
}
