package router

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/llm-ring/llm-ring/internal/config"
	"github.com/llm-ring/llm-ring/internal/engine"
	"github.com/llm-ring/llm-ring/internal/model"
	"github.com/llm-ring/llm-ring/internal/replica"
	"github.com/llm-ring/llm-ring/internal/replicaset"
	"github.com/llm-ring/llm-ring/internal/wire"
)

var simEpoch = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// simReplica is one simulated replica (package replica, in-process) named
// name on a virtual clock: requests sent to two such replicas in the same
// order get byte-identical answers (same ids, times and tokens).
func simReplica(t *testing.T, name string, edit func(*replica.Options)) replicaset.Replica {
	t.Helper()
	opts := replica.Options{Model: model.DefaultConfig(), Clock: replica.NewVirtualClock(simEpoch)}
	if edit != nil {
		edit(&opts)
	}
	h, err := replica.NewHost(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	r, err := h.Add(name, 0)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return replicaset.Replica{Name: name, URL: srv.URL}
}

// rawPost sends body to url+path and returns the status and the whole answer.
func rawPost(t *testing.T, url, path, body string, headers ...string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

// created is the "created" member of an OpenAI answer or chunk.
var created = regexp.MustCompile(`"created":\d+`)

// stable is an answer without its "created" seconds: a replica reads them
// from its clock when the request arrives, and two virtual clocks need not
// agree on that moment (an idle host's clock may have jumped to a timer's
// deadline); everything else (ids, tokens, counts, model times) must be
// the same byte for byte.
func stable(answer string) string { return created.ReplaceAllString(answer, `"created":0`) }

// lastUsage is the usage of the last event of an SSE stream that has one.
func lastUsage(t *testing.T, stream string) engine.Usage {
	t.Helper()
	var u engine.Usage
	found := false
	for _, line := range strings.Split(stream, "\n") {
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok || !strings.Contains(data, `"usage"`) {
			continue
		}
		if got, err := engine.UsageOf([]byte(data)); err == nil {
			u, found = got, true
		}
	}
	if !found {
		t.Fatalf("no usage in the stream:\n%s", stream)
	}
	return u
}

// learned is what the router's metrics say it learned from answers.
type learned struct{ cached, processed, predicted float64 }

func (s *served) learned() learned {
	m := s.rt.metrics
	return learned{testutil.ToFloat64(m.promptTokens.WithLabelValues("cached")),
		testutil.ToFloat64(m.promptTokens.WithLabelValues("processed")), testutil.ToFloat64(m.predicted)}
}

// TestLearnsFromEveryStream (issue 14): behind each engine face, a client
// streams without stream_options.include_usage. The router asks the
// replica for usage, learns the exact counts (the same a client asking for
// usage is told), and hands the client, byte for byte, the stream the
// replica sends for the same request directly. A client that asks for
// usage gets it, as directly.
func TestLearnsFromEveryStream(t *testing.T) {
	for _, api := range replica.APIs {
		for _, path := range []string{wire.PathChatCompletions, wire.PathCompletions} {
			t.Run(api+path, func(t *testing.T) {
				face := func(o *replica.Options) { o.API, o.CacheReport = api, true }
				routed := simReplica(t, "llm-0", face)
				direct := simReplica(t, "llm-0", face).URL    // the same requests, without the option
				withUsage := simReplica(t, "llm-0", face).URL // the same requests, asking for usage
				s := stubRouter(t, "consistent", []replicaset.Replica{routed})
				body := `{"model":"m","messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"Why do chats resend history?"}],"max_tokens":12,"seed":7,"stream":true}`
				if path == wire.PathCompletions {
					body = `{"model":"m","prompt":"Why do chats resend history? Because","max_tokens":12,"seed":7,"stream":true}`
				}
				asking := strings.Replace(body, `"stream":true`, `"stream":true,"stream_options":{"include_usage":true}`, 1)
				var want learned
				for turn := 1; turn <= 2; turn++ { // turn 2: the same prompt again, now cached
					resp, got := rawPost(t, s.url, path, body)
					if resp.StatusCode != 200 {
						t.Fatalf("turn %d: %d %s", turn, resp.StatusCode, got)
					}
					_, same := rawPost(t, direct, path, body)
					if stable(got) != stable(same) {
						t.Errorf("turn %d: the client's stream differs from the replica's direct answer\nrouted:\n%s\ndirect:\n%s", turn, got, same)
					}
					_, told := rawPost(t, withUsage, path, asking)
					u := lastUsage(t, told)
					want.cached += float64(u.Cached)
					want.processed += float64(u.Prompt - u.Cached)
					want.predicted += float64(u.Completion)
					if turn == 2 && u.Cached == 0 {
						t.Fatalf("turn 2 reused no cache: the test cannot tell cached from processed\n%s", told)
					}
				}
				waitFor(t, "both turns logged", func() bool { return strings.Count(s.logText(), `"msg":"request"`) == 2 })
				if got := s.learned(); got != want {
					t.Errorf("learned %+v, want %+v (what the replica reports when asked)", got, want)
				}
				// A client that asks for usage gets the usage chunk as the replica sends it.
				_, got := rawPost(t, s.url, path, asking)
				_, same := rawPost(t, withUsage, path, asking)
				if stable(got) != stable(same) || !strings.Contains(got, `"usage"`) {
					t.Errorf("with include_usage, routed:\n%s\ndirect:\n%s", got, same)
				}
			})
		}
	}
}

// TestMessagesRouted (issue 14): the Anthropic Messages API is routed like
// a chat: a conversation keeps its replica whichever of the two APIs a turn
// uses (same key rules: system prompt + first user message), and the
// router learns its counts from the Messages usage shape, streamed or not.
func TestMessagesRouted(t *testing.T) {
	var rs []replicaset.Replica
	for i := range 3 {
		rs = append(rs, simReplica(t, fmt.Sprint("llm-", i), nil))
	}
	s := stubRouter(t, "consistent", rs)
	for i := range 6 {
		user := fmt.Sprintf("Question %d: what does a KV cache hold?", i)
		chat := fmt.Sprintf(`{"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":%q}],"max_tokens":4}`, user)
		msgs := fmt.Sprintf(`{"model":"m","system":"Be brief.","messages":[{"role":"user","content":[{"type":"text","text":%q}]}],"max_tokens":4}`, user)
		r1, b1 := rawPost(t, s.url, wire.PathChatCompletions, chat)
		r2, b2 := rawPost(t, s.url, wire.PathMessages, msgs)
		if r1.StatusCode != 200 || r2.StatusCode != 200 {
			t.Fatalf("chat %d %s; messages %d %s", r1.StatusCode, b1, r2.StatusCode, b2)
		}
		if a, b := r1.Header.Get(HeaderRoutedTo), r2.Header.Get(HeaderRoutedTo); a != b {
			t.Errorf("conversation %d: chat on %s, messages on %s", i, a, b)
		}
	}
	logged := 12
	for _, stream := range []bool{false, true} {
		waitFor(t, "every answer logged", func() bool { return strings.Count(s.logText(), `"msg":"request"`) == logged })
		logged++
		before := s.learned()
		body := fmt.Sprintf(`{"model":"m","system":"Be brief.","messages":[{"role":"user","content":"Tell me about prefix caches."}],"max_tokens":6,"stream":%v}`, stream)
		resp, got := rawPost(t, s.url, wire.PathMessages, body)
		if resp.StatusCode != 200 {
			t.Fatalf("stream=%v: %d %s", stream, resp.StatusCode, got)
		}
		var u engine.Usage
		if stream {
			// message_start has the input counts, message_delta the output.
			var start engine.Usage
			for _, line := range strings.Split(got, "\n") {
				data, ok := strings.CutPrefix(line, "data: ")
				if !ok {
					continue
				}
				if x, err := engine.UsageOf([]byte(data)); err == nil {
					if strings.Contains(data, "message_start") {
						start = x
					} else {
						u = x
					}
				}
			}
			u.Prompt, u.Cached = start.Prompt, start.Cached
		} else {
			var err error
			if u, err = engine.UsageOf([]byte(got)); err != nil {
				t.Fatalf("answer without usage: %s", got)
			}
		}
		waitFor(t, "the answer logged", func() bool { return strings.Count(s.logText(), `"msg":"request"`) == logged })
		after := s.learned()
		d := learned{after.cached - before.cached, after.processed - before.processed, after.predicted - before.predicted}
		if want := (learned{float64(u.Cached), float64(u.Prompt - u.Cached), float64(u.Completion)}); d != want || u.Completion == 0 {
			t.Errorf("stream=%v: learned %+v, want %+v (the answer's usage)", stream, d, want)
		}
	}
}

// TestRoutedByLoad (issue 14): embeddings, rerank and tokenizer requests go
// to the ready replica with the fewest requests in flight (not where a
// policy keyed on content would send them), fail over when a replica
// cannot be reached, and leave no load behind.
func TestRoutedByLoad(t *testing.T) {
	release := make(chan struct{})
	var got [3]atomic.Int64
	var rs []replicaset.Replica
	for i := range 3 {
		rs = append(rs, stub(t, fmt.Sprint("r", i), func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != wire.PathEmbeddings { // health checks, metrics scrapes
				return
			}
			got[i].Add(1)
			<-release
			fmt.Fprint(w, `{"object":"list","data":[]}`)
		}))
	}
	s := stubRouter(t, "consistent", rs)
	// Three identical requests at once: one on each replica.
	done := make(chan int, 3)
	for range 3 {
		go func() {
			resp, _ := rawPost(t, s.url, wire.PathEmbeddings, `{"input":"same text"}`)
			done <- resp.StatusCode
		}()
	}
	waitFor(t, "three requests in flight", func() bool { return got[0].Load()+got[1].Load()+got[2].Load() == 3 })
	for i := range got {
		if got[i].Load() != 1 {
			t.Errorf("replica r%d got %d of 3 concurrent identical requests, want 1 each", i, got[i].Load())
		}
	}
	close(release)
	for range 3 {
		if code := <-done; code != 200 {
			t.Errorf("status %d", code)
		}
	}
	waitFor(t, "load released", func() bool { return s.inflight() == 0 })

	// Every path routed by load reaches a real replica; a dead one is skipped.
	dead := httptest.NewServer(http.NotFoundHandler())
	deadURL := dead.URL
	dead.Close()
	live := simReplica(t, "live", nil)
	s2 := stubRouter(t, "consistent", []replicaset.Replica{{Name: "dead", URL: deadURL}, live})
	for _, c := range []struct{ path, body, want string }{
		{wire.PathEmbeddings, `{"input":["a","b"]}`, `"embedding"`},
		{wire.PathRerank, `{"query":"q","documents":["x","y"]}`, `"relevance_score"`},
		{"/rerank", `{"query":"q","documents":["x"]}`, `"relevance_score"`},
		{wire.PathTokenize, `{"content":"hello world"}`, `"tokens"`},
		{wire.PathDetokenize, `{"tokens":[]}`, `"content"`},
	} {
		for range 2 { // whichever replica Least tries first
			resp, body := rawPost(t, s2.url, c.path, c.body)
			if resp.StatusCode != 200 || !strings.Contains(body, c.want) || resp.Header.Get(HeaderRoutedTo) != "live" {
				t.Errorf("%s: %d on %q: %s", c.path, resp.StatusCode, resp.Header.Get(HeaderRoutedTo), body)
			}
		}
	}
	if resp, body := s2.do(t, "GET", wire.PathEmbeddings, ""); resp.StatusCode != 405 {
		t.Errorf("GET embeddings: %d %s", resp.StatusCode, body)
	}
	resp, body := s2.do(t, "POST", "/v1/audio/speech", "{}")
	if resp.StatusCode != 404 || !strings.Contains(body, wire.PathEmbeddings) || !strings.Contains(body, wire.PathModels) {
		t.Errorf("unknown path: %d %s, want 404 listing the routed paths", resp.StatusCode, body)
	}
}

// TestModels (issue 14): GET /v1/models (and /models) is the union of the
// healthy replicas' lists, fetched once per few seconds; a replica that
// fails is left out; with none answering, a 503.
func TestModels(t *testing.T) {
	var fetches atomic.Int64
	list := func(name, ids string) replicaset.Replica {
		return stub(t, name, func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case "/health":
			case wire.PathModels:
				fetches.Add(1)
				fmt.Fprintf(w, `{"object":"list","data":[%s]}`, ids)
			default:
				http.NotFound(w, r)
			}
		})
	}
	broken := stub(t, "broken", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/health" {
			http.Error(w, "boom", 500)
		}
	})
	s := stubRouter(t, "consistent", []replicaset.Replica{
		list("a", `{"id":"qwen","object":"model","owned_by":"vllm"}`),
		list("b", `{"id":"llama","object":"model"},{"id":"qwen","object":"model","owned_by":"sglang"}`),
		broken,
	})
	for _, path := range modelsPaths {
		resp, body := s.do(t, "GET", path, "")
		var m struct {
			Object string `json:"object"`
			Data   []struct {
				ID string `json:"id"`
			} `json:"data"`
		}
		if err := json.Unmarshal([]byte(body), &m); err != nil || resp.StatusCode != 200 || m.Object != "list" || len(m.Data) != 2 {
			t.Fatalf("%s: %d %s (%v)", path, resp.StatusCode, body, err)
		}
		if !strings.Contains(body, `"id":"llama"`) || strings.Count(body, `"id":"qwen"`) != 1 || !strings.Contains(body, `"owned_by":"vllm"`) {
			t.Errorf("%s: %s, want llama and qwen once (a's entry: first in name order)", path, body)
		}
	}
	if n := fetches.Load(); n != 2 {
		t.Errorf("two GETs within the cache's lifetime fetched %d lists, want 2 (once per replica)", n)
	}
	if resp, _ := s.do(t, "POST", wire.PathModels, ""); resp.StatusCode != 405 {
		t.Errorf("POST models: %d, want 405", resp.StatusCode)
	}
	none := stubRouter(t, "consistent", []replicaset.Replica{broken})
	if resp, body := none.do(t, "GET", wire.PathModels, ""); resp.StatusCode != 503 || !strings.Contains(body, `"error"`) {
		t.Errorf("no list: %d %s, want a 503 JSON error", resp.StatusCode, body)
	}
}

