package router

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/llm-ring/llm-ring/internal/config"
	"github.com/llm-ring/llm-ring/internal/discovery"
	"github.com/llm-ring/llm-ring/internal/replicaset"
	"github.com/llm-ring/llm-ring/internal/wire"
)

// served is a router serving on a loopback listener through Serve (the
// production path, with the server's timeouts), in front of fake replicas.
type served struct {
	*harness
	url    string
	addr   string
	cancel context.CancelFunc
	done   chan error
}

func serveHarness(t *testing.T, pol string, n int, edit ...func(*config.Router)) *served {
	t.Helper()
	return serveWith(t, newHarness(t, pol, n, edit...))
}

// serveQuiet is serveHarness with the router's log discarded.
func serveQuiet(t *testing.T, pol string, n int, edit ...func(*config.Router)) *served {
	t.Helper()
	h := newHarness(t, pol, n, edit...)
	h.rt.log = slog.New(slog.DiscardHandler)
	return serveWith(t, h)
}

func serveWith(t *testing.T, h *harness) *served {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &served{harness: h, url: "http://" + ln.Addr().String(), addr: ln.Addr().String(), cancel: cancel, done: make(chan error, 1)}
	go func() { s.done <- h.rt.Serve(ctx, ln, discovery.Static(h.rt.cfg.Discovery.Static)) }()
	t.Cleanup(func() { s.stop(t) })
	return s
}

func (s *served) stop(t *testing.T) {
	if s.cancel == nil {
		return
	}
	s.cancel()
	s.cancel = nil
	if err := <-s.done; err != nil {
		t.Errorf("Serve: %v", err)
	}
}

func (s *served) do(t *testing.T, method, path, body string, headers ...string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(method, s.url+path, strings.NewReader(body))
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

// slowBody opens a connection that declares a body of declared bytes,
// sends the first send bytes of it and then stalls.
func slowBody(t *testing.T, addr string, declared, send int) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: router\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", wire.PathChatCompletions, declared)
	go c.Write([]byte(strings.Repeat(" ", send))) // blocks until read, or fails when the router closes
	return c
}

// answer reads the response on a raw connection and reports whether the
// router then closed it.
func answer(t *testing.T, c net.Conn) (status int, header http.Header, closed bool) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return 0, nil, false
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	_, err = br.ReadByte()
	return resp.StatusCode, resp.Header, err == io.EOF
}

// heapInUse is the live heap after a collection.
func heapInUse() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// waitFor polls cond until it holds or 10 s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestMaxOutputTokens is a regression test for issue 10: "max_tokens":
// 9223372036854775807 overflowed the in-flight tokens, and 1000000000 made
// a replica look full. Both are now 400s naming the field, before routing.
func TestMaxOutputTokens(t *testing.T) {
	h := newHarness(t, "llm-aware", 2, func(c *config.Router) { c.MaxOutputTokens = 4096 })
	tests := []struct {
		name, path, body string
		status           int
		inMsg            string
	}{
		// The overflow of the issue.
		{"max_tokens int64 max", wire.PathChatCompletions, `{"messages":[{"role":"user","content":"hi"}],"max_tokens":9223372036854775807}`, 400, "max_tokens: must be ≤ max_output_tokens (4096)"},
		// The "replica looks full" of the issue, through llama.cpp's field.
		{"n_predict 1e9", wire.PathCompletion, `{"prompt":"hi","n_predict":1000000000}`, 400, "n_predict: must be ≤ max_output_tokens (4096)"},
		{"max_completion_tokens over", wire.PathChatCompletions, `{"messages":[{"role":"user","content":"hi"}],"max_completion_tokens":4097}`, 400, "max_completion_tokens"},
		// Beyond int64: still a 400 naming the field.
		{"beyond int64", wire.PathCompletions, `{"prompt":"hi","max_tokens":1e30}`, 400, "max_tokens"},
		// The limit itself is allowed.
		{"at the limit", wire.PathChatCompletions, `{"messages":[{"role":"user","content":"hi"}],"max_tokens":4096}`, 200, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := h.post(t, tt.path, tt.body)
			if resp.StatusCode != tt.status || !strings.Contains(body, tt.inMsg) {
				t.Errorf("got %d %s, want %d with %q", resp.StatusCode, body, tt.status, tt.inMsg)
			}
		})
	}
	h.idle(t)
	if calls := h.fakes[0].calls.Load() + h.fakes[1].calls.Load(); calls != 1 {
		t.Errorf("replicas saw %d requests, want only the one at the limit", calls)
	}
}

