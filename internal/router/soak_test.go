package router

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llm-ring/llm-ring/internal/config"
	"github.com/llm-ring/llm-ring/internal/discovery"
	"github.com/llm-ring/llm-ring/internal/replicaset"
	"github.com/llm-ring/llm-ring/internal/wire"
)

// Modes of a chaos replica.
const (
	modeOK      = iota // answers (streams 3 events, or one JSON body)
	modeStall          // sends headers (and one event of a stream), then nothing
	modeLoading        // 503 everywhere, /health included (llama.cpp loading its model)
	modeDead           // its listener and connections are closed
)

// chaosReplica is a replica on a fixed loopback address that can be
// killed, restarted, stalled and made to answer 503.
type chaosReplica struct {
	name, addr string
	mode       atomic.Int32
	mu         sync.Mutex
	srv        *http.Server
	stop       chan struct{} // closed to release stalled answers
}

func newChaosReplica(t *testing.T, name string) *chaosReplica {
	c := &chaosReplica{name: name, stop: make(chan struct{})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c.addr = ln.Addr().String()
	c.start(ln)
	return c
}

func (c *chaosReplica) start(ln net.Listener) {
	c.srv = &http.Server{Handler: http.HandlerFunc(c.serve)}
	go c.srv.Serve(ln)
}

func (c *chaosReplica) serve(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	switch c.mode.Load() {
	case modeLoading:
		http.Error(w, `{"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}`, 503)
		return
	case modeStall:
		if r.URL.Path == "/health" {
			break // a stalled replica still says it is healthy: only the idle timeout catches it
		}
		if strings.Contains(r.Header.Get("Accept"), "text/event-stream") {
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"w\"}}]}\n\n")
		} else {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(200) // headers, and no body
		}
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-c.stop:
		}
		return
	}
	if r.URL.Path == "/health" {
		fmt.Fprint(w, `{"status":"ok"}`)
		return
	}
	if strings.Contains(r.Header.Get("Accept"), "text/event-stream") {
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range 3 {
			fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"w%d\"}}]}\n\n", i)
			w.(http.Flusher).Flush()
		}
		fmt.Fprint(w, "data: {\"choices\":[],\"timings\":{\"cache_n\":0,\"prompt_n\":5,\"predicted_n\":3}}\n\ndata: [DONE]\n\n")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprint(w, `{"choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"timings":{"cache_n":0,"prompt_n":5,"predicted_n":1}}`)
}

// set changes the mode; dead closes the server, leaving dead restarts it
// on the same address.
func (c *chaosReplica) set(t *testing.T, mode int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.mode.Swap(mode)
	switch {
	case mode == modeDead && old != modeDead:
		c.srv.Close()
	case mode != modeDead && old == modeDead:
		ln, err := net.Listen("tcp", c.addr)
		if err != nil {
			t.Errorf("restart %s: %v", c.name, err)
			c.mode.Store(modeDead)
			return
		}
		c.start(ln)
	}
}

func (c *chaosReplica) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	close(c.stop)
	c.srv.Close()
}