// TestAPIKeyForwarded (issue 14): the router passes the client's
// Authorization header on unchanged, so replicas started with --api-key
// keep checking it: 401 without the key, 200 with it, models included.
func TestAPIKeyForwarded(t *testing.T) {
	for _, api := range replica.APIs {
		t.Run(api, func(t *testing.T) {
			rep := simReplica(t, "llm-0", func(o *replica.Options) { o.API, o.APIKeys = api, []string{"sekret"} })
			s := stubRouter(t, "consistent", []replicaset.Replica{rep}, func(c *config.Router) { c.HealthCheck.Path = "/health" })
			if resp, body := rawPost(t, s.url, wire.PathChatCompletions, chatBody("hi", false)); resp.StatusCode != 401 {
				t.Errorf("without the key: %d %s, want 401", resp.StatusCode, body)
			}
			if resp, body := rawPost(t, s.url, wire.PathChatCompletions, chatBody("hi", false), "Authorization", "Bearer sekret"); resp.StatusCode != 200 {
				t.Errorf("with the key: %d %s", resp.StatusCode, body)
			}
			if resp, body := s.do(t, "GET", wire.PathModels, "", "Authorization", "Bearer sekret"); resp.StatusCode != 200 || !strings.Contains(body, `"data"`) {
				t.Errorf("models with the key: %d %s", resp.StatusCode, body)
			}
		})
	}
}

