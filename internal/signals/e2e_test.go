package signals_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llm-ring/llm-ring/internal/model"
	"github.com/llm-ring/llm-ring/internal/replica"
	"github.com/llm-ring/llm-ring/internal/signals"
)

// latest is a Sink that keeps each replica's last report.
type latest struct {
	mu   sync.Mutex
	last map[string]signals.Sample
	ok   map[string]bool
}

func (l *latest) Report(name string, s signals.Sample, ok bool, _ time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.last[name], l.ok[name] = s, ok
}

func (l *latest) get(name string) (signals.Sample, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.last[name], l.ok[name]
}

// TestSimulatedReplica scrapes the repository's simulated llama.cpp replica
// (internal/replica, on 127.0.0.1) with the llamacpp preset: idle it reports
// nothing running; with requests in flight it reports them running (and
// queued beyond its slots) and a KV-cache in use.
func TestSimulatedReplica(t *testing.T) {
	cfg := model.DefaultConfig() // 4 slots
	// Slow steps: every answer (at least AnswerMin = 32 tokens) lasts
	// several seconds of wall time, so requests are surely in flight while
	// the scraper looks, however busy the machine.
	cfg.StepOverhead = 200 * time.Millisecond
	h, err := replica.NewHost(replica.Options{Model: cfg})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	r, err := h.Add("llm-0", 0)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	served := make(chan error, 1)
	go func() { served <- replica.Serve(ctx, ln, r) }()
	base := "http://" + ln.Addr().String()

	sink := &latest{last: map[string]signals.Sample{}, ok: map[string]bool{}}
	m, err := signals.Preset("llamacpp")
	if err != nil {
		t.Fatal(err)
	}
	s, err := signals.New(signals.Config{Interval: 20 * time.Millisecond, Timeout: 5 * time.Second, Mapping: m}, sink, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.SetTargets([]signals.Target{{Name: "llm-0", URL: base}})
	ran := make(chan error, 1)
	go func() { ran <- s.Run(ctx) }()

	waitSample := func(what string, pred func(signals.Sample) bool) signals.Sample {
		t.Helper()
		end := time.Now().Add(30 * time.Second)
		for {
			got, ok := sink.get("llm-0")
			if ok && pred(got) {
				return got
			}
			if time.Now().After(end) {
				t.Fatalf("gave up waiting for %s; last sample %+v (ok=%v)", what, got, ok)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	idle := waitSample("an idle sample", func(s signals.Sample) bool { return s.HasRunning })
	if idle.Running != 0 || idle.Waiting != 0 || !idle.HasWaiting || !idle.HasKV {
		t.Errorf("idle replica: %+v, want all three signals known, nothing running or waiting", idle)
	}

	// Six requests on four slots: four run, two are deferred.
	reqCtx, stopRequests := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := fmt.Sprintf(`{"prompt":"Request %d: tell me a long story about consistent hashing.","n_predict":300}`, i)
			req, err := http.NewRequestWithContext(reqCtx, http.MethodPost, base+"/completion", strings.NewReader(body))
			if err != nil {
				t.Error(err)
				return
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return // cut short at the end of the test
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}()
	}
	busy := waitSample("requests running", func(s signals.Sample) bool { return s.HasRunning && s.Running > 0 })
	if busy.Running > float64(cfg.NParallel) {
		t.Errorf("running %v exceeds the replica's %d slots", busy.Running, cfg.NParallel)
	}
	waitSample("KV-cache in use", func(s signals.Sample) bool { return s.HasKV && s.KVUse > 0 && s.KVUse <= 1 })
	waitSample("the two requests beyond the slots deferred", func(s signals.Sample) bool { return s.Running == 4 && s.Waiting == 2 })

	stopRequests()
	wg.Wait()
	cancel()
	if err := <-ran; err != nil {
		t.Errorf("scraper Run: %v", err)
	}
	if err := <-served; err != nil {
		t.Errorf("replica Serve: %v", err)
	}
}
