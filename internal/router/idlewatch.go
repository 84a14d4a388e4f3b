package router

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"time"
)

// errUpstreamIdle ends an answer from which no byte came for
// upstream.idle_timeout.
var errUpstreamIdle = errors.New("no byte from the replica within upstream.idle_timeout")

// idleBody is a replica's answer body that fails with errUpstreamIdle when
// a read waits longer than idle for the next byte. Only the time spent
// waiting on the replica counts, not the time the client takes to read.
//
// A read marks when it began (since) and clears it when it returns; the
// router's idleWatch, not a timer per answer, ends the answer whose read
// has waited idle or longer (issue 21: a timer per answer was an
// allocation, a timer-heap insertion and, as the earliest timer, a wake of
// the network poller for every request). A stream's events cost a clock
// read each.
type idleBody struct {
	rc      io.ReadCloser
	idle    time.Duration
	cancel  context.CancelCauseFunc // aborts the upstream request
	watch   *idleWatch
	since   atomic.Int64 // when the pending read began (Unix ns); 0: none pending
	stalled atomic.Bool
	watched bool // in watch's set (under watch.mu)
}

func (b *idleBody) Read(p []byte) (int, error) {
	b.since.Store(time.Now().UnixNano())
	if !b.watched {
		b.watch.add(b)
	}
	n, err := b.rc.Read(p)
	b.since.Store(0)
	if err != nil && err != io.EOF && b.stalled.Load() {
		err = errUpstreamIdle
	}
	return n, err
}

func (b *idleBody) Close() error {
	if b.watched {
		b.watch.remove(b)
	}
	err := b.rc.Close()
	b.cancel(nil)
	return err
}

// idleWatch ends the answers whose read has waited on the replica for
// their idle timeout: one timer for all of them, armed while any answer is
// watched, looking every eighth of the timeout, so an answer ends after
// between 1 and 1⅛ idle timeouts without a byte. Reads and closes come
// from the requests' goroutines (the answer's body is read by one at a
// time), the sweep from the timer's.
type idleWatch struct {
	mu     sync.Mutex
	bodies map[*idleBody]struct{}
	timer  *time.Timer
	tick   time.Duration // the current timer's period (the shortest idle/8 seen)
	armed  bool
}

// watchTick is how often the watch looks for idle answers: an eighth of
// the timeout, at least a millisecond.
func watchTick(idle time.Duration) time.Duration { return max(idle/8, time.Millisecond) }

func (w *idleWatch) add(b *idleBody) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.bodies == nil {
		w.bodies = make(map[*idleBody]struct{})
	}
	w.bodies[b] = struct{}{}
	b.watched = true
	tick := watchTick(b.idle)
	switch {
	case w.timer == nil:
		w.tick, w.armed = tick, true
		w.timer = time.AfterFunc(tick, w.sweep)
	case !w.armed || tick < w.tick:
		w.tick, w.armed = min(tick, w.tick), true
		w.timer.Reset(w.tick)
	}
}

func (w *idleWatch) remove(b *idleBody) {
	w.mu.Lock()
	delete(w.bodies, b)
	w.mu.Unlock()
	b.watched = false
}

// sweep ends every answer whose pending read has waited its idle timeout,
// and arms the timer again while answers remain. The cancel, under the
// lock, closes the answer's connection (its callbacks run on goroutines of
// their own); a body closed meanwhile is no longer in the set.
func (w *idleWatch) sweep() {
	now := time.Now().UnixNano()
	w.mu.Lock()
	defer w.mu.Unlock()
	for b := range w.bodies {
		if since := b.since.Load(); since != 0 && time.Duration(now-since) >= b.idle {
			b.stalled.Store(true)
			b.cancel(errUpstreamIdle)
			delete(w.bodies, b) // ended: Close finds it gone
		}
	}
	if w.armed = len(w.bodies) > 0; w.armed {
		w.timer.Reset(w.tick)
	}
}