// TestInjectedUsageWithContentLength: a replica that sends its stream in
// one piece with a Content-Length (a buffering engine or proxy) still
// reaches the client whole when the router took the usage chunk it asked
// for out again: the answer goes chunked, the connection is kept alive.
func TestInjectedUsageWithContentLength(t *testing.T) {
	const stream = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\n" +
		"data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n" +
		"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":1,\"total_tokens\":10}}\n\n" +
		"data: [DONE]\n\n"
	var conns atomic.Int64
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Content-Length", fmt.Sprint(len(stream)))
		io.WriteString(w, stream)
	}))
	up.Start()
	t.Cleanup(up.Close)
	rs := []replicaset.Replica{{Name: "llm-0", URL: up.URL}}
	rt, err := New(Options{Config: testConfig(t, "llm-aware", rs)})
	if err != nil {
		t.Fatal(err)
	}
	rt.SetReplicas(rs)
	front := httptest.NewUnstartedServer(rt)
	front.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	front.Start()
	t.Cleanup(front.Close)
	for range 2 {
		resp, got := rawPost(t, front.URL, wire.PathChatCompletions,
			`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
		if resp.StatusCode != http.StatusOK || strings.Contains(got, `"usage"`) || !strings.HasSuffix(got, "data: [DONE]\n\n") {
			t.Fatalf("status %d, answer:\n%s", resp.StatusCode, got)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("%d client connections for two requests, want 1 (kept alive)", n)
	}
	if got := testutil.ToFloat64(rt.metrics.predicted); got != 2 {
		t.Errorf("learned %v predicted tokens, want 2", got)
	}
}
