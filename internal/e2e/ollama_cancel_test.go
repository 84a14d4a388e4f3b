package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/llm-ring/llm-ring/internal/config"
)

// TestOllamaClientGoneCancelsGeneration (issue 25): a client that hangs up
// in the middle of a streamed answer through the router stops the real
// engine's generation at once. One Ollama server with a single slot
// (OLLAMA_NUM_PARALLEL=1) serves a streamed answer long enough to take
// about a minute; the client reads its first token and closes the
// connection. Two observations from the server: its access log says the
// answer's request ended when the client left, and the next request, which
// queues behind the answer while the answer still generates, is served
// at once. The bounds are generous (2 s each, against an answer of 20 s
// or more; measured: milliseconds). Hanging up 8 s late instead fails both.
func TestOllamaClientGoneCancelsGeneration(t *testing.T) {
	if testing.Short() {
		t.Skip("real engine test")
	}
	bin := ollamaBinary(t)
	servers := startOllamas(t, bin, 1, "OLLAMA_NUM_PARALLEL=1")
	url, logs := routerFor(t, servers, func(c *config.Router) {
		c.Engine, c.MaxOutputTokens = "ollama", 10*numCtx
	})

	// The server's speed (this also loads the model): tokens per second.
	rate := nativeRate(t, url)
	// Ollama caps num_predict at 10 × the context (llm/server.go).
	n := min(10*numCtx, int(rate*60))
	full := time.Duration(float64(n) / rate * float64(time.Second))
	if full < 20*time.Second {
		t.Fatalf("at %.0f tokens/s the longest answer takes %v: too short to tell a cancellation", rate, full)
	}
	t.Logf("%.0f tokens/s: the %d-token answer would take %v", rate, n, full)

	started, closed := streamThenHangUp(t, url, n)
	probe := time.Now()
	askNative(t, url, 8)
	wait := time.Since(probe)
	t.Logf("the next request was answered %v after the client left", wait)
	if wait > 2*time.Second {
		t.Errorf("the next request waited %v behind the abandoned answer (the whole answer: %v): generation went on", wait, full)
	}

	// The server's access log: the streamed request's own duration.
	durs := ginDurations(t, servers[0].log, "/api/chat")
	if len(durs) != 3 {
		t.Fatalf("the server logged %d /api/chat requests, want 3 (rate, answer, next): %v", len(durs), durs)
	}
	held := closed.Sub(started)
	t.Logf("the server held the abandoned request %v; the client left after %v", durs[1], held)
	if durs[1] > held+2*time.Second {
		t.Errorf("the server held the abandoned request %v, the client left after %v", durs[1], held)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(logs.String(), `"error_kind":"client"`) {
		if time.Now().After(deadline) {
			t.Fatalf("the router did not log the request as ended by the client:\n%s", logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// nativeRate asks for a 256-token answer on Ollama's /api/chat and returns
// the server's own generation speed (eval_count / eval_duration).
func nativeRate(t *testing.T, url string) float64 {
	t.Helper()
	var out struct {
		EvalCount    int   `json:"eval_count"`
		EvalDuration int64 `json:"eval_duration"`
	}
	if err := json.Unmarshal(askNative(t, url, 256), &out); err != nil || out.EvalDuration <= 0 {
		t.Fatalf("no eval_count / eval_duration in the answer (%v)", err)
	}
	return float64(out.EvalCount) / (float64(out.EvalDuration) / 1e9)
}

// askNative sends one non-streamed /api/chat request for n tokens and
// returns the answer's body.
func askNative(t *testing.T, url string, n int) []byte {
	t.Helper()
	resp, err := http.Post(url+"/api/chat", "application/json", bytes.NewReader(chatBody(n, false)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("/api/chat: %d %s", resp.StatusCode, b.Bytes())
	}
	return b.Bytes()
}

// numCtx is every request's context (the same, or Ollama reloads the
// model): 10 × it bounds the answer's length.
const numCtx = 16384

func chatBody(n int, stream bool) []byte {
	b, _ := json.Marshal(map[string]any{"model": "tiny", "stream": stream,
		"messages": []chatMsg{{"user", "Tell me a long story."}},
		"options":  map[string]any{"num_predict": n, "seed": 1, "num_ctx": numCtx}})
	return b
}

// streamThenHangUp streams an n-token answer through the router on a raw
// connection, reads up to its first piece of text, and closes the
// connection. It returns when it sent the request and when it closed.
func streamThenHangUp(t *testing.T, url string, n int) (started, closed time.Time) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := chatBody(n, true)
	started = time.Now()
	fmt.Fprintf(conn, "POST /api/chat HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		len(body), body)
	rd := bufio.NewReader(conn)
	if status, _ := rd.ReadString('\n'); !strings.Contains(status, " 200 ") {
		rest, _ := rd.Peek(rd.Buffered())
		t.Fatalf("the streamed answer: %q %s", status, rest)
	}
	for {
		line, err := rd.ReadString('\n')
		if err != nil {
			t.Fatalf("before the first token: %v (read %q)", err, line)
		}
		if strings.Contains(line, `"content":"`) && !strings.Contains(line, `"content":""`) {
			break
		}
	}
	conn.Close()
	return started, time.Now()
}

// ginRE is Ollama's access log line (gin's default format):
// [GIN] 2026/01/02 - 03:04:05 | 200 |  1.234567s |  127.0.0.1 | POST "/api/chat"
var ginRE = regexp.MustCompile(`^\[GIN\] [^|]+\|\s*\d+\s*\|\s*(\S+)\s*\|[^|]+\|\s*POST\s+"([^"]+)"`)

// ginDurations reads the durations of the server's POST requests to path,
// in the order they ended.
func ginDurations(t *testing.T, log, path string) []time.Duration {
	t.Helper()
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	var out []time.Duration
	for _, line := range strings.Split(string(b), "\n") {
		m := ginRE.FindStringSubmatch(line)
		if m == nil || m[2] != path {
			continue
		}
		d, err := time.ParseDuration(m[1])
		if err != nil {
			t.Fatalf("duration %q in %q: %v", m[1], line, err)
		}
		out = append(out, d)
	}
	return out
}
