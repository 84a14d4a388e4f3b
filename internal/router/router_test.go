package router

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"

	"github.com/llm-ring/llm-ring/internal/config"
	"github.com/llm-ring/llm-ring/internal/discovery"
	"github.com/llm-ring/llm-ring/internal/policy"
	"github.com/llm-ring/llm-ring/internal/replicaset"
	"github.com/llm-ring/llm-ring/internal/wire"
)

// testConfig is config/router.yaml with the given policy and replicas.
var update = flag.Bool("update", false, "rewrite golden files in testdata/")

func testConfig(t testing.TB, pol string, replicas []replicaset.Replica, edit ...func(*config.Router)) *config.Router {
	t.Helper()
	c, err := config.Load("../../config/router.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c.Policy = pol
	c.Discovery.Static = replicas
	c.Upstream.DialTimeout = config.Duration(time.Second)
	for _, e := range edit {
		e(c)
	}
	return c
}

// fakeReplica answers like llama.cpp: it remembers each conversation's last
// prompt length, so a turn it has seen before reports its cache reuse.
type fakeReplica struct {
	name  string
	srv   *httptest.Server
	calls atomic.Int64
	// hold, when set, blocks each request until it is closed (or the client leaves).
	hold chan struct{}
	// status, when set, is answered instead of a completion.
	status int
	mu     sync.Mutex
	seen   map[string]int // conversation → cached tokens
	// arrivals lists the conversations of the completions it was sent, in order.
	arrivals []string
}

func newFake(t testing.TB, name string) *fakeReplica {
	f := &fakeReplica{name: name, seen: map[string]int{}}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeReplica) replica() replicaset.Replica {
	return replicaset.Replica{Name: f.name, URL: f.srv.URL}
}

func (f *fakeReplica) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/health" { // health checks (routers started with Serve)
		fmt.Fprint(w, `{"status":"ok"}`)
		return
	}
	f.calls.Add(1)
	f.mu.Lock()
	f.arrivals = append(f.arrivals, r.Header.Get("x-conversation-id"))
	f.mu.Unlock()
	body, _ := io.ReadAll(r.Body)
	if f.hold != nil {
		select {
		case <-f.hold:
		case <-r.Context().Done():
			return
		}
	}
	if f.status != 0 {
		w.WriteHeader(f.status)
		fmt.Fprintf(w, `{"error":{"code":%d,"message":"fake failure","type":"server_error"}}`, f.status)
		return
	}
	var req struct {
		Messages []wire.ChatMessage `json:"messages"`
		Stream   bool               `json:"stream"`
	}
	json.Unmarshal(body, &req)
	conv := r.Header.Get("x-conversation-id")
	prompt := len(body) / 4
	f.mu.Lock()
	cached := min(f.seen[conv], prompt)
	f.seen[conv] = prompt + 8
	f.mu.Unlock()
	tm := wire.Timings{CacheN: cached, PromptN: prompt - cached, PredictedN: 8}
	if req.Stream {
		w.Header().Set("Content-Type", "text/event-stream")
		fl := w.(http.Flusher)
		for i := range 3 {
			fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"w%d \"}}]}\n\n", i)
			fl.Flush()
		}
		b, _ := json.Marshal(map[string]any{"choices": []any{map[string]any{"index": 0, "delta": map[string]any{}, "finish_reason": "stop"}}, "timings": tm})
		fmt.Fprintf(w, "data: %s\n\ndata: [DONE]\n\n", b)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{
		"choices": []any{map[string]any{"index": 0, "message": map[string]any{"role": "assistant", "content": "ok"}, "finish_reason": "stop"}},
		"usage":   wire.Usage{PromptTokens: prompt, CompletionTokens: 8, TotalTokens: prompt + 8, PromptTokensDetails: &wire.PromptTokensDetails{CachedTokens: cached}},
		"timings": tm,
	})
}

type harness struct {
	rt    *Router
	srv   *httptest.Server
	fakes []*fakeReplica
	logs  *bytes.Buffer
}

