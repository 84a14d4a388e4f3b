package router

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/llm-ring/llm-ring/internal/config"
	"github.com/llm-ring/llm-ring/internal/replicaset"
	"github.com/llm-ring/llm-ring/internal/wire"
)

// nativeOllama answers Ollama's native API as Ollama 0.17.4 does (the
// shapes recorded in docs/real-engines.md): /api/chat and /api/generate
// stream NDJSON unless "stream": false, the last object carrying the
// counts; /api/tags and /api/ps list models; /api/version.
func nativeOllama(t *testing.T, name, model, version string) replicaset.Replica {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case pathOllamaVersion:
			fmt.Fprintf(w, `{"version":%q}`, version)
		case pathOllamaTags, pathOllamaPS:
			fmt.Fprintf(w, `{"models":[{"name":%q,"model":%q,"size":1},{"name":"shared:latest","model":"shared:latest","size":2}]}`, model, model)
		case pathOllamaChat, pathOllamaGenerate:
			var req struct {
				Stream *bool `json:"stream"`
			}
			body, _ := io.ReadAll(r.Body)
			json.Unmarshal(body, &req)
			final := `{"model":"tiny","created_at":"2026-01-02T03:04:05Z","done":true,"done_reason":"length",` +
				`"total_duration":9000000,"load_duration":1000,"prompt_eval_count":40,"prompt_eval_duration":2000000,` +
				`"eval_count":3,"eval_duration":3000000}`
			if req.Stream != nil && !*req.Stream {
				w.Header().Set("Content-Type", "application/json; charset=utf-8")
				fmt.Fprint(w, final)
				return
			}
			w.Header().Set("Content-Type", "application/x-ndjson")
			for _, tok := range []string{"a", "b", "c"} {
				fmt.Fprintf(w, `{"model":"tiny","created_at":"2026-01-02T03:04:05Z","message":{"role":"assistant","content":%q},"done":false}`+"\n", tok)
				w.(http.Flusher).Flush()
			}
			fmt.Fprintln(w, final)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return replicaset.Replica{Name: name, URL: srv.URL}
}

// TestOllamaNative (issue 20): Ollama's POST /api/chat and /api/generate are
// routed like a chat (a conversation keeps its replica across the OpenAI
// and the native API), streamed (NDJSON, passed through as it comes) or
// not, and the router learns the final object's counts: prompt_eval_count
// is the whole prompt with the cached share unknown, eval_count the
// output.
func TestOllamaNative(t *testing.T) {
	var rs []replicaset.Replica
	for i := range 3 {
		rs = append(rs, nativeOllama(t, fmt.Sprint("llm-", i), fmt.Sprintf("own-%d:latest", i), fmt.Sprintf("0.%d.0", 9+i)))
	}
	s := stubRouter(t, "consistent", rs, func(c *config.Router) { c.Engine = "ollama" })
	for i := range 4 {
		user := fmt.Sprintf("Question %d: what does a KV cache hold?", i)
		native := fmt.Sprintf(`{"model":"tiny","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":%q}],"options":{"num_predict":3}}`, user)
		gen := fmt.Sprintf(`{"model":"tiny","system":"Be brief.","prompt":%q,"stream":false,"options":{"num_predict":3}}`, user)
		r1, b1 := rawPost(t, s.url, wire.PathChatCompletions, strings.Replace(native, `"options":{"num_predict":3}`, `"max_tokens":3`, 1))
		r2, b2 := rawPost(t, s.url, pathOllamaChat, native)
		r3, b3 := rawPost(t, s.url, pathOllamaGenerate, gen)
		if r2.StatusCode != 200 || r3.StatusCode != 200 {
			t.Fatalf("native chat %d %s; generate %d %s", r2.StatusCode, b2, r3.StatusCode, b3)
		}
		if a, b, c := r1.Header.Get(HeaderRoutedTo), r2.Header.Get(HeaderRoutedTo), r3.Header.Get(HeaderRoutedTo); a != b || b != c {
			t.Errorf("conversation %d: OpenAI chat on %s (%d %s), /api/chat on %s, /api/generate on %s", i, a, r1.StatusCode, b1, b, c)
		}
		if got := strings.Count(b2, "\n"); got != 4 || r2.Header.Get("Content-Type") != "application/x-ndjson" {
			t.Errorf("the stream came through as %d lines, %q:\n%s", got, r2.Header.Get("Content-Type"), b2)
		}
	}
	waitFor(t, "every answer logged", func() bool { return strings.Count(s.logText(), `"msg":"request"`) == 12 })
	// 8 native answers of 40 prompt tokens (cached share unknown) and 3 generated.
	if got := s.learned(); got.processed != 8*40 || got.cached != 0 || got.predicted != 8*3 {
		t.Errorf("learned %+v, want 320 processed, 0 cached, 24 predicted (the OpenAI answers teach nothing here)", got)
	}
	if resp, body := rawPost(t, s.url, pathOllamaChat, `{"model":"tiny","messages":[{"role":"user","content":"x"}],"options":{"num_predict":"many"}}`); resp.StatusCode != 400 ||
		!strings.Contains(body, "options.num_predict: must be an integer") {
		t.Errorf("bad num_predict: %d %s", resp.StatusCode, body)
	}
}

// TestOllamaLists: GET /api/tags and /api/ps are the union of the healthy
// replicas' lists, /api/version their lowest version.
func TestOllamaLists(t *testing.T) {
	var rs []replicaset.Replica
	for i := range 3 {
		rs = append(rs, nativeOllama(t, fmt.Sprint("llm-", i), fmt.Sprintf("own-%d:latest", i), fmt.Sprintf("0.%d.0", 9+i)))
	}
	s := stubRouter(t, "consistent", rs, func(c *config.Router) { c.Engine = "ollama" })
	for _, path := range []string{pathOllamaTags, pathOllamaPS} {
		resp, body := s.do(t, "GET", path, "")
		var got struct {
			Models []struct{ Name string } `json:"models"`
		}
		if err := json.Unmarshal([]byte(body), &got); err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", path, resp.StatusCode, body)
		}
		var names []string
		for _, m := range got.Models {
			names = append(names, m.Name)
		}
		if want := "own-0:latest own-1:latest own-2:latest shared:latest"; strings.Join(names, " ") != want {
			t.Errorf("%s lists %v, want %s", path, names, want)
		}
	}
	if resp, body := s.do(t, "GET", pathOllamaVersion, ""); resp.StatusCode != 200 || strings.TrimSpace(body) != `{"version":"0.9.0"}` {
		t.Errorf("/api/version: %d %s, want the lowest, 0.9.0", resp.StatusCode, body)
	}
}
