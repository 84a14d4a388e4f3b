package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/llm-ring/llm-ring/internal/config"
	"github.com/llm-ring/llm-ring/internal/router"
	"github.com/llm-ring/llm-ring/internal/wire"
)

func jsonLogger(w io.Writer) *slog.Logger { return slog.New(slog.NewJSONHandler(w, nil)) }

// chatMsg is one message of a conversation.
type chatMsg struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// reply is what a client read of one answer.
type reply struct {
	content, replica string
	prompt           int // prompt_eval_count (native API) or usage.prompt_tokens; 0 when not told
}

// ask sends one turn through the router at url by one of four ways
// (OpenAI chat, streamed or not; Ollama /api/chat, streamed NDJSON or
// not) and reads the reply.
func ask(t *testing.T, url string, way int, msgs []chatMsg, key string, seed int) reply {
	t.Helper()
	stream := way == 1 || way == 2
	var path string
	body := map[string]any{"model": "tiny", "messages": msgs, "stream": stream}
	if way < 2 {
		path = wire.PathChatCompletions
		body["max_tokens"], body["seed"] = 12, seed
	} else {
		path = "/api/chat"
		body["options"] = map[string]any{"num_predict": 12, "seed": seed}
	}
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, url+path, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("x-conversation-id", key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("%s (way %d): %d %s", path, way, resp.StatusCode, raw)
	}
	r := reply{replica: resp.Header.Get(router.HeaderRoutedTo)}
	r.content, r.prompt = readReply(t, way, raw)
	return r
}

// readReply reads the text and prompt count of one answer's body.
func readReply(t *testing.T, way int, raw []byte) (string, int) {
	t.Helper()
	var obj struct {
		Message *chatMsg `json:"message"`
		Choices []struct {
			Message *chatMsg `json:"message"`
			Delta   *chatMsg `json:"delta"`
		} `json:"choices"`
		Usage *struct {
			PromptTokens int `json:"prompt_tokens"`
		} `json:"usage"`
		PromptEvalCount int `json:"prompt_eval_count"`
	}
	var text strings.Builder
	prompt := 0
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := strings.TrimPrefix(sc.Text(), "data: ")
		if line == "" || line == wire.DataDone {
			continue
		}
		obj.Message, obj.Choices, obj.Usage, obj.PromptEvalCount = nil, nil, nil, 0
		if err := json.Unmarshal([]byte(line), &obj); err != nil {
			t.Fatalf("way %d: %v in %q", way, err, line)
		}
		if obj.Message != nil {
			text.WriteString(obj.Message.Content)
		}
		for _, c := range obj.Choices {
			for _, m := range []*chatMsg{c.Message, c.Delta} {
				if m != nil {
					text.WriteString(m.Content)
				}
			}
		}
		if obj.Usage != nil {
			prompt = obj.Usage.PromptTokens
		}
		if obj.PromptEvalCount > 0 {
			prompt = obj.PromptEvalCount
		}
	}
	return text.String(), prompt
}

// sent is one request of the workload, for matching with the servers' logs.
type sent struct {
	conv, turn int
	reply
}

// converse runs convs conversations of turns turns, interleaved (turn 1 of
// each, then turn 2 of each, ...), each turn sent one of the four ways;
// even conversations name themselves in a header, odd ones are keyed on
// their start. Every reply goes back into its conversation as it was read.
func converse(t *testing.T, url string, convs, turns int, tag string) []sent {
	t.Helper()
	hist := make([][]chatMsg, convs)
	var out []sent
	for turn := range turns {
		for c := range convs {
			if turn == 0 {
				hist[c] = []chatMsg{{"system", fmt.Sprintf("You are conversation %s-%d.", tag, c)}}
			}
			hist[c] = append(hist[c], chatMsg{"user", fmt.Sprintf("Question %d of %s-%d: what is in a KV cache?", turn, tag, c)})
			key := ""
			if c%2 == 0 {
				key = fmt.Sprintf("%s-%d", tag, c)
			}
			r := ask(t, url, (c+turn)%4, hist[c], key, 100*c+turn)
			if r.content == "" {
				t.Fatalf("conversation %d turn %d: an empty reply", c, turn)
			}
			hist[c] = append(hist[c], chatMsg{"assistant", r.content})
			out = append(out, sent{conv: c, turn: turn, reply: r})
		}
	}
	return out
}