func newHarness(t testing.TB, pol string, n int, edit ...func(*config.Router)) *harness {
	h := &harness{logs: &bytes.Buffer{}}
	var rs []replicaset.Replica
	for i := range n {
		f := newFake(t, fmt.Sprintf("llm-%d", i))
		h.fakes = append(h.fakes, f)
		rs = append(rs, f.replica())
	}
	cfg := testConfig(t, pol, rs, edit...)
	rt, err := New(Options{Config: cfg, Logger: slog.New(NewLogHandler(syncWriter{w: h.logs}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	rt.SetReplicas(rs)
	h.rt = rt
	h.srv = httptest.NewServer(rt)
	t.Cleanup(h.srv.Close)
	return h
}

var logMu sync.Mutex

type syncWriter struct{ w io.Writer }

func (s syncWriter) Write(p []byte) (int, error) {
	logMu.Lock()
	defer logMu.Unlock()
	return s.w.Write(p)
}

func chatBody(user string, stream bool) string {
	b, _ := json.Marshal(map[string]any{
		"messages":   []map[string]string{{"role": "system", "content": "You are terse."}, {"role": "user", "content": user}},
		"max_tokens": 8, "stream": stream,
	})
	return string(b)
}

func (h *harness) post(t testing.TB, path, body string, headers ...string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, h.srv.URL+path, strings.NewReader(body))
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// idle waits until no load is in flight (releases happen when handlers
// return, which may be just after the client saw the end of the answer).
func (h *harness) idle(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		busy := false
		for _, r := range h.rt.Table().Status().Replicas {
			if r.Load != (policy.Load{}) {
				busy = true
			}
		}
		if !busy {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("load never released: %+v", h.rt.Table().Status().Replicas)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestHeadersAndAffinity(t *testing.T) {
	h := newHarness(t, "llm-aware", 3)
	var first string
	for turn := 1; turn <= 4; turn++ {
		resp, body := h.post(t, wire.PathChatCompletions, chatBody(strings.Repeat("more words ", turn), false),
			"x-conversation-id", "conv-a", "x-turn", fmt.Sprint(turn))
		if resp.StatusCode != 200 {
			t.Fatalf("turn %d: %d %s", turn, resp.StatusCode, body)
		}
		to, reason := resp.Header.Get(HeaderRoutedTo), resp.Header.Get(HeaderRouteReason)
		if to == "" || reason == "" {
			t.Fatalf("turn %d: missing routing headers: %v", turn, resp.Header)
		}
		if first == "" {
			first = to
		} else if to != first {
			t.Errorf("turn %d went to %s, turn 1 to %s", turn, to, first)
		}
	}
	h.idle(t)
	// The fake reported cache reuse from turn 2 on: the router counted it.
	if got := testutil.ToFloat64(h.rt.metrics.promptTokens.WithLabelValues("cached")); got == 0 {
		t.Error("no cached prompt tokens counted")
	}
	// Without any header or user field, the conversation start is the key:
	// the same opening goes to the same replica every time.
	var prefixTo string
	for i := range 3 {
		msgs := []map[string]string{{"role": "system", "content": "Shared system prompt."}, {"role": "user", "content": "Opening question about ring hashing."}}
		for j := range i {
			msgs = append(msgs, map[string]string{"role": "assistant", "content": "answer"}, map[string]string{"role": "user", "content": fmt.Sprint("follow-up ", j)})
		}
		b, _ := json.Marshal(map[string]any{"messages": msgs})
		resp, _ := h.post(t, wire.PathChatCompletions, string(b))
		if prefixTo == "" {
			prefixTo = resp.Header.Get(HeaderRoutedTo)
		} else if got := resp.Header.Get(HeaderRoutedTo); got != prefixTo {
			t.Errorf("prefix-keyed turn %d went to %s, first turn to %s", i+1, got, prefixTo)
		}
	}
	// The body's user field is the next key source.
	resp, _ := h.post(t, wire.PathChatCompletions, `{"user":"alice","messages":[{"role":"user","content":"hi"}]}`)
	if resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}
	if !h.waitLog(t, `"key_source":"body:user"`) {
		t.Error("user field not used as the conversation key")
	}
}

// waitLog waits for a log line containing sub: the router logs a request
// just after its answer's last byte, so the client may see the answer first.
func (h *harness) waitLog(t testing.TB, sub string) bool {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(h.logText(), sub) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}

func (h *harness) logText() string {
	logMu.Lock()
	defer logMu.Unlock()
	return h.logs.String()
}

// TestStreamingUnbuffered: the first event reaches the client while the
// replica is still holding the rest, and the routing headers are there.
func TestStreamingUnbuffered(t *testing.T) {
	release := make(chan struct{})
	rep := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"first\"}}]}\n\n")
		w.(http.Flusher).Flush()
		<-release
		fmt.Fprint(w, "data: {\"choices\":[],\"timings\":{\"cache_n\":3,\"prompt_n\":7,\"predicted_n\":2}}\n\ndata: [DONE]\n\n")
	}))
	defer rep.Close()
	rs := []replicaset.Replica{{Name: "llm-0", URL: rep.URL}}
	rt, _ := New(Options{Config: testConfig(t, "consistent", rs)})
	rt.SetReplicas(rs)
	srv := httptest.NewServer(rt)
	defer srv.Close()
	resp, err := http.Post(srv.URL+wire.PathChatCompletions, "application/json", strings.NewReader(chatBody("hi", true)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.Header.Get(HeaderRoutedTo) != "llm-0" || resp.Header.Get(HeaderRouteReason) != "home" {
		t.Errorf("headers: %v", resp.Header)
	}
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || !strings.Contains(line, "first") {
		t.Fatalf("first event not delivered before the replica finished: %q %v", line, err)
	}
	if got := rt.Table().Status().Replicas[0].Load.Requests; got != 1 {
		t.Errorf("in flight during the stream = %d, want 1", got)
	}
	close(release)
	rest, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(rest), "[DONE]") {
		t.Errorf("end of stream missing: %q", rest)
	}
	// Counted just after the last byte reached the client: wait for it.
	deadline := time.Now().Add(5 * time.Second)
	for testutil.ToFloat64(rt.metrics.promptTokens.WithLabelValues("cached")) == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if got := testutil.ToFloat64(rt.metrics.promptTokens.WithLabelValues("cached")); got != 3 {
		t.Errorf("cached tokens from the final SSE event = %v, want 3", got)
	}
}

// TestLoadReleased covers every way a request can end.
func TestLoadReleased(t *testing.T) {
	h := newHarness(t, "bounded", 2)
	// Normal and streamed answers.
	h.post(t, wire.PathChatCompletions, chatBody("plain", false), "x-conversation-id", "a")
	h.post(t, wire.PathChatCompletions, chatBody("streamed", true), "x-conversation-id", "b")
	h.idle(t)
	// A replica failing with 500 (passed through to the client).
	h.fakes[0].status, h.fakes[1].status = 500, 500
	resp, _ := h.post(t, wire.PathChatCompletions, chatBody("fails", false), "x-conversation-id", "c")
	if resp.StatusCode != 500 {
		t.Errorf("replica 500 → %d, want 500 passed through", resp.StatusCode)
	}
	h.idle(t)
	h.fakes[0].status, h.fakes[1].status = 0, 0
	// A client that gives up while the replica is still working.
	h.fakes[0].hold, h.fakes[1].hold = make(chan struct{}), make(chan struct{})
	calls := h.fakes[0].calls.Load() + h.fakes[1].calls.Load()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, h.srv.URL+wire.PathChatCompletions, strings.NewReader(chatBody("slow", true)))
	done := make(chan struct{})
	go func() {
		defer close(done)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	for h.fakes[0].calls.Load()+h.fakes[1].calls.Load() == calls {
		time.Sleep(time.Millisecond)
	}
	cancel()
	<-done
	h.idle(t)
	if !h.waitLog(t, `"error_kind":"client"`) {
		t.Error("client cancellation not logged")
	}
}

func TestFailover(t *testing.T) {
	h := newHarness(t, "consistent", 3)
	// Kill the ring home of conversation "x": its next candidate must answer.
	resp, _ := h.post(t, wire.PathChatCompletions, chatBody("hi", false), "x-conversation-id", "x")
	home := resp.Header.Get(HeaderRoutedTo)
	for _, f := range h.fakes {
		if f.name == home {
			f.srv.Close()
		}
	}
	resp, body := h.post(t, wire.PathChatCompletions, chatBody("hi again", false), "x-conversation-id", "x")
	if resp.StatusCode != 200 {
		t.Fatalf("after killing %s: %d %s", home, resp.StatusCode, body)
	}
	if got := resp.Header.Get(HeaderRoutedTo); got == home {
		t.Fatalf("answered by the dead replica %s", got)
	}
	if testutil.ToFloat64(h.rt.metrics.failovers) != 1 {
		t.Errorf("failovers = %v, want 1", testutil.ToFloat64(h.rt.metrics.failovers))
	}
	h.idle(t)
	// Everyone dead: 502 with a JSON error naming the replica.
	for _, f := range h.fakes {
		f.srv.Close()
	}
	resp, body = h.post(t, wire.PathChatCompletions, chatBody("anyone?", false), "x-conversation-id", "x")
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, "unreachable") {
		t.Errorf("all dead: %d %s", resp.StatusCode, body)
	}
	h.idle(t)
}

func TestBadInput(t *testing.T) {
	h := newHarness(t, "llm-aware", 2, func(c *config.Router) { c.MaxBodyBytes = 2048 })
	empty, _ := New(Options{Config: testConfig(t, "llm-aware", h.rt.cfg.Discovery.Static)}) // no SetReplicas: no replica
	emptySrv := httptest.NewServer(empty)
	defer emptySrv.Close()
	broken := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, _, _ := w.(http.Hijacker).Hijack()
		c.Close() // the replica dies after reading the request
	}))
	defer broken.Close()
	brokenRt, _ := New(Options{Config: testConfig(t, "consistent", []replicaset.Replica{{Name: "b", URL: broken.URL}})})
	brokenRt.SetReplicas([]replicaset.Replica{{Name: "b", URL: broken.URL}})
	brokenSrv := httptest.NewServer(brokenRt)
	defer brokenSrv.Close()

	tests := []struct {
		name   string
		url    string
		method string
		path   string
		body   string
		status int
		inMsg  string
	}{
		// Over max_body_bytes (2048 here).
		{"oversized", h.srv.URL, "POST", wire.PathChatCompletions, chatBody(strings.Repeat("x", 3000), false), 413, "max_body_bytes"},
		{"truncated JSON", h.srv.URL, "POST", wire.PathChatCompletions, `{"messages":[{"role":"user","content":"hi"}`, 400, "malformed JSON"},
		{"not JSON", h.srv.URL, "POST", wire.PathCompletion, `prompt=hello`, 400, "not JSON"},
		{"array body", h.srv.URL, "POST", wire.PathChatCompletions, `[1,2]`, 400, "JSON object"},
		{"empty body", h.srv.URL, "POST", wire.PathChatCompletions, ``, 400, "empty"},
		{"messages wrong type", h.srv.URL, "POST", wire.PathChatCompletions, `{"messages":"hi"}`, 400, "messages"},
		{"content wrong type", h.srv.URL, "POST", wire.PathChatCompletions, `{"messages":[{"role":"user","content":{"a":1}}]}`, 400, "messages[0].content"},
		{"role missing", h.srv.URL, "POST", wire.PathChatCompletions, `{"messages":[{"content":"hi"}]}`, 400, "messages[0].role"},
		{"max_tokens wrong type", h.srv.URL, "POST", wire.PathChatCompletions, `{"messages":[{"role":"user","content":"hi"}],"max_tokens":"many"}`, 400, "max_tokens"},
		{"stream wrong type", h.srv.URL, "POST", wire.PathChatCompletions, `{"messages":[{"role":"user","content":"hi"}],"stream":"yes"}`, 400, "stream"},
		{"user wrong type", h.srv.URL, "POST", wire.PathChatCompletions, `{"messages":[{"role":"user","content":"hi"}],"user":42}`, 400, "user"},
		{"prompt missing", h.srv.URL, "POST", wire.PathCompletion, `{"n_predict":4}`, 400, "missing prompt"},
		{"prompt wrong type", h.srv.URL, "POST", wire.PathCompletions, `{"prompt":{"x":1}}`, 400, "prompt"},
		{"token id not integer", h.srv.URL, "POST", wire.PathCompletion, `{"prompt":[1,2.5]}`, 400, "prompt[1]"},
		{"unknown path", h.srv.URL, "POST", "/v1/audio/speech", `{}`, 404, "no route"},
		{"wrong method", h.srv.URL, "GET", wire.PathChatCompletions, ``, 405, "POST only"},
		{"no replica", emptySrv.URL, "POST", wire.PathChatCompletions, chatBody("hi", false), 503, "no ready replica"},
		{"replica dies mid-request", brokenSrv.URL, "POST", wire.PathChatCompletions, chatBody("hi", false), 502, "replica b failed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(tt.method, tt.url+tt.path, strings.NewReader(tt.body))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var eb wire.ErrorBody
			raw, _ := io.ReadAll(resp.Body)
			if err := json.Unmarshal(raw, &eb); err != nil {
				t.Fatalf("error body is not JSON: %q", raw)
			}
			if resp.StatusCode != tt.status || eb.Error.Code != tt.status || eb.Error.Type == "" || !strings.Contains(eb.Error.Message, tt.inMsg) {
				t.Errorf("got %d %+v, want %d with %q", resp.StatusCode, eb.Error, tt.status, tt.inMsg)
			}
		})
	}
	// The router still serves after all that.
	if resp, body := h.post(t, wire.PathChatCompletions, chatBody("still there?", false)); resp.StatusCode != 200 {
		t.Fatalf("router stopped serving: %d %s", resp.StatusCode, body)
	}
	h.idle(t)
	for _, r := range brokenRt.Table().Status().Replicas {
		if r.Load != (policy.Load{}) {
			t.Errorf("broken replica load not released: %+v", r.Load)
		}
	}
}

