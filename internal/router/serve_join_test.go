package router

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llm-ring/llm-ring/internal/config"
	"github.com/llm-ring/llm-ring/internal/replicaset"
)

// slowSource publishes its replicas, and returns a while after its context
// ends: a Serve that did not join it would return first.
type slowSource struct {
	rs       []replicaset.Replica
	returned atomic.Bool
}

func (s *slowSource) Run(ctx context.Context, update func([]replicaset.Replica)) error {
	update(s.rs)
	<-ctx.Done()
	time.Sleep(100 * time.Millisecond)
	s.returned.Store(true)
	return nil
}

// TestServeJoinsItsGoroutines: Serve returns only after the goroutines it
// started (here the discovery source) have returned.
func TestServeJoinsItsGoroutines(t *testing.T) {
	f := newFake(t, "llm-0")
	rs := []replicaset.Replica{f.replica()}
	rt, err := New(Options{Config: testConfig(t, "consistent", rs, func(c *config.Router) {
		c.ShutdownDelay, c.ShutdownGrace = 0, config.Duration(time.Second)
	})})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	src := &slowSource{rs: rs}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- rt.Serve(ctx, ln, src) }()
	time.Sleep(50 * time.Millisecond) // let it start
	cancel()
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return")
	}
	if !src.returned.Load() {
		t.Error("Serve returned before the discovery source it started")
	}
}