// TestSlowBodies is a regression test for issue 10: idle keep-alive and
// slow-body connections were never closed. 100 connections that declare 8
// MB and send 64 KiB of it each get 408 at server.read_timeout and are
// closed; an idle keep-alive connection is closed at server.idle_timeout;
// meanwhile the router serves others, and the heap stays within the body
// budget plus 32 KiB per connection.
func TestSlowBodies(t *testing.T) {
	const conns, sent = 100, 64 << 10
	const budget = 16 << 20
	s := serveQuiet(t, "llm-aware", 2, func(c *config.Router) {
		c.Server.ReadTimeout = config.Duration(3 * time.Second)
		c.Server.IdleTimeout = config.Duration(500 * time.Millisecond)
		c.Server.MaxBufferedBodyBytes = budget
	})
	// An idle keep-alive connection: one request, then nothing.
	idle, err := net.Dial("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	fmt.Fprintf(idle, "GET /healthz HTTP/1.1\r\nHost: router\r\n\r\n")
	if code, _, closed := answer(t, idle); code != 200 || !closed {
		t.Errorf("idle keep-alive connection: status %d, closed %v; want 200 and closed at idle_timeout", code, closed)
	}

	base := heapInUse()
	cs := make([]net.Conn, conns)
	for i := range cs {
		cs[i] = slowBody(t, s.addr, 8<<20, sent)
	}
	// Each holds the 64 KiB it sent (its first buffer) until read_timeout.
	waitFor(t, "the slow bodies to be buffered", func() bool { return s.rt.budget.held.Load() >= conns*sent })
	peak := heapInUse() - base
	bound := int64(budget + conns*32<<10)
	t.Logf("heap with %d slow bodies of %d KiB: +%.1f MiB (bound %.1f MiB)", conns, sent>>10, float64(peak)/(1<<20), float64(bound)/(1<<20))
	if peak > bound {
		t.Errorf("heap grew by %d bytes with %d slow bodies, bound %d", peak, conns, bound)
	}
	// Others are served meanwhile.
	for i := range 5 {
		if resp, body := s.do(t, "POST", wire.PathChatCompletions, chatBody(fmt.Sprint("meanwhile ", i), false)); resp.StatusCode != 200 {
			t.Fatalf("request during the slow bodies: %d %s", resp.StatusCode, body)
		}
	}
	var wg sync.WaitGroup
	codes := make([]int, conns)
	closed := make([]bool, conns)
	for i, c := range cs {
		wg.Go(func() { codes[i], _, closed[i] = answer(t, c) })
	}
	wg.Wait()
	for i := range cs {
		if codes[i] != http.StatusRequestTimeout || !closed[i] {
			t.Fatalf("slow body %d: status %d, closed %v; want 408 and closed", i, codes[i], closed[i])
		}
	}
	waitFor(t, "the budget to be released", func() bool { return s.rt.budget.held.Load() == 0 })
}

// TestBodyBudget is a regression test for issue 10: 30 connections each
// sending 8 MB and withholding the last bytes held 203 MB for ever. Bodies
// now reserve server.max_buffered_body_bytes as their bytes arrive: past
// it, a request waits server.max_buffered_body_wait, then gets 503 with
// Retry-After and its connection closed; the heap stays within the budget.
// (Connections are opened one at a time so that which ones fit is known.)
func TestBodyBudget(t *testing.T) {
	const conns, sent = 30, 1<<20 - 1 // each holder holds a buffer of exactly 1 MiB
	const budget, holders = 4 << 20, 4
	s := serveQuiet(t, "llm-aware", 2, func(c *config.Router) {
		c.MaxBodyBytes = 2 << 20
		c.Server.ReadTimeout = config.Duration(time.Minute) // the test ends the holders itself
		c.Server.MaxBufferedBodyBytes = budget
		c.Server.MaxBufferedBodyWait = config.Duration(100 * time.Millisecond)
	})
	base := heapInUse()
	var held []net.Conn
	for i := range conns {
		refused := counter(s.rt.metrics.bodyBudgetFull)
		c := slowBody(t, s.addr, 2<<20, sent)
		if i < holders {
			waitFor(t, "a holder's body", func() bool { return s.rt.budget.held.Load() == int64(i+1)<<20 })
			held = append(held, c)
			continue
		}
		code, h, closed := answer(t, c)
		if code != 503 || h.Get("Retry-After") == "" || !closed || counter(s.rt.metrics.bodyBudgetFull) != refused+1 {
			t.Fatalf("connection %d over the budget: status %d, Retry-After %q, closed %v", i, code, h.Get("Retry-After"), closed)
		}
	}
	if got := s.rt.budget.held.Load(); got != budget {
		t.Errorf("held %d bytes, want the budget %d", got, budget)
	}
	peak := heapInUse() - base
	bound := int64(budget + budget/2)
	t.Logf("heap with %d bodies of 1 MiB held back: +%.1f MiB (bound %.1f MiB)", conns, float64(peak)/(1<<20), float64(bound)/(1<<20))
	if peak > bound {
		t.Errorf("heap grew by %d bytes, bound %d", peak, bound)
	}
	// A new request while the budget is full: 503 with Retry-After.
	resp, body := s.do(t, "POST", wire.PathChatCompletions, chatBody("full?", false))
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" || !strings.Contains(body, "max_buffered_body_bytes") {
		t.Errorf("request while full: %d %q %s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	// Once the holders go, the router serves again.
	for _, c := range held {
		c.Close()
	}
	waitFor(t, "the budget to be released", func() bool { return s.rt.budget.held.Load() == 0 })
	if resp, body := s.do(t, "POST", wire.PathChatCompletions, chatBody("again", false)); resp.StatusCode != 200 {
		t.Errorf("after the holders left: %d %s", resp.StatusCode, body)
	}
}

func counter(c interface{ Write(*dto.Metric) error }) float64 {
	var m dto.Metric
	c.Write(&m)
	return m.GetCounter().GetValue()
}

// withAdmin enables the admin API with token (written to a file).
func withAdmin(t *testing.T, token string) func(*config.Router) {
	path := filepath.Join(t.TempDir(), "admin-token")
	if err := os.WriteFile(path, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return func(c *config.Router) { c.Admin.Listen, c.Admin.TokenFile = "127.0.0.1:0", path }
}

// TestAdminApart is a regression test for issue 10: PUT /admin/policy and
// POST /admin/reset answered 200 to any client, a browser's cross-origin
// simple request included, on the one client port. The admin API now has
// its own listener and a bearer token; the client listener answers 404.
func TestAdminApart(t *testing.T) {
	h := newHarness(t, "llm-aware", 2, withAdmin(t, "s3cret"))
	admin := httptest.NewServer(h.rt.AdminHandler())
	defer admin.Close()
	tests := []struct {
		name, url, method, path, body string
		header                        []string
		status                        int
	}{
		// Never on the client listener, token or not.
		{"policy on the client listener", h.srv.URL, "PUT", "/admin/policy", `{"policy":"bounded"}`, []string{"Authorization", "Bearer s3cret"}, 404},
		{"reset on the client listener", h.srv.URL, "POST", "/admin/reset", ``, nil, 404},
		{"get on the client listener", h.srv.URL, "GET", "/admin/policy", ``, nil, 404},
		// On the admin listener: no token, a wrong one, another scheme.
		{"no token", admin.URL, "PUT", "/admin/policy", `{"policy":"bounded"}`, nil, 401},
		{"wrong token", admin.URL, "POST", "/admin/reset", ``, []string{"Authorization", "Bearer s3cre"}, 401},
		{"basic auth", admin.URL, "GET", "/admin/policy", ``, []string{"Authorization", "Basic czNjcmV0"}, 401},
		// A browser's cross-origin simple request cannot carry the header.
		{"cross-origin form post", admin.URL, "POST", "/admin/reset", `a=b`, []string{"Content-Type", "application/x-www-form-urlencoded", "Origin", "http://evil.example"}, 401},
		// With the token.
		{"get with token", admin.URL, "GET", "/admin/policy", ``, []string{"Authorization", "Bearer s3cret"}, 200},
		{"unknown admin path", admin.URL, "GET", "/admin/nope", ``, []string{"Authorization", "Bearer s3cret"}, 404},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(tt.method, tt.url+tt.path, strings.NewReader(tt.body))
			for i := 0; i+1 < len(tt.header); i += 2 {
				req.Header.Set(tt.header[i], tt.header[i+1])
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var eb wire.ErrorBody
			if resp.StatusCode != tt.status || (tt.status != 200 && (json.Unmarshal(b, &eb) != nil || eb.Error.Code != tt.status)) {
				t.Errorf("got %d %s, want %d with a JSON error", resp.StatusCode, b, tt.status)
			}
		})
	}
	if h.rt.Table().Policy().Name() != "llm-aware" {
		t.Errorf("policy switched to %s by an unauthorized request", h.rt.Table().Policy().Name())
	}
	// A change is logged once, with the caller and the old and new settings.
	req, _ := http.NewRequest("PUT", admin.URL+"/admin/policy", strings.NewReader(`{"policy":"bounded"}`))
	req.Header.Set("Authorization", "Bearer s3cret")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("authorized PUT: %v %v", err, resp)
	}
	resp.Body.Close()
	var line struct {
		Caller string         `json:"caller"`
		Old    PolicySettings `json:"old"`
		New    PolicySettings `json:"new"`
	}
	var changes int
	for _, l := range strings.Split(h.logText(), "\n") {
		if strings.Contains(l, `"msg":"policy_changed"`) {
			changes++
			json.Unmarshal([]byte(l), &line)
		}
	}
	if changes != 1 || !strings.HasPrefix(line.Caller, "127.0.0.1:") || line.Old.Policy != "llm-aware" || line.New.Policy != "bounded" {
		t.Errorf("%d policy_changed lines, last %+v; want 1 with caller, old llm-aware, new bounded", changes, line)
	}
}

// TestAdminToken: the admin API refuses to start without a usable token.
func TestAdminToken(t *testing.T) {
	empty := filepath.Join(t.TempDir(), "empty")
	os.WriteFile(empty, []byte(" \n"), 0o600)
	tests := []struct {
		name string
		edit func(*config.Router)
		want string
	}{
		// A token file holding only white space.
		{"empty token file", func(c *config.Router) { c.Admin.Listen, c.Admin.TokenFile = "127.0.0.1:0", empty }, "admin.token_file: " + empty + " is empty"},
		// A token file that is not there.
		{"missing token file", func(c *config.Router) { c.Admin.Listen, c.Admin.TokenFile = "127.0.0.1:0", empty+".nope" }, "admin.token_file"},
		// admin.listen without a token file.
		{"no token file", func(c *config.Router) { c.Admin.Listen, c.Admin.TokenFile = "127.0.0.1:0", "" }, "admin.token_file: must be set"},
		// The client listener's address.
		{"same address", func(c *config.Router) { c.Admin.Listen, c.Admin.TokenFile = c.Listen, empty }, "admin.listen: must differ"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(Options{Config: testConfig(t, "consistent", []replicaset.Replica{{Name: "a", URL: "http://127.0.0.1:1"}}, tt.edit)})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New: %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

// stub is a replica whose every answer is fn.
func stub(t *testing.T, name string, fn http.HandlerFunc) replicaset.Replica {
	srv := httptest.NewServer(fn)
	t.Cleanup(srv.Close)
	return replicaset.Replica{Name: name, URL: srv.URL}
}

// stubRouter is a router (through Serve) in front of the given replicas.
func stubRouter(t *testing.T, pol string, rs []replicaset.Replica, edit ...func(*config.Router)) *served {
	h := &harness{logs: &bytes.Buffer{}}
	rt, err := New(Options{Config: testConfig(t, pol, rs, edit...), Logger: slog.New(NewLogHandler(syncWriter{w: h.logs}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	rt.SetReplicas(rs)
	h.rt = rt
	return serveWith(t, h)
}

func (s *served) inflight() (n int64) {
	for _, r := range s.rt.Table().Status().Replicas {
		n += r.Load.Requests + r.Load.Tokens
	}
	return n
}

// TestStalledReplica is a regression test for issue 10: a replica that sent
// headers and then stalled held the client and the in-flight load until
// the client gave up. Now upstream.idle_timeout ends the request: 504 when
// nothing reached the client yet, else an SSE error event then close; the
// load is released and the stall counted.
func TestStalledReplica(t *testing.T) {
	unblock := make(chan struct{})
	t.Cleanup(func() { close(unblock) })
	silent := stub(t, "silent", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		w.(http.Flusher).Flush() // headers, then nothing
		select {
		case <-unblock:
		case <-r.Context().Done():
		}
	})
	midway := stub(t, "midway", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"first\"}}]}\n\n")
		w.(http.Flusher).Flush() // one event, then nothing
		select {
		case <-unblock:
		case <-r.Context().Done():
		}
	})
	idle := func(c *config.Router) { c.Upstream.IdleTimeout = config.Duration(300 * time.Millisecond) }
	client := &http.Client{Timeout: 20 * time.Second} // the old router held the client until this
	for _, tc := range []struct {
		replica  replicaset.Replica
		status   int
		inBody   []string
		metricOK string
	}{
		// Headers and then nothing: nothing has reached the client, 504.
		{silent, 504, []string{`"code": 504`, "upstream.idle_timeout"}, "504"},
		// An event and then nothing: the event, then an error event.
		{midway, 200, []string{"first", `data: {"error":{"code":504`, "upstream.idle_timeout"}, "504"},
	} {
		t.Run(tc.replica.Name, func(t *testing.T) {
			s := stubRouter(t, "consistent", []replicaset.Replica{tc.replica}, idle)
			resp, err := client.Post(s.url+wire.PathChatCompletions, "application/json", strings.NewReader(chatBody("hi", true)))
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body) // a cut stream ends with an error here; the body read so far counts
			resp.Body.Close()
			if resp.StatusCode != tc.status {
				t.Errorf("status %d, want %d", resp.StatusCode, tc.status)
			}
			for _, want := range tc.inBody {
				if !strings.Contains(string(b), want) {
					t.Errorf("body %q lacks %q", b, want)
				}
			}
			waitFor(t, "the load to be released", func() bool { return s.inflight() == 0 })
			waitFor(t, "the request to be counted", func() bool {
				return counter(s.rt.metrics.requests.WithLabelValues("consistent", tc.replica.Name, "home", tc.metricOK, "")) == 1
			})
			if got := counter(s.rt.metrics.upstreamErrors.WithLabelValues(tc.replica.Name, "stall")); got != 1 {
				t.Errorf("stalls counted: %v, want 1", got)
			}
		})
	}
}

// TestBrokenStream is a regression test for issue 10: a replica killed
// mid-stream gave the client a 200 and a cut stream with no error event,
// counted as code 200. The client now gets an SSE error event (OpenAI's
// shape) before the close, and the request is logged and counted as 502.
func TestBrokenStream(t *testing.T) {
	dies := stub(t, "dies", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"first\"}}]}\n\n")
		w.(http.Flusher).Flush()
		c, _, _ := w.(http.Hijacker).Hijack()
		c.Close() // killed mid-stream
	})
	s := stubRouter(t, "consistent", []replicaset.Replica{dies})
	resp, err := http.Post(s.url+wire.PathChatCompletions, "application/json", strings.NewReader(chatBody("hi", true)))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	events := strings.Split(strings.TrimSpace(string(b)), "\n\n")
	var last wire.ErrorBody
	if len(events) != 2 || !strings.Contains(events[0], "first") ||
		json.Unmarshal([]byte(strings.TrimPrefix(events[1], "data: ")), &last) != nil || last.Error.Code != 502 || last.Error.Type != wire.ErrTypeServer {
		t.Errorf("stream %q: want the first event, then an OpenAI-shaped error event with code 502", b)
	}
	waitFor(t, "the request to be counted as 502", func() bool {
		return counter(s.rt.metrics.requests.WithLabelValues("consistent", "dies", "home", "502", "")) == 1
	})
	if !s.waitLog(t, `"error_kind":"broken"`) || !s.waitLog(t, `"status":502`) {
		t.Errorf("broken stream not logged as 502 broken:\n%s", s.logText())
	}
	if s.inflight() != 0 {
		t.Errorf("load not released")
	}
}

// TestRetryNotReady is a regression test for issue 10: a replica answering
// 503 while it loads its model (llama.cpp does) had 10 of 30 requests get
// 503. A 503 or 429 before any byte reached the client now goes to the
// policy's next candidate, within upstream.max_attempts, body replayed.
func TestRetryNotReady(t *testing.T) {
	h := newHarness(t, "consistent", 3)
	h.fakes[0].status = 503 // loading its model
	h.fakes[1].status = 429 // busy
	for i := range 30 {
		resp, body := h.post(t, wire.PathChatCompletions, chatBody("hi", false), "x-conversation-id", fmt.Sprint("c", i))
		if resp.StatusCode != 200 || resp.Header.Get(HeaderRoutedTo) != "llm-2" {
			t.Fatalf("request %d: %d from %s %s", i, resp.StatusCode, resp.Header.Get(HeaderRoutedTo), body)
		}
	}
	h.idle(t)
	if h.fakes[2].calls.Load() != 30 {
		t.Errorf("the ready replica answered %d of 30", h.fakes[2].calls.Load())
	}
	if got := counter(h.rt.metrics.failovers); got == 0 {
		t.Error("no failover counted")
	}
	// Everyone not ready: after max_attempts the last 503 goes to the client.
	h.fakes[2].status = 503
	resp, _ := h.post(t, wire.PathChatCompletions, chatBody("hi", false), "x-conversation-id", "x")
	if resp.StatusCode != 503 && resp.StatusCode != 429 {
		t.Errorf("all replicas refusing: %d, want their 503 or 429", resp.StatusCode)
	}
	h.idle(t)
}

// checked is a replica with a switchable health endpoint.
type checked struct {
	replicaset.Replica
	srv     *httptest.Server
	loading atomic.Bool // GET /health answers 503, as llama.cpp while it loads its model
	served  atomic.Int64
}

func newChecked(t *testing.T, name string) *checked {
	c := &checked{}
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			if c.loading.Load() {
				http.Error(w, `{"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}`, 503)
				return
			}
			fmt.Fprint(w, `{"status":"ok"}`)
			return
		}
		if r.Method != http.MethodPost { // the router's /metrics scrapes are not requests served
			http.NotFound(w, r)
			return
		}
		c.served.Add(1)
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}`)
	}))
	t.Cleanup(c.srv.Close)
	c.Replica = replicaset.Replica{Name: name, URL: c.srv.URL}
	return c
}

func healthEvery(c *config.Router) {
	c.HealthCheck.Interval = config.Duration(20 * time.Millisecond)
	c.HealthCheck.Timeout = config.Duration(time.Second)
	c.HealthCheck.UnhealthyThreshold, c.HealthCheck.HealthyThreshold = 2, 2
}

// TestHealthChecks is a regression test for issue 10: with every replica
// dead (static discovery) /readyz said 200 and every request got 502; a
// loading replica was sent requests. Active health checks now take a
// replica out of routing after unhealthy_threshold failures and bring it
// back after healthy_threshold successes; /readyz is 503 when none is
// healthy.
func TestHealthChecks(t *testing.T) {
	a, b := newChecked(t, "a"), newChecked(t, "b")
	s := stubRouter(t, "consistent", []replicaset.Replica{a.Replica, b.Replica}, healthEvery)
	healthy := func(name string, want bool) func() bool {
		return func() bool {
			for _, r := range s.rt.Table().Status().Replicas {
				if r.Name == name {
					return r.Healthy == want
				}
			}
			return false
		}
	}
	// A loads its model: it takes no request until it is ready again.
	a.loading.Store(true)
	waitFor(t, "a to be marked unhealthy", healthy("a", false))
	for i := range 20 {
		if resp, body := s.do(t, "POST", wire.PathChatCompletions, chatBody("hi", false), "x-conversation-id", fmt.Sprint("c", i)); resp.StatusCode != 200 {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, body)
		}
	}
	if a.served.Load() != 0 || b.served.Load() != 20 {
		t.Errorf("loading replica served %d, ready one %d; want 0 and 20", a.served.Load(), b.served.Load())
	}
	if resp, body := s.do(t, "GET", "/replicas", ""); !strings.Contains(body, `"healthy": false`) {
		t.Errorf("/replicas does not show a as unhealthy: %d %s", resp.StatusCode, body)
	}
	a.loading.Store(false)
	waitFor(t, "a to be healthy again", healthy("a", true))
	if !s.waitLog(t, `"msg":"replica_unhealthy"`) || !s.waitLog(t, `"msg":"replica_healthy"`) {
		t.Error("health changes not logged")
	}
	// Every replica dead: /readyz 503, requests 503 "no ready replica".
	if resp, _ := s.do(t, "GET", "/readyz", ""); resp.StatusCode != 200 {
		t.Fatalf("/readyz with healthy replicas: %d", resp.StatusCode)
	}
	a.srv.Close()
	b.srv.Close()
	waitFor(t, "both to be marked unhealthy", func() bool { return healthy("a", false)() && healthy("b", false)() })
	resp, body := s.do(t, "GET", "/readyz", "")
	if resp.StatusCode != 503 || !strings.Contains(body, "no healthy replica (2 on the ring") {
		t.Errorf("/readyz with every replica dead: %d %s", resp.StatusCode, body)
	}
	if resp, body := s.do(t, "POST", wire.PathChatCompletions, chatBody("hi", false)); resp.StatusCode != 503 {
		t.Errorf("request with every replica dead: %d %s, want 503", resp.StatusCode, body)
	}
}

// TestSafeLogs is a regression test for issue 10: a 100 KB
// x-conversation-id made a 103 KB log line per request, and the user field
// (often an e-mail address) was logged verbatim. The conversation is now
// logged as a short hash and every line stays small.
func TestSafeLogs(t *testing.T) {
	h := newHarness(t, "llm-aware", 2)
	huge := strings.Repeat("k", 100<<10)
	h.post(t, wire.PathChatCompletions, chatBody("hi", false), "x-conversation-id", huge)
	h.post(t, wire.PathChatCompletions, `{"user":"alice@example.com","messages":[{"role":"user","content":"hi"}]}`)
	h.fakes[0].srv.Close() // a failover line too
	h.fakes[1].srv.Close()
	h.post(t, wire.PathChatCompletions, chatBody("hi", false), "x-conversation-id", huge)
	h.idle(t)
	if !h.waitLog(t, `"key_source":"body:user"`) || !h.waitLog(t, `"status":502`) {
		t.Fatalf("requests not logged:\n%.2000s", h.logText())
	}
	for _, line := range strings.Split(strings.TrimSpace(h.logText()), "\n") {
		if len(line) > 4096 {
			t.Errorf("log line of %d bytes: %.300s…", len(line), line)
		}
		if strings.Contains(line, "kkkkkkkk") || strings.Contains(line, "alice") {
			t.Errorf("conversation key logged verbatim: %.300s", line)
		}
		var l struct{ Conversation string }
		if json.Unmarshal([]byte(line), &l); l.Conversation != "" && len(l.Conversation) != 16 {
			t.Errorf("conversation %q is not a 16-hex-digit hash", l.Conversation)
		}
	}
}

// TestMethodNotAllowed is a regression test for issue 10: POST /healthz
// answered 404. Wrong methods on the status endpoints are 405 with Allow and
// a JSON body; unknown paths stay a clear 404.
func TestMethodNotAllowed(t *testing.T) {
	h := newHarness(t, "llm-aware", 1)
	for _, tt := range []struct {
		method, path string
		status       int
		allow        string
	}{
		{"POST", "/healthz", 405, "GET, HEAD"},
		{"PUT", "/readyz", 405, "GET, HEAD"},
		{"DELETE", "/metrics", 405, "GET, HEAD"},
		{"POST", "/replicas", 405, "GET, HEAD"},
		{"HEAD", "/healthz", 200, ""},
		// The proxied paths accept POST only.
		{"GET", wire.PathCompletion, 405, "POST"},
		// Unknown paths: 404 naming what the router serves.
		{"GET", "/v2/unknown", 404, ""},
	} {
		req, _ := http.NewRequest(tt.method, h.srv.URL+tt.path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var eb wire.ErrorBody
		if resp.StatusCode != tt.status || resp.Header.Get("Allow") != tt.allow ||
			(tt.status != 200 && (json.Unmarshal(b, &eb) != nil || eb.Error.Code != tt.status)) {
			t.Errorf("%s %s: %d Allow %q %s; want %d Allow %q with a JSON error", tt.method, tt.path, resp.StatusCode, resp.Header.Get("Allow"), b, tt.status, tt.allow)
		}
	}
}

// TestDrain is a regression test for issue 10: on SIGTERM the listener
// closed at once (new connections refused while Kubernetes still sent
// traffic) and requests cut at the end of the grace period were never
// logged. Now readiness fails first, new connections are served for
// shutdown_delay, then in-flight requests drain up to shutdown_grace and
// those still running are logged as cut.
func TestDrain(t *testing.T) {
	s := serveHarness(t, "consistent", 1, func(c *config.Router) {
		c.ShutdownDelay = config.Duration(time.Second)
		c.ShutdownGrace = config.Duration(200 * time.Millisecond)
	})
	f := s.fakes[0]
	f.hold = make(chan struct{}) // every answer waits: the held request outlives the grace
	held := make(chan string, 1)
	go func() {
		resp, err := http.Post(s.url+wire.PathChatCompletions, "application/json", strings.NewReader(chatBody("long", true)))
		if err != nil {
			held <- err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		held <- string(b)
	}()
	waitFor(t, "the held request to reach the replica", func() bool { return f.calls.Load() == 1 })
	start := time.Now()
	s.cancel() // SIGTERM
	s.cancel = nil
	waitFor(t, "readiness to fail", func() bool {
		resp, err := http.Get(s.url + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 503
	})
	// A new connection during shutdown_delay is accepted and served.
	fresh := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := fresh.Get(s.url + "/healthz")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("new connection during shutdown_delay: %v %v", err, resp)
	}
	resp.Body.Close()
	if since := time.Since(start); since >= time.Second {
		t.Skipf("the machine took %s to get here; the delay is over", since)
	}
	if err := <-s.done; err != nil {
		t.Errorf("Serve: %v", err)
	}
	if since := time.Since(start); since < time.Second {
		t.Errorf("Serve returned %s after the signal, before shutdown_delay", since)
	}
	<-held
	if !s.waitLog(t, `"error_kind":"cut"`) {
		t.Errorf("the request cut at the end of the grace is not logged as cut:\n%s", s.logText())
	}
	if s.inflight() != 0 {
		t.Error("load not released")
	}
}

// connCalls counts the requests served on one connection.
type connCalls struct{}

// A replica that closes a kept-alive connection when the next request
// arrives on it, without answering (a restart, an idle timeout on its side):
// the request never reached it, so the router sends it again on a new
// connection instead of answering 502 (net/http retries it once the
// request is marked idempotent; inference has no side effect and nothing
// has reached the client). Each of ten requests in a row must succeed.
func TestClosedKeepAliveIsRetried(t *testing.T) {
	fake := newFake(t, "llm-0")
	var leaked atomic.Bool
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := r.Header["Idempotency-Key"]; ok {
			leaked.Store(true)
		}
		if r.Context().Value(connCalls{}).(*atomic.Int32).Add(1) > 1 {
			c, _, _ := w.(http.Hijacker).Hijack()
			c.Close()
			return
		}
		fake.serve(w, r)
	}))
	srv.Config.ConnContext = func(ctx context.Context, _ net.Conn) context.Context {
		return context.WithValue(ctx, connCalls{}, new(atomic.Int32))
	}
	srv.Start()
	t.Cleanup(srv.Close)
	rs := []replicaset.Replica{{Name: "llm-0", URL: srv.URL}}
	rt, err := New(Options{Config: testConfig(t, "consistent", rs)})
	if err != nil {
		t.Fatal(err)
	}
	rt.SetReplicas(rs)
	front := httptest.NewServer(rt)
	t.Cleanup(front.Close)
	for i := range 10 {
		resp, err := http.Post(front.URL+wire.PathChatCompletions, "application/json", strings.NewReader(chatBody(fmt.Sprint("hi ", i), false)))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, body)
		}
	}
	if n := fake.calls.Load(); n != 10 {
		t.Errorf("the replica answered %d requests, want 10", n)
	}
	if leaked.Load() {
		t.Error("the replica received an Idempotency-Key header (the empty marker must not be sent)")
	}
}
