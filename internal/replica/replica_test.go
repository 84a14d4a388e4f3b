package replica

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llm-ring/llm-ring/internal/model"
	"github.com/llm-ring/llm-ring/internal/wire"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

var epoch = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// newTestReplica returns a ready replica on a fresh host whose clock jumps
// to each event: answers come at once, with the same model times every run.
func newTestReplica(t *testing.T, mutate func(*Options)) *Replica {
	t.Helper()
	opts := Options{Model: model.DefaultConfig(), Speed: 50, Clock: NewVirtualClock(epoch)}
	if mutate != nil {
		mutate(&opts)
	}
	h, err := NewHost(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	r, err := h.Add("llm-0", 0)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func do(t *testing.T, h http.Handler, method, path, body string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file:\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

const chatTurn1 = `{"messages":[{"role":"user","content":"What is consistent hashing with bounded loads?"}],"max_tokens":24}`

func TestGoldenResponses(t *testing.T) {
	long := `{"prompt":"` + strings.Repeat("word ", 4200) + `"}`
	tests := []struct {
		name         string // golden file
		method, path string
		body         string
		status       int
	}{
		// Answers.
		{"completion.json", "POST", "/completion", `{"prompt":"Tell me about hashing rings.","n_predict":16}`, 200},
		{"completion_token_ids.json", "POST", "/completion", `{"prompt":[151644, 872, 198, 9707],"n_predict":4,"cache_prompt":false}`, 200},
		{"chat.json", "POST", "/v1/chat/completions", chatTurn1, 200},
		{"completion_stream.txt", "POST", "/completion", `{"prompt":"Stream this.","n_predict":5,"stream":true}`, 200},
		{"v1_completions.json", "POST", "/v1/completions", `{"prompt":"Once upon a time","max_tokens":12}`, 200},
		{"v1_completions_stream.txt", "POST", "/v1/completions", `{"prompt":"Once upon a time","max_tokens":3,"stream":true}`, 200},
		{"chat_stream.txt", "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"Hi"}],"max_tokens":4,"stream":true}`, 200},
		{"tokenize.json", "POST", "/tokenize", `{"content":"Hello world, internationalization!"}`, 200},
		{"tokenize_pieces.json", "POST", "/tokenize", `{"content":"Hello world!","with_pieces":true}`, 200},
		{"health.json", "GET", "/health", ``, 200},
		{"chat_stream_usage.txt", "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"Hi"}],"max_tokens":3,"stream":true,"stream_options":{"include_usage":true}}`, 200},
		{"chat_prefill.json", "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"Hi"},{"role":"assistant","content":"Hello, I"}],"max_tokens":3}`, 200},
		{"chat_continue.json", "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"Hi"},{"role":"assistant","content":"Hello, I"}],"max_tokens":3,"continue_final_message":true,"add_generation_prompt":false}`, 200},
		{"chat_response_format_json.json", "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"Hi"}],"max_tokens":3,"response_format":{"type":"json_schema","json_schema":{"schema":{"type":"object"}}}}`, 200},
		{"completion_return_tokens.json", "POST", "/completion", `{"prompt":"Count.","n_predict":3,"return_tokens":true}`, 200},
		{"completion_stream_return_tokens.txt", "POST", "/completion", `{"prompt":"Count.","n_predict":2,"stream":true,"return_tokens":true}`, 200},
		{"v1_completions_stream_usage.txt", "POST", "/v1/completions", `{"prompt":"Once upon a time","max_tokens":2,"stream":true,"stream_options":{"include_usage":true}}`, 200},
		{"messages.json", "POST", "/v1/messages", `{"model":"claude-x","max_tokens":5,"system":[{"type":"text","text":"Be brief."}],"messages":[{"role":"user","content":[{"type":"text","text":"Hi"}]}]}`, 200},
		{"messages_stream.txt", "POST", "/v1/messages", `{"max_tokens":3,"stream":true,"messages":[{"role":"user","content":"Hi"}]}`, 200},
		{"models.json", "GET", "/v1/models", ``, 200},
		{"props.json", "GET", "/props", ``, 200},
		{"detokenize.json", "POST", "/detokenize", `{"tokens":[151644, 872, 198, 151645]}`, 200},
		{"apply_template.json", "POST", "/apply-template", `{"messages":[{"role":"user","content":"Hi"}]}`, 200},
		{"embeddings_oai.json", "POST", "/v1/embeddings", `{"input":["a"],"model":"m","encoding_format":"base64"}`, 200},
		{"embedding_native.json", "POST", "/embedding", `{"content":"a"}`, 200},
		{"rerank.json", "POST", "/v1/rerank", `{"query":"hashing rings","documents":["bread recipes","consistent hashing rings","rings"],"top_n":2}`, 200},
		{"rerank_tei.json", "POST", "/rerank", `{"query":"hashing rings","texts":["bread","hashing rings"],"return_text":true}`, 200},
		{"slots.json", "GET", "/slots", ``, 200},
		// Errors: 400 with a message naming the problem.
		{"error_malformed_json.json", "POST", "/completion", `{"prompt": "x",`, 400},
		{"error_empty_body.json", "POST", "/completion", ``, 400},
		{"error_not_an_object.json", "POST", "/completion", `[1,2]`, 400},
		{"error_missing_prompt.json", "POST", "/completion", `{"n_predict": 3}`, 400},
		{"error_prompt_type.json", "POST", "/completion", `{"prompt": {"text": "x"}}`, 400},
		{"error_n_predict_type.json", "POST", "/completion", `{"prompt": "x", "n_predict": "ten"}`, 400},
		{"error_stream_type.json", "POST", "/completion", `{"prompt": "x", "stream": "yes"}`, 400},
		{"error_empty_prompt.json", "POST", "/completion", `{"prompt": ""}`, 400},
		{"error_several_prompts.json", "POST", "/completion", `{"prompt": ["a", "b"]}`, 400},
		{"error_bad_token_id.json", "POST", "/completion", `{"prompt": [1, 999999]}`, 400},
		{"error_token_not_integer.json", "POST", "/completion", `{"prompt": [1, 2.5]}`, 400},
		{"error_prompt_too_long.json", "POST", "/completion", long, 400},
		{"error_no_messages.json", "POST", "/v1/chat/completions", `{"messages": []}`, 400},
		{"error_message_content_type.json", "POST", "/v1/chat/completions", `{"messages": [{"role": "user", "content": 3}]}`, 400},
		{"error_message_role_missing.json", "POST", "/v1/chat/completions", `{"messages": [{"content": "hi"}]}`, 400},
		{"error_max_tokens_type.json", "POST", "/v1/chat/completions", `{"messages": [{"role": "user", "content": "hi"}], "max_tokens": true}`, 400},
		{"error_not_found.json", "GET", "/nope", ``, 404},
		// llama.cpp's own 400s (server-common.cpp, oaicompat_chat_params_parse).
		{"error_two_assistants.json", "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"test"},{"role":"assistant","content":"test"},{"role":"assistant","content":"test"}]}`, 400},
		{"error_continue_and_generation_prompt.json", "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"Hi"},{"role":"assistant","content":"Hello"}],"continue_final_message":true}`, 400},
		{"error_response_format_type.json", "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"Hi"}],"response_format":{"type":"sound"}}`, 400},
		{"error_response_format_schema.json", "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"Hi"}],"response_format":{"type":"json_object","schema":123}}`, 400},
		{"error_response_format_schema_type.json", "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"Hi"}],"response_format":{"type":"json_object","schema":{"type":"hiccup"}}}`, 400},
		{"error_rerank_no_documents.json", "POST", "/v1/rerank", `{"query":"q"}`, 400},
		{"error_embeddings_no_input.json", "POST", "/v1/embeddings", `{"model":"m"}`, 400},
		{"error_method.json", "GET", "/completion", ``, 405},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newTestReplica(t, nil)
			rec := do(t, r, tt.method, tt.path, tt.body)
			if rec.Code != tt.status {
				t.Errorf("status %d, want %d: %s", rec.Code, tt.status, rec.Body)
			}
			ct := rec.Header().Get("Content-Type")
			if strings.HasSuffix(tt.name, ".txt") != strings.HasPrefix(ct, "text/event-stream") {
				t.Errorf("Content-Type %q", ct)
			}
			if tt.status >= 400 {
				var eb wire.ErrorBody
				if err := json.Unmarshal(rec.Body.Bytes(), &eb); err != nil || eb.Error.Code != tt.status || eb.Error.Message == "" {
					t.Errorf("error body %s is not a wire.ErrorBody with code %d", rec.Body, tt.status)
				}
			}
			golden(t, tt.name, rec.Body.Bytes())
		})
	}
}

func TestStreamsFollowLlamaCppFraming(t *testing.T) {
	r := newTestReplica(t, nil)
	native := do(t, r, "POST", "/completion", `{"prompt":"Stream this.","n_predict":5,"stream":true}`).Body.String()
	chat := do(t, r, "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"Hi"}],"max_tokens":4,"stream":true}`).Body.String()
	events := func(s string) []string { return strings.Split(strings.TrimSuffix(s, "\n\n"), "\n\n") }

	// Native: one chunk per token, then a final chunk with stop and
	// timings; no [DONE].
	nev := events(native)
	if len(nev) != 6 || strings.Contains(native, "[DONE]") {
		t.Fatalf("native stream has %d events (want 5 tokens + final) or a [DONE]:\n%s", len(nev), native)
	}
	var last wire.CompletionResponse
	if err := json.Unmarshal([]byte(strings.TrimPrefix(nev[5], "data: ")), &last); err != nil || !last.Stop || last.Timings == nil || last.Timings.PredictedN != 5 {
		t.Errorf("native final chunk %s: want stop and timings", nev[5])
	}
	// OpenAI (issue #14): a role chunk with "content": null, one chunk per
	// token, a finish chunk with an empty delta carrying the timings and no
	// usage (the client did not ask), then [DONE].
	cev := events(chat)
	if len(cev) != 7 || cev[6] != "data: [DONE]" {
		t.Fatalf("chat stream has %d events or does not end with [DONE]:\n%s", len(cev), chat)
	}
	if !strings.Contains(cev[0], `"delta":{"role":"assistant","content":null}`) {
		t.Errorf("first chunk %s: want role assistant and content null", cev[0])
	}
	var fin wire.ChatResponse
	if err := json.Unmarshal([]byte(strings.TrimPrefix(cev[5], "data: ")), &fin); err != nil {
		t.Fatal(err)
	}
	if fin.Usage != nil || fin.Timings == nil || fin.Choices[0].FinishReason == nil {
		t.Errorf("chat finish chunk %s: want timings and finish_reason, no usage", cev[5])
	}
	// With include_usage: the finish chunk, then a chunk with "choices": []
	// and usage, which also carries the timings (the last chunk does).
	withUsage := do(t, r, "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"Hi"}],"max_tokens":4,"stream":true,"stream_options":{"include_usage":true}}`).Body.String()
	uev := events(withUsage)
	if len(uev) != 8 || uev[7] != "data: [DONE]" {
		t.Fatalf("chat stream with usage has %d events:\n%s", len(uev), withUsage)
	}
	var fin2, use wire.ChatResponse
	_ = json.Unmarshal([]byte(strings.TrimPrefix(uev[5], "data: ")), &fin2)
	if err := json.Unmarshal([]byte(strings.TrimPrefix(uev[6], "data: ")), &use); err != nil {
		t.Fatal(err)
	}
	if fin2.Timings != nil || fin2.Usage != nil || fin2.Choices[0].FinishReason == nil {
		t.Errorf("finish chunk %s: want finish_reason only", uev[5])
	}
	if !strings.Contains(uev[6], `"choices":[]`) || use.Usage == nil || use.Usage.CompletionTokens != 4 || use.Timings == nil {
		t.Errorf("usage chunk %s: want choices [], usage and timings", uev[6])
	}
}

// chatAnswer sends a chat request and returns the answer text and usage.
func chatAnswer(t *testing.T, h http.Handler, body any) (string, wire.Usage) {
	t.Helper()
	data, _ := json.Marshal(body)
	rec := do(t, h, "POST", "/v1/chat/completions", string(data))
	if rec.Code != 200 {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	var res wire.ChatResponse
	if err := json.Unmarshal(rec.Body.Bytes(), &res); err != nil {
		t.Fatal(err)
	}
	text, _ := wire.ContentText(res.Choices[0].Message.Content)
	return text, *res.Usage
}

func TestMultiTurnChatHitsTheCacheOverHTTP(t *testing.T) {
	type msg = map[string]string
	r := newTestReplica(t, nil)
	turn1 := []msg{{"role": "system", "content": "You are terse."}, {"role": "user", "content": "What is consistent hashing with bounded loads?"}}
	ans, u1 := chatAnswer(t, r, map[string]any{"messages": turn1, "max_tokens": 48})
	turn2 := append(turn1, msg{"role": "assistant", "content": ans}, msg{"role": "user", "content": "Why does it help LLM serving?"})
	_, u2 := chatAnswer(t, r, map[string]any{"messages": turn2, "max_tokens": 48})
	cached := u2.PromptTokensDetails.CachedTokens
	if float64(cached) < 0.7*float64(u2.PromptTokens) {
		t.Errorf("turn 2 reused %d of %d prompt tokens, want ≥ 70%%", cached, u2.PromptTokens)
	}
	if want := u1.PromptTokens + u1.CompletionTokens - 1; cached != want {
		t.Errorf("turn 2 cached_tokens = %d, want turn 1's prompt + answer − 1 = %d", cached, want)
	}
	fresh := newTestReplica(t, nil)
	if _, u := chatAnswer(t, fresh, map[string]any{"messages": turn2, "max_tokens": 48}); u.PromptTokensDetails.CachedTokens != 0 {
		t.Errorf("turn 2 on a fresh replica reused %d tokens, want 0", u.PromptTokensDetails.CachedTokens)
	}
}

func TestKeepsServingAfterBadRequests(t *testing.T) {
	r := newTestReplica(t, nil)
	for _, body := range []string{`{`, `{"prompt": 1}`, `{"prompt": [1, -5]}`, strings.Repeat("x", 100)} {
		if rec := do(t, r, "POST", "/completion", body); rec.Code != 400 {
			t.Errorf("%.20q: status %d, want 400", body, rec.Code)
		}
	}
	if rec := do(t, r, "POST", "/completion", `{"prompt":"still there?","n_predict":3}`); rec.Code != 200 {
		t.Errorf("after bad requests: status %d: %s", rec.Code, rec.Body)
	}
}

func TestLoadingThenReady(t *testing.T) {
	clk := NewManualClock(epoch)
	h, err := NewHost(Options{Model: model.DefaultConfig(), Speed: 10, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	r, err := h.Add("llm-1", 30*time.Second) // 30 s of model time = 3 s of wall time at 10×
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		advance time.Duration // wall time
		status  int
	}{
		{0, 503},                       // just started
		{2900 * time.Millisecond, 503}, // 29 s of model time
		{100 * time.Millisecond, 200},  // 30 s: loaded
	}
	for _, s := range steps {
		clk.Advance(s.advance)
		rec := do(t, r, "GET", "/health", "")
		if rec.Code != s.status {
			t.Fatalf("after %v of model time: /health %d, want %d", h.ModelNow(), rec.Code, s.status)
		}
		if s.status == 503 {
			golden(t, "error_loading.json", rec.Body.Bytes())
			if rec := do(t, r, "POST", "/completion", `{"prompt":"hi"}`); rec.Code != 503 {
				t.Errorf("/completion while loading: %d, want 503", rec.Code)
			}
		}
	}
	if r.ReadyAt() != 30*time.Second {
		t.Errorf("ReadyAt %v, want 30s", r.ReadyAt())
	}
	if h.ModelNow() != 30*time.Second {
		t.Errorf("model time %v after 3 s of wall time at 10×, want 30s", h.ModelNow())
	}
}

func TestMetrics(t *testing.T) {
	r := newTestReplica(t, nil)
	do(t, r, "POST", "/completion", `{"prompt":"Tell me about hashing rings.","n_predict":16}`)
	do(t, r, "POST", "/completion", `{"prompt":"Tell me about hashing rings. And more.","n_predict":16}`)
	rec := do(t, r, "GET", "/metrics", "")
	if rec.Code != 200 {
		t.Fatalf("status %d", rec.Code)
	}
	body := rec.Body.String()
	for _, name := range []string{
		"llamacpp:prompt_tokens_total", "llamacpp:tokens_predicted_total", "llamacpp:requests_processing",
		"llamacpp:requests_deferred", "llamacpp:kv_cache_usage_ratio", "llamacpp:n_decode_total",
	} {
		if !strings.Contains(body, "\n"+name+" ") {
			t.Errorf("metric %s missing", name)
		}
	}
	golden(t, "metrics.txt", rec.Body.Bytes())
}

func TestSharedHostAndNames(t *testing.T) {
	h, err := NewHost(Options{Model: model.DefaultConfig(), SharedCPU: true, Clock: NewVirtualClock(epoch)})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	a, err := h.Add("llm-0", 0)
	if err != nil {
		t.Fatal(err)
	}
	b, err := h.Add("llm-1", 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Add("llm-0", 0); err == nil {
		t.Error("a second replica named llm-0 was accepted")
	}
	for _, r := range []*Replica{a, b} {
		if rec := do(t, r, "POST", "/completion", `{"prompt":"hello","n_predict":2}`); rec.Code != 200 {
			t.Errorf("%s: %d %s", r.Name(), rec.Code, rec.Body)
		}
	}
}

func TestNewHostRejectsBadOptions(t *testing.T) {
	bad := model.DefaultConfig()
	bad.NParallel = 0
	for _, o := range []Options{{Model: bad}, {Model: model.DefaultConfig(), Speed: -1}} {
		if h, err := NewHost(o); err == nil {
			h.Close()
			t.Errorf("options %+v accepted", o)
		}
	}
}

func TestServeOnALoopbackListener(t *testing.T) {
	h, err := NewHost(Options{Model: model.DefaultConfig(), Speed: 1000})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	r, _ := h.Add("llm-0", 0)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, ln, r) }()
	resp, err := http.Post(fmt.Sprintf("http://%s/completion", ln.Addr()), "application/json", strings.NewReader(`{"prompt":"hi","n_predict":3}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var out wire.CompletionResponse
	if err := json.Unmarshal(body, &out); err != nil || out.TokensPredicted != 3 || out.Timings == nil {
		t.Errorf("answer %s", body)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Serve returned %v after cancel", err)
	}
}

func TestClientGoneCancelsTheRequest(t *testing.T) {
	// A client that disconnects frees its slot: the replica stops
	// generating for it (llama.cpp cancels the task).
	clk := NewManualClock(epoch)
	h, err := NewHost(Options{Model: model.DefaultConfig(), Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	r, _ := h.Add("llm-0", 0)
	ctx, cancel := context.WithCancel(context.Background())
	req := httptest.NewRequest("POST", "/completion", strings.NewReader(`{"prompt":"a long answer please","n_predict":500}`)).WithContext(ctx)
	done := make(chan int)
	go func() {
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, req)
		done <- rec.Code
	}()
	processing := func() int {
		var n int
		h.inspect(0, func(s *model.Server, _ time.Duration) { n = s.Stats().Processing })
		return n
	}
	for processing() == 0 {
		time.Sleep(time.Millisecond)
	}
	clk.Advance(2 * time.Second)
	cancel()
	<-done
	for i := 0; processing() != 0; i++ {
		if i > 5000 {
			t.Fatal("the slot is still busy after the client went away")
		}
		clk.Advance(100 * time.Millisecond)
		time.Sleep(time.Millisecond)
	}
	if rec := do(t, r, "GET", "/slots", ""); strings.Contains(rec.Body.String(), `"is_processing":true`) {
		t.Errorf("slots after cancel: %s", rec.Body)
	}
}

func TestConcurrentRequestsOnASharedHost(t *testing.T) {
	// Many clients at once on two replicas sharing a CPU, on the real
	// clock at high speed: every answer is whole and consistent, and the
	// race detector watches the host's locking.
	h, err := NewHost(Options{Model: model.DefaultConfig(), SharedCPU: true, Speed: 2000})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	reps := make([]*Replica, 2)
	for i := range reps {
		reps[i], _ = h.Add(fmt.Sprintf("llm-%d", i), 0)
	}
	const clients = 12
	errc := make(chan error, clients)
	for c := 0; c < clients; c++ {
		go func() {
			r := reps[c%2]
			stream := c%3 == 0
			body := fmt.Sprintf(`{"prompt":"client %d asks about rings and loads","n_predict":%d,"stream":%v}`, c, 8+c, stream)
			rec := httptest.NewRecorder()
			r.ServeHTTP(rec, httptest.NewRequest("POST", "/completion", strings.NewReader(body)))
			if rec.Code != 200 {
				errc <- fmt.Errorf("client %d: %d %s", c, rec.Code, rec.Body)
				return
			}
			data := rec.Body.String()
			if stream {
				evs := strings.Split(strings.TrimSpace(data), "\n\n")
				data = strings.TrimPrefix(evs[len(evs)-1], "data: ")
				if len(evs) != 8+c+1 {
					errc <- fmt.Errorf("client %d: %d stream events, want %d", c, len(evs), 8+c+1)
					return
				}
			}
			var out wire.CompletionResponse
			if err := json.Unmarshal([]byte(data), &out); err != nil {
				errc <- fmt.Errorf("client %d: %v in %s", c, err, data)
				return
			}
			if out.TokensPredicted != 8+c || out.Timings.CacheN+out.Timings.PromptN != out.TokensEvaluated {
				errc <- fmt.Errorf("client %d: inconsistent answer %s", c, data)
				return
			}
			errc <- nil
		}()
	}
	for c := 0; c < clients; c++ {
		if err := <-errc; err != nil {
			t.Error(err)
		}
	}
}

func TestDetokenizeGivesBackTokenizedText(t *testing.T) {
	r := newTestReplica(t, nil)
	rec := do(t, r, "POST", "/tokenize", `{"content":"Hello world, internationalization!"}`)
	var tok struct{ Tokens []int }
	if err := json.Unmarshal(rec.Body.Bytes(), &tok); err != nil {
		t.Fatal(err)
	}
	ids, _ := json.Marshal(map[string][]int{"tokens": tok.Tokens})
	rec = do(t, r, "POST", "/detokenize", string(ids))
	if got := rec.Body.String(); got != `{"content":"Hello world, internationalization!"}`+"\n" {
		t.Errorf("detokenize = %s", got)
	}
}

func TestAPIKeyAndCORS(t *testing.T) {
	// llama.cpp's middleware (tools/server/server-http.cpp): OPTIONS is
	// answered before the key is checked; /health and /v1/models are public.
	r := newTestReplica(t, func(o *Options) { o.APIKeys = []string{"sk-test"} })
	tests := []struct {
		method, path, auth string
		status             int
	}{
		{"POST", "/completion", "", 401},               // no key
		{"POST", "/completion", "Bearer wrong", 401},   // wrong key
		{"POST", "/completion", "Bearer sk-test", 200}, // the key
		{"GET", "/health", "", 200},                    // public
		{"GET", "/v1/models", "", 200},                 // public
		{"GET", "/metrics", "", 401},                   // not public
		{"OPTIONS", "/v1/chat/completions", "", 200},   // preflight
	}
	for _, tt := range tests {
		req := httptest.NewRequest(tt.method, tt.path, strings.NewReader(`{"prompt":"hi","n_predict":1}`))
		req.Header.Set("Origin", "http://example.test")
		if tt.auth != "" {
			req.Header.Set("Authorization", tt.auth)
		}
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, req)
		if rec.Code != tt.status {
			t.Errorf("%s %s (%q): %d, want %d: %s", tt.method, tt.path, tt.auth, rec.Code, tt.status, rec.Body)
		}
		if got := rec.Header().Get("Access-Control-Allow-Origin"); got != "http://example.test" {
			t.Errorf("%s %s: Access-Control-Allow-Origin %q", tt.method, tt.path, got)
		}
		if tt.status == 401 {
			golden(t, "error_api_key.json", rec.Body.Bytes())
		}
	}
	req := httptest.NewRequest("POST", "/completion", strings.NewReader(`{"prompt":"hi","n_predict":1}`))
	req.Header.Set("X-Api-Key", "sk-test")
	rec := httptest.NewRecorder()
	r.ServeHTTP(rec, req)
	if rec.Code != 200 {
		t.Errorf("X-Api-Key: %d", rec.Code)
	}
}

func TestEngineFaces(t *testing.T) {
	// Issue #14: the same model behind vLLM's and SGLang's faces.
	for _, api := range []string{APIVLLM, APISGLang} {
		t.Run(api, func(t *testing.T) {
			r := newTestReplica(t, func(o *Options) { o.API = api; o.CacheReport = true })
			stream := do(t, r, "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"Hi"}],"max_tokens":3,"stream":true}`).Body.String()
			if strings.Contains(stream, "timings") || strings.Contains(stream, "usage") || !strings.Contains(stream, `"delta":{"role":"assistant","content":""}`) {
				t.Errorf("stream without include_usage:\n%s", stream)
			}
			withUsage := do(t, r, "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"Hi"}],"max_tokens":3,"stream":true,"stream_options":{"include_usage":true}}`).Body.String()
			if !strings.Contains(withUsage, `"choices":[],"usage":{"prompt_tokens":33,"completion_tokens":3,"total_tokens":36,"prompt_tokens_details":{"cached_tokens":`) {
				t.Errorf("stream with include_usage:\n%s", withUsage)
			}
			golden(t, api+"_chat_stream_usage.txt", []byte(withUsage))
			if rec := do(t, r, "GET", "/health", ""); rec.Code != 200 || rec.Body.Len() != 0 {
				t.Errorf("/health %d %q", rec.Code, rec.Body)
			}
			if rec := do(t, r, "POST", "/completion", `{"prompt":"x"}`); rec.Code != 404 {
				t.Errorf("/completion on %s: %d, want 404", api, rec.Code)
			}
			metrics := do(t, r, "GET", "/metrics", "").Body.String()
			want := map[string][]string{
				APIVLLM:   {`vllm:num_requests_running{model_name="qwen2.5-0.5b-instruct-sim"}`, `vllm:num_requests_waiting{`, `vllm:kv_cache_usage_perc{`},
				APISGLang: {`sglang:num_running_reqs{model_name="qwen2.5-0.5b-instruct-sim"}`, `sglang:num_queue_reqs{`, `sglang:token_usage{`},
			}[api]
			for _, w := range want {
				if !strings.Contains(metrics, w) {
					t.Errorf("metrics lack %s:\n%s", w, metrics)
				}
			}
			models := do(t, r, "GET", "/v1/models", "").Body.String()
			if !strings.Contains(models, `"owned_by":"`+api+`"`) {
				t.Errorf("models %s", models)
			}
		})
	}
}