// TestSoak (issue 10) runs steady traffic for a few seconds while replicas
// are killed, restarted, stalled and made to answer 503, and checks that
// every request got a 200 or a documented error (502, 503, 504, or a stream
// that ends with an SSE error event), that the in-flight load returns to 0,
// that the heap grows by less than 32 MiB, and that no goroutine is left
// behind once the router and replicas stop.
func TestSoak(t *testing.T) {
	duration := 8 * time.Second
	if testing.Short() {
		duration = 2 * time.Second
	}
	baseG := runtime.NumGoroutine()
	baseHeap := heapInUse()

	reps := make([]*chaosReplica, 4)
	rs := make([]replicaset.Replica, len(reps))
	for i := range reps {
		reps[i] = newChaosReplica(t, fmt.Sprintf("llm-%d", i))
		rs[i] = replicaset.Replica{Name: reps[i].name, URL: "http://" + reps[i].addr}
	}
	cfg := testConfig(t, "llm-aware", rs, func(c *config.Router) {
		c.Upstream.IdleTimeout = config.Duration(250 * time.Millisecond)
		c.HealthCheck.Interval = config.Duration(50 * time.Millisecond)
		c.HealthCheck.Timeout = config.Duration(200 * time.Millisecond)
		c.HealthCheck.UnhealthyThreshold, c.HealthCheck.HealthyThreshold = 2, 1
		c.ShutdownGrace = config.Duration(2 * time.Second)
	})
	upstream := &http.Transport{MaxIdleConnsPerHost: 64, ResponseHeaderTimeout: 5 * time.Second}
	rt, err := New(Options{Config: cfg, Transport: upstream})
	if err != nil {
		t.Fatal(err)
	}
	rt.SetReplicas(rs)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- rt.Serve(ctx, ln, discovery.Static(rs)) }()
	url := "http://" + ln.Addr().String()

	// Chaos: every 150 ms one replica changes mode; one of them is always
	// left answering so that the run is not all errors.
	chaosDone := make(chan struct{})
	var chaos sync.WaitGroup
	chaos.Go(func() {
		modes := []int32{modeDead, modeOK, modeStall, modeOK, modeLoading, modeOK}
		for i := 0; ; i++ {
			select {
			case <-chaosDone:
				return
			case <-time.After(150 * time.Millisecond):
			}
			reps[1+i%3].set(t, modes[(i/3)%len(modes)])
		}
	})

	// Traffic: 8 users, streamed and plain requests, until the time is up.
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}, Timeout: 30 * time.Second}
	var total, ok, errorsSeen atomic.Int64
	var users sync.WaitGroup
	end := time.Now().Add(duration)
	for u := range 8 {
		users.Go(func() {
			for i := 0; time.Now().Before(end); i++ {
				stream := i%2 == 0
				req, _ := http.NewRequest("POST", url+wire.PathChatCompletions, strings.NewReader(chatBody(fmt.Sprint("turn ", i), stream)))
				req.Header.Set("x-conversation-id", fmt.Sprintf("u%d-c%d", u, i/4))
				if stream {
					req.Header.Set("Accept", "text/event-stream")
				}
				total.Add(1)
				resp, err := client.Do(req)
				if err != nil {
					t.Errorf("request failed without an answer: %v", err)
					continue
				}
				b, rerr := io.ReadAll(resp.Body)
				resp.Body.Close()
				body := string(b)
				switch {
				case resp.StatusCode == 200 && rerr == nil && (!stream || strings.Contains(body, "[DONE]")):
					ok.Add(1)
				case resp.StatusCode == 200 && stream && strings.Contains(body, `data: {"error":{"code":50`):
					errorsSeen.Add(1) // a stream that broke or stalled: ended with an error event
				case (resp.StatusCode == 502 || resp.StatusCode == 503 || resp.StatusCode == 504) && strings.Contains(body, `"error"`):
					errorsSeen.Add(1)
				default:
					t.Errorf("undocumented outcome: %d, read error %v, body %.300q", resp.StatusCode, rerr, body)
				}
			}
		})
	}
	users.Wait()
	close(chaosDone)
	chaos.Wait()
	t.Logf("%d requests: %d answered, %d documented errors", total.Load(), ok.Load(), errorsSeen.Load())
	if ok.Load() < total.Load()/2 {
		t.Errorf("only %d of %d requests answered", ok.Load(), total.Load())
	}

	// The load returns to 0.
	waitFor(t, "the in-flight load to return to 0", func() bool {
		for _, r := range rt.Table().Status().Replicas {
			if r.Load.Requests != 0 || r.Load.Tokens != 0 {
				return false
			}
		}
		return rt.budget.held.Load() == 0
	})
	if grown := heapInUse() - baseHeap; grown > 32<<20 {
		t.Errorf("heap grew by %.1f MiB, bound 32 MiB", float64(grown)/(1<<20))
	} else {
		t.Logf("heap grew by %.1f MiB (bound 32 MiB)", float64(grown)/(1<<20))
	}

	// Everything stops; no goroutine is left behind.
	cancel()
	if err := <-served; err != nil {
		t.Errorf("Serve: %v", err)
	}
	for _, c := range reps {
		c.close()
	}
	client.CloseIdleConnections()
	upstream.CloseIdleConnections()
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > baseG+2 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > baseG+2 {
		buf := make([]byte, 1<<20)
		t.Errorf("%d goroutines left, %d before:\n%s", n, baseG, buf[:runtime.Stack(buf, true)])
	}
}