// checkReuse matches every request with its server's "loading cache slot"
// line (a server's requests arrive one at a time, in order; before[i] is
// how many lines server i had before the workload) and checks that every
// follow-up went where its conversation's first turn went and reused,
// there, the whole previous prompt and all but the last token of the reply
// (which is never evaluated): the reply re-tokenized to itself. A native
// answer's prompt_eval_count is the whole prompt, cached tokens included.
func checkReuse(t *testing.T, servers []ollamaServer, before []int, reqs []sent) {
	t.Helper()
	lines := map[string][]slotLine{}
	for i, s := range servers {
		lines[s.name] = slotLines(t, s.log)[before[i]:]
	}
	next := map[string]int{}
	home := map[int]string{}
	prev := map[int]slotLine{}
	reused, follow := 0, 0
	for _, q := range reqs {
		ls := lines[q.replica]
		if next[q.replica] >= len(ls) {
			t.Fatalf("conversation %d turn %d on %q: no cache line for it in that server's log", q.conv, q.turn, q.replica)
		}
		l := ls[next[q.replica]]
		next[q.replica]++
		if q.prompt != 0 && q.prompt != l.prompt {
			t.Errorf("conversation %d turn %d: the answer says %d prompt tokens, the server's log %d", q.conv, q.turn, q.prompt, l.prompt)
		}
		if q.turn == 0 {
			home[q.conv] = q.replica
		} else {
			follow++
			p := prev[q.conv]
			if q.replica != home[q.conv] {
				t.Errorf("conversation %d turn %d went to %s, its first turn to %s", q.conv, q.turn, q.replica, home[q.conv])
			} else if want := p.prompt + 12 - 1; l.used < want {
				t.Errorf("conversation %d turn %d on %s reused %d of %d tokens, want ≥ %d (previous prompt %d + reply 12 - 1)",
					q.conv, q.turn, q.replica, l.used, l.prompt, want, p.prompt)
			} else {
				reused++
			}
		}
		prev[q.conv] = l
	}
	for name, ls := range lines {
		if next[name] != len(ls) {
			t.Errorf("%s logged %d cache lines, the router sent it %d requests", name, len(ls), next[name])
		}
	}
	t.Logf("%d of %d follow-ups reused their conversation's cache on the replica the router chose; homes %v", reused, follow, home)
}

// TestOllamaBehindRouter (issue 20): three real Ollama servers (the tiny
// model, CPU) behind the router with the shipped configuration, as it is
// (engine: llamacpp, whose /health Ollama does not serve) and with
// engine: ollama. Multi-turn conversations through the OpenAI and the
// native API, streamed and not: no request fails, and each follow-up reuses
// its conversation's cache on the replica the router chose, as the
// servers' own logs say.
func TestOllamaBehindRouter(t *testing.T) {
	if testing.Short() {
		t.Skip("real engine test")
	}
	bin := ollamaBinary(t)
	servers := startOllamas(t, bin, 3)
	for _, engine := range []string{"shipped", "ollama"} {
		t.Run(engine, func(t *testing.T) {
			url, logs := routerFor(t, servers, func(c *config.Router) {
				if engine == "ollama" {
					c.Engine = engine
				}
			})
			before := make([]int, len(servers))
			for i, s := range servers {
				before[i] = len(slotLines(t, s.log))
			}
			reqs := converse(t, url, 6, 3, engine)
			checkReuse(t, servers, before, reqs)
			count := func() int { return strings.Count(logs.String(), `"msg":"health_path_mismatch"`) }
			if engine == "shipped" { // the first health check runs one interval (2 s shipped) after the start
				waitFor(t, func() bool { return count() >= len(servers) })
			}
			mismatch := count()
			if want := map[string]int{"shipped": 3, "ollama": 0}[engine]; mismatch != want {
				t.Errorf("health_path_mismatch logged %d times, want %d", mismatch, want)
			}
			if n := strings.Count(logs.String(), `"status":200`); n != len(reqs) {
				t.Errorf("%d answers logged with status 200, want %d", n, len(reqs))
			}
			checkLists(t, url)
		})
	}
}

// checkLists: the model lists and the version, answered by the router from
// the real servers'.
func checkLists(t *testing.T, url string) {
	t.Helper()
	for path, want := range map[string]string{"/api/tags": `"name":"tiny:latest"`, "/api/ps": `"name":"tiny:latest"`,
		"/api/version": `{"version":"0.`, "/v1/models": `"id":"tiny:latest"`} {
		resp, err := http.Get(url + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(b), want) {
			t.Errorf("GET %s: %d %s, want %s in it", path, resp.StatusCode, b, want)
		}
	}
}
