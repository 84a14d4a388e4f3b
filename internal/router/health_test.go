package router

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llm-ring/llm-ring/internal/config"
	"github.com/llm-ring/llm-ring/internal/replica"
	"github.com/llm-ring/llm-ring/internal/replicaset"
	"github.com/llm-ring/llm-ring/internal/wire"
)

// fakeOllama answers as Ollama's server does on the paths the router
// touches: no /health and no /metrics (404 "404 page not found", text),
// GET / "Ollama is running", GET /api/version, and an OpenAI chat answer
// with usage (Ollama's /v1 compatibility layer).
type fakeOllama struct {
	replicaset.Replica
	srv            *httptest.Server
	health, scrape atomic.Int64 // GET /health, GET /metrics
	version        atomic.Int64 // GET /api/version
	served         atomic.Int64
}

func newFakeOllama(t *testing.T, name string) *fakeOllama {
	o := &fakeOllama{}
	o.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/health":
			o.health.Add(1)
			http.NotFound(w, r)
		case r.URL.Path == "/metrics":
			o.scrape.Add(1)
			http.NotFound(w, r)
		case r.Method == http.MethodGet && r.URL.Path == "/":
			fmt.Fprint(w, "Ollama is running")
		case r.Method == http.MethodGet && r.URL.Path == "/api/version":
			o.version.Add(1)
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"version":"0.17.4"}`)
		case r.Method == http.MethodPost && r.URL.Path == wire.PathChatCompletions:
			o.served.Add(1)
			io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"id":"chatcmpl-1","object":"chat.completion","model":"tiny","choices":[{"index":0,`+
				`"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],`+
				`"usage":{"prompt_tokens":12,"completion_tokens":1,"total_tokens":13}}`)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(o.srv.Close)
	o.Replica = replicaset.Replica{Name: name, URL: o.srv.URL}
	return o
}

// shippedFast is the shipped configuration as it is, with the health checks
// and scrapes made fast enough for a test (the thresholds stay).
func shippedFast(c *config.Router) {
	c.HealthCheck.Interval = config.Duration(20 * time.Millisecond)
	c.Signals.Interval = config.Duration(20 * time.Millisecond)
}

// chatTurns sends n chat requests of n conversations and fails on any
// answer but 200.
func chatTurns(t *testing.T, s *served, n int) {
	t.Helper()
	for i := range n {
		resp, body := s.do(t, "POST", wire.PathChatCompletions, chatBody(fmt.Sprint("question ", i), false),
			"x-conversation-id", fmt.Sprint("conv-", i))
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, body)
		}
	}
}

// TestShippedConfigEveryFace (issue 20): the shipped config/router.yaml, as
// it is (engine: llamacpp), routes without an error in front of every
// engine face: the simulated llama.cpp, vLLM and SGLang faces, and an
// Ollama, which has no /health. Before, the health checks took every
// Ollama replica out of routing after two intervals and requests got 503.
func TestShippedConfigEveryFace(t *testing.T) {
	for _, face := range append(append([]string{}, replica.APIs...), "ollama") {
		t.Run(face, func(t *testing.T) {
			var rs []replicaset.Replica
			var ollamas []*fakeOllama
			for i := range 3 {
				name := fmt.Sprint("llm-", i)
				if face == "ollama" {
					o := newFakeOllama(t, name)
					ollamas = append(ollamas, o)
					rs = append(rs, o.Replica)
					continue
				}
				rs = append(rs, simReplica(t, name, func(o *replica.Options) { o.API = face }))
			}
			s := stubRouter(t, "llm-aware", rs, shippedFast)
			for _, o := range ollamas {
				waitFor(t, "several health rounds", func() bool { return o.health.Load() >= 5 })
			}
			chatTurns(t, s, 12)
			resp, body := s.do(t, "GET", "/readyz", "")
			if resp.StatusCode != 200 {
				t.Fatalf("/readyz: %d %s", resp.StatusCode, body)
			}
			if face != "ollama" {
				if strings.Contains(body, "mismatch") || strings.Contains(s.logText(), "health_path_mismatch") {
					t.Errorf("a mismatch reported in front of %s: %s\n%s", face, body, s.logText())
				}
				return
			}
			checkMismatchReported(t, s, body)
		})
	}
}

