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

// TestIdleWatch: the idle watch (one timer per answer) counts only the time
// a read waits on the replica: a client that takes longer than the idle
// timeout between reads does not end the answer, a read that waits longer
// does.
func TestIdleWatch(t *testing.T) {
	const idle = 40 * time.Millisecond
	_, cancel := context.WithCancelCause(context.Background())
	b := &idleBody{rc: io.NopCloser(strings.NewReader("abcdef")), idle: idle, cancel: cancel}
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
	s := &idleBody{rc: blockingBody{ctx.Done()}, idle: idle, cancel: cancel2}
	if _, err := s.Read(p); !errors.Is(err, errUpstreamIdle) {
		t.Errorf("a read waiting past the idle timeout: %v, want errUpstreamIdle", err)
	}
	s.Close()
}