func TestAdminAndStatus(t *testing.T) {
	h := newHarness(t, "llm-aware", 3, withAdmin(t, "s3cret"))
	admin := httptest.NewServer(h.rt.AdminHandler())
	defer admin.Close()
	get := func(path string) (int, string) {
		resp, err := http.Get(h.srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get("/healthz"); code != 200 {
		t.Errorf("/healthz = %d", code)
	}
	if code, body := get("/readyz"); code != 200 || !strings.Contains(body, `"replicas": 3`) {
		t.Errorf("/readyz = %d %s", code, body)
	}
	code, body := get("/replicas")
	var info ReplicasInfo
	if err := json.Unmarshal([]byte(body), &info); code != 200 || err != nil || len(info.Replicas) != 3 || info.Policy != "llm-aware" {
		t.Fatalf("/replicas = %d %s", code, body)
	}
	req, _ := http.NewRequest(http.MethodPut, admin.URL+"/admin/policy", strings.NewReader(`{"policy":"bounded","settings":{"load_unit":"tokens"},"reset":true}`))
	req.Header.Set("Authorization", "Bearer s3cret")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("PUT /admin/policy: %v %v", err, resp.Status)
	}
	var got PolicySettings
	json.NewDecoder(resp.Body).Decode(&got)
	resp.Body.Close()
	// A partial update keeps the keys it does not name (issue 10): epsilon
	// stays the configured 0.25.
	if got.Policy != "bounded" || got.Settings["load_unit"] != "tokens" || got.Settings["epsilon"] != 0.25 {
		t.Errorf("PUT answer = %+v", got)
	}
	r2, _ := h.post(t, wire.PathChatCompletions, chatBody("hi", false), "x-conversation-id", "z")
	if r2.Header.Get(HeaderRouteReason) != "home" {
		t.Errorf("reason after switch = %q", r2.Header.Get(HeaderRouteReason))
	}
	if !h.waitLog(t, `"policy":"bounded"`) {
		t.Error("requests after the switch are not logged under bounded")
	}
	// Invalid updates are 400s naming the problem (issue 10), and change nothing.
	for bad, want := range map[string]string{
		`{"policy":"random"}`: "unknown policy", `{"settings":{"epsilon":-1}}`: "settings.epsilon: must be > 0",
		`{"policy":"llm-aware","settings":{"long_cap_factor":"x"}}`: "settings.long_cap_factor: must be a number",
		`{"settings":{"nope":1}}`:                                   "settings.nope: unknown key", `{"nope":1}`: "nope", `{`: "invalid",
	} {
		req, _ := http.NewRequest(http.MethodPut, admin.URL+"/admin/policy", strings.NewReader(bad))
		req.Header.Set("Authorization", "Bearer s3cret")
		resp, _ := http.DefaultClient.Do(req)
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 400 || !strings.Contains(string(b), want) {
			t.Errorf("PUT %s → %d %s, want 400 naming %q", bad, resp.StatusCode, b, want)
		}
		resp.Body.Close()
	}
	greq, _ := http.NewRequest(http.MethodGet, admin.URL+"/admin/policy", nil)
	greq.Header.Set("Authorization", "Bearer s3cret")
	if resp, err := http.DefaultClient.Do(greq); err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(b), `"load_unit": "tokens"`) || !strings.Contains(string(b), `"epsilon": 0.25`) {
			t.Errorf("after rejected updates GET /admin/policy = %s", b)
		}
	}
	if code, body := get("/metrics"); code != 200 || !strings.Contains(body, `llm_ring_inflight_tokens{replica="llm-0"}`) {
		t.Errorf("/metrics = %d, missing in-flight gauges", code)
	}
}