// checkMismatchReported: each Ollama replica's 404 on /health was logged
// once, loudly, and /readyz and /replicas say so.
func checkMismatchReported(t *testing.T, s *served, readyz string) {
	t.Helper()
	var ready struct {
		Mismatch map[string]string `json:"health_path_mismatch"`
	}
	if err := json.Unmarshal([]byte(readyz), &ready); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if got := ready.Mismatch[fmt.Sprint("llm-", i)]; got != "GET /health answered 404 Not Found" {
			t.Errorf("/readyz names llm-%d's mismatch as %q: %s", i, got, readyz)
		}
	}
	if n := strings.Count(s.logText(), `"msg":"health_path_mismatch"`); n != 3 {
		t.Errorf("health_path_mismatch logged %d times, want once per replica (3)", n)
	}
	if !strings.Contains(s.logText(), `"level":"ERROR","msg":"health_path_mismatch"`) {
		t.Errorf("the mismatch is not logged as an error:\n%s", s.logText())
	}
	_, body := s.do(t, "GET", "/replicas", "")
	var info ReplicasInfo
	if err := json.Unmarshal([]byte(body), &info); err != nil {
		t.Fatal(err)
	}
	for _, r := range info.Replicas {
		if !r.Healthy || r.Engine != "llamacpp" || r.HealthPathMismatch != "GET /health answered 404 Not Found" {
			t.Errorf("/replicas row %+v: want healthy, engine llamacpp, the mismatch named", r)
		}
	}
}

// TestOllamaEngine: with engine: ollama the health checks ask GET
// /api/version, nothing is a mismatch, /metrics is never scraped (Ollama
// publishes none: its signals stay unknown); a replica that stops
// answering is still taken out of routing.
func TestOllamaEngine(t *testing.T) {
	a, b := newFakeOllama(t, "a"), newFakeOllama(t, "b")
	s := stubRouter(t, "consistent", []replicaset.Replica{a.Replica, b.Replica}, shippedFast,
		func(c *config.Router) { c.Engine = "ollama" })
	waitFor(t, "health rounds on /api/version", func() bool { return a.version.Load() >= 3 && b.version.Load() >= 3 })
	chatTurns(t, s, 6)
	if a.health.Load()+b.health.Load()+a.scrape.Load()+b.scrape.Load() != 0 {
		t.Errorf("GET /health %d, /metrics %d times: want neither asked of Ollama",
			a.health.Load()+b.health.Load(), a.scrape.Load()+b.scrape.Load())
	}
	_, body := s.do(t, "GET", "/replicas", "")
	if strings.Contains(body, "mismatch") || strings.Contains(body, `"reported"`) || !strings.Contains(body, `"engine": "ollama"`) {
		t.Errorf("/replicas: want engine ollama, no mismatch, no reported signals:\n%s", body)
	}
	a.srv.Close()
	waitFor(t, "the closed replica out of routing", func() bool {
		for _, r := range s.rt.Table().Status().Replicas {
			if r.Name == "a" {
				return !r.Healthy
			}
		}
		return false
	})
	chatTurns(t, s, 4)
	if b.served.Load() < 4 {
		t.Errorf("b served %d requests after a closed, want ≥ 4", b.served.Load())
	}
}

// TestReplicaEngine: a static replica names its own engine; the rest keep
// the set's. The Ollama one is probed on /api/version and not scraped; the
// llama.cpp one on /health, and scraped.
func TestReplicaEngine(t *testing.T) {
	o := newFakeOllama(t, "ollama-0")
	o.Engine = "ollama"
	l := simReplica(t, "llm-0", nil)
	s := stubRouter(t, "consistent", []replicaset.Replica{l, o.Replica}, shippedFast)
	waitFor(t, "the Ollama replica probed on /api/version", func() bool { return o.version.Load() >= 3 })
	waitFor(t, "the llama.cpp replica's signals", func() bool {
		_, body := s.do(t, "GET", "/replicas", "")
		return strings.Contains(body, `"reported"`)
	})
	_, body := s.do(t, "GET", "/replicas", "")
	if o.health.Load()+o.scrape.Load() != 0 || strings.Contains(body, "mismatch") ||
		!strings.Contains(body, `"engine": "ollama"`) || !strings.Contains(body, `"engine": "llamacpp"`) {
		t.Errorf("Ollama asked /health %d, /metrics %d times; /replicas:\n%s", o.health.Load(), o.scrape.Load(), body)
	}
}
