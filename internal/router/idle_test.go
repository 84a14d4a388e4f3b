package router

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

// blockingBody blocks every read until its upstream request is cancelled.
type blockingBody struct{ done <-chan struct{} }

func (b blockingBody) Read([]byte) (int, error) { <-b.done; return 0, errors.New("request canceled") }
func (b blockingBody) Close() error             { return nil }

// TestIdleWatch: the idle watch (one timer for all answers) counts only the time
// a read waits on the replica: a client that takes longer than the idle
// timeout between reads does not end the answer, a read that waits longer
// does.
func TestIdleWatch(t *testing.T) {
	const idle = 40 * time.Millisecond
	_, cancel := context.WithCancelCause(context.Background())
	var w idleWatch
	b := &idleBody{rc: io.NopCloser(strings.NewReader("abcdef")), idle: idle, cancel: cancel, watch: &w}
	p := make([]byte, 2)
	for range 3 {
		if _, err := b.Read(p); err != nil {
			t.Fatalf("read: %v", err)
		}
		time.Sleep(3 * idle) // the client is slow: not the replica's idle time
	}
	if b.stalled.Load() {
		t.Error("a slow client counted as a stalled replica")
	}
	b.Close()

	ctx, cancel2 := context.WithCancelCause(context.Background())
	s := &idleBody{rc: blockingBody{ctx.Done()}, idle: idle, cancel: cancel2, watch: &w}
	if _, err := s.Read(p); !errors.Is(err, errUpstreamIdle) {
		t.Errorf("a read waiting past the idle timeout: %v, want errUpstreamIdle", err)
	}
	s.Close()
}

// TestIdleSweep: a sweep ends exactly the answers whose pending read began
// an idle timeout or longer ago (not one waiting less, not one between
// reads), removes them, keeps the timer armed while answers remain and
// disarms it when none do.
func TestIdleSweep(t *testing.T) {
	const idle = time.Hour // the timer never fires on its own here
	var w idleWatch
	body := func() (*idleBody, context.Context) {
		ctx, cancel := context.WithCancelCause(context.Background())
		b := &idleBody{rc: io.NopCloser(strings.NewReader("x")), idle: idle, cancel: cancel, watch: &w}
		w.add(b)
		return b, ctx
	}
	late, lateCtx := body()
	fresh, freshCtx := body()
	between, betweenCtx := body()
	now := time.Now().UnixNano()
	late.since.Store(now - int64(idle) - int64(time.Second))
	fresh.since.Store(now - int64(time.Minute))
	between.since.Store(0)
	w.sweep()
	if !late.stalled.Load() || !errors.Is(context.Cause(lateCtx), errUpstreamIdle) {
		t.Errorf("a read waiting past the timeout: stalled %t, cause %v", late.stalled.Load(), context.Cause(lateCtx))
	}
	for name, c := range map[string]struct {
		b   *idleBody
		ctx context.Context
	}{"fresh": {fresh, freshCtx}, "between reads": {between, betweenCtx}} {
		if c.b.stalled.Load() || c.ctx.Err() != nil {
			t.Errorf("%s: ended by the sweep", name)
		}
	}
	if len(w.bodies) != 2 || !w.armed {
		t.Fatalf("after the sweep: %d watched, armed %t; want the two alive, armed", len(w.bodies), w.armed)
	}
	if w.tick != watchTick(idle) || watchTick(40*time.Millisecond) != 5*time.Millisecond || watchTick(time.Microsecond) != time.Millisecond {
		t.Errorf("tick %v: want an eighth of the timeout, at least 1ms", w.tick)
	}
	late.Close() // already removed: harmless
	fresh.Close()
	between.Close()
	w.sweep()
	if len(w.bodies) != 0 || w.armed {
		t.Fatalf("after every close: %d watched, armed %t", len(w.bodies), w.armed)
	}
	w.timer.Stop()
}