// TestMetricsGolden checks the request and token counters after a fixed
// sequence against testdata/metrics.golden.
func TestMetricsGolden(t *testing.T) {
	h := newHarness(t, "consistent", 1)
	for turn := 1; turn <= 3; turn++ {
		h.post(t, wire.PathChatCompletions, chatBody(strings.Repeat("abcd", turn*10), false), "x-conversation-id", "g")
	}
	h.idle(t)
	// The counters are updated just after each answer's last byte: wait for
	// the third request to be counted, and its body let go (just after),
	// before comparing.
	deadline := time.Now().Add(5 * time.Second)
	for (testutil.ToFloat64(h.rt.metrics.requests.WithLabelValues("consistent", "llm-0", "home", "200", "")) < 3 || h.rt.budget.held.Load() != 0) &&
		time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	names := []string{"llm_ring_requests_total", "llm_ring_prompt_tokens_total", "llm_ring_predicted_tokens_total", "llm_ring_replicas", "llm_ring_replica_healthy", "llm_ring_buffered_body_bytes"}
	const golden = "testdata/metrics.golden"
	if *update {
		mfs, err := h.rt.Registry().Gather()
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		for _, mf := range mfs {
			if slices.Contains(names, mf.GetName()) {
				expfmt.MetricFamilyToText(&buf, mf)
			}
		}
		if err := os.WriteFile(golden, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if err := testutil.GatherAndCompare(h.rt.Registry(), bytes.NewReader(want), names...); err != nil {
		t.Error(err)
	}
}

// TestGracefulShutdown: cancelling Serve's context lets an in-flight
// request finish, then Serve returns nil.
func TestGracefulShutdown(t *testing.T) {
	f := newFake(t, "llm-0")
	f.hold = make(chan struct{})
	rs := []replicaset.Replica{f.replica()}
	rt, _ := New(Options{Config: testConfig(t, "consistent", rs)})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- rt.Serve(ctx, ln, discovery.Static(rs)) }()
	url := "http://" + ln.Addr().String()
	for {
		if resp, err := http.Get(url + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	result := make(chan int, 1)
	go func() {
		resp, err := http.Post(url+wire.PathChatCompletions, "application/json", strings.NewReader(chatBody("hi", false)))
		if err != nil {
			result <- 0
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		result <- resp.StatusCode
	}()
	for f.calls.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	time.Sleep(50 * time.Millisecond) // Serve is shutting down, the request still in flight
	close(f.hold)
	if code := <-result; code != 200 {
		t.Errorf("in-flight request during shutdown got %d, want 200", code)
	}
	if err := <-served; err != nil {
		t.Errorf("Serve returned %v, want nil", err)
	}
}

// BenchmarkProxy measures the router's own overhead: the same request sent
// straight to an in-process replica, and through the router.
func BenchmarkProxy(b *testing.B) {
	h := newHarness(b, "llm-aware", 1)
	h.rt.log = slog.New(slog.DiscardHandler)
	body := chatBody("a short question about routing", false)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	run := func(b *testing.B, url string) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			req, _ := http.NewRequest(http.MethodPost, url+wire.PathChatCompletions, strings.NewReader(body))
			req.Header.Set("x-conversation-id", fmt.Sprint("c", i%64))
			resp, err := client.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
	b.Run("direct", func(b *testing.B) { run(b, h.fakes[0].srv.URL) })
	b.Run("via-router", func(b *testing.B) { run(b, h.srv.URL) })
}

// TestReleasedBeforeTheClientSeesTheEnd guards a race found by the SDK
// end-to-end test: a client that sends its next turn the moment it reads
// the end of a stream must find the previous turn released and placement
// memory updated, even when the replica closes the stream later.
func TestReleasedBeforeTheClientSeesTheEnd(t *testing.T) {
	for _, tc := range []struct{ path, last string }{
		{wire.PathChatCompletions, "data: {\"choices\":[],\"timings\":{\"cache_n\":0,\"prompt_n\":5,\"predicted_n\":2}}\n\ndata: [DONE]\n\n"},
		{wire.PathCompletion, "data: {\"content\":\"\",\"stop\":true,\"timings\":{\"cache_n\":0,\"prompt_n\":5,\"predicted_n\":2}}\n\n"},
	} {
		closeLater := make(chan struct{})
		rep := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprint(w, tc.last)
			w.(http.Flusher).Flush()
			select { // the replica keeps the stream open after the last event
			case <-closeLater:
			case <-r.Context().Done():
			}
		}))
		rs := []replicaset.Replica{{Name: "llm-0", URL: rep.URL}}
		rt, _ := New(Options{Config: testConfig(t, "llm-aware", rs)})
		rt.SetReplicas(rs)
		srv := httptest.NewServer(rt)
		body := chatBody("hi", true)
		if tc.path == wire.PathCompletion {
			body = `{"prompt":"hi","stream":true}`
		}
		resp, err := http.Post(srv.URL+tc.path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(resp.Body)
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(line, "[DONE]") || strings.Contains(line, `"stop":true`) {
				break
			}
		}
		if st := rt.Table().Status(); st.Replicas[0].Load != (policy.Load{}) || st.Memory != 1 {
			t.Errorf("%s: at the end of the stream, load %+v and %d conversations remembered; want released and 1", tc.path, st.Replicas[0].Load, st.Memory)
		}
		close(closeLater)
		resp.Body.Close()
		srv.Close()
		rep.Close()
	}
}
