package router

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llm-ring/llm-ring/internal/config"
	"github.com/llm-ring/llm-ring/internal/model"
	"github.com/llm-ring/llm-ring/internal/replica"
	"github.com/llm-ring/llm-ring/internal/replicaset"
	"github.com/llm-ring/llm-ring/internal/wire"
)

// TestClientGoneCancelsUpstream (issue 25): a client that goes away in the
// middle of a streamed answer cancels the request to the replica at once,
// and the replica (the simulated llama.cpp, on the system clock) stops
// generating. 100 ms is a generous bound on an event, not a benchmark.
func TestClientGoneCancelsUpstream(t *testing.T) {
	host, err := replica.NewHost(replica.Options{Model: model.DefaultConfig(), Speed: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { host.Close() })
	rep, err := host.Add("llm-0", 0)
	if err != nil {
		t.Fatal(err)
	}
	var gone atomic.Int64 // unix nanos when the replica saw the request end
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			stop := make(chan struct{})
			defer close(stop)
			go func() {
				select {
				case <-r.Context().Done():
					gone.Store(time.Now().UnixNano())
				case <-stop:
				}
			}()
		}
		rep.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	rs := []replicaset.Replica{{Name: "llm-0", URL: srv.URL}}
	h := newHarness(t, "consistent", 0, func(c *config.Router) { c.Discovery.Static = rs })
	s := serveWith(t, h)

	// A long answer, streamed; read its first token, then hang up.
	body := `{"messages":[{"role":"user","content":"tell me a long story"}],"max_tokens":4000,"stream":true}`
	conn, err := net.Dial("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		wire.PathChatCompletions, len(body), body)
	rd := bufio.NewReader(conn)
	for {
		line, err := rd.ReadString('\n')
		if err != nil {
			t.Fatalf("before the first token: %v", err)
		}
		if strings.HasPrefix(line, "data: ") && strings.Contains(line, "content") {
			break
		}
	}
	if got := processing(t, srv.URL); got != 1 {
		t.Fatalf("the replica processes %v requests mid-answer, want 1", got)
	}
	closed := time.Now()
	conn.Close()

	waitFor(t, "the replica to see the request cancelled", func() bool { return gone.Load() != 0 })
	if d := time.Duration(gone.Load() - closed.UnixNano()); d > 100*time.Millisecond {
		t.Errorf("the replica saw the cancellation %v after the client left, want ≤ 100ms", d)
	} else {
		t.Logf("the replica saw the cancellation %v after the client left", d)
	}
	// The engine stopped: it frees the slot at its next model step (tens of
	// milliseconds here), not after the 4000 tokens (minutes at speed 1).
	for processing(t, srv.URL) != 0 {
		if time.Since(closed) > time.Second {
			t.Fatalf("the replica still generates 1 s after the client left")
		}
		time.Sleep(2 * time.Millisecond)
	}
	t.Logf("the replica's slot was free %v after the client left", time.Since(closed))
	waitFor(t, "the router to release the load", func() bool { return s.inflight() == 0 })
	if !h.waitLog(t, `"error_kind":"client"`) {
		t.Errorf("the request is not logged as ended by the client")
	}
}

// processing reads llamacpp:requests_processing from a replica's /metrics.
func processing(t *testing.T, url string) float64 {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "llamacpp:requests_processing "); ok {
			var f float64
			fmt.Sscan(v, &f)
			return f
		}
	}
	t.Fatalf("no llamacpp:requests_processing in %s/metrics", url)
	return 0
}
