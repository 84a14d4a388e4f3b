package e2e

// A real engine behind the router: Ollama servers built by hack/ollama.sh,
// serving the tiny model hack/tinymodel writes. Without the binary the
// tests skip, except with CI=true, where they fail (as the envtest suite).

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/llm-ring/llm-ring/internal/config"
	"github.com/llm-ring/llm-ring/internal/discovery"
	"github.com/llm-ring/llm-ring/internal/replicaset"
	"github.com/llm-ring/llm-ring/internal/router"
	"github.com/llm-ring/llm-ring/internal/testlog"
)

// ollamaBinary finds the Ollama server: $LLM_RING_OLLAMA when set (then it
// must be there), else the cache hack/ollama.sh fills. skip says why there
// is none.
func ollamaBinary(t *testing.T) string {
	t.Helper()
	bin, skip := ollamaPath(t)
	switch {
	case skip != "" && os.Getenv("CI") == "true":
		t.Fatalf("CI=true and %s", skip)
	case skip != "":
		t.Skip(skip)
	}
	return bin
}

func ollamaPath(t *testing.T) (bin, skip string) {
	if b := os.Getenv("LLM_RING_OLLAMA"); b != "" {
		if fi, err := os.Stat(b); err != nil || fi.IsDir() {
			t.Fatalf("LLM_RING_OLLAMA=%s is not a binary", b)
		}
		return b, ""
	}
	mod, err := os.ReadFile("../../hack/ollama/go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`github\.com/ollama/ollama v(\S+)`).FindSubmatch(mod)
	if m == nil {
		t.Fatal("hack/ollama/go.mod requires no github.com/ollama/ollama")
	}
	root := os.Getenv("LLM_RING_CACHE")
	if root == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			t.Fatal(err)
		}
		root = filepath.Join(home, ".cache", "llm-ring")
	}
	b := filepath.Join(root, "ollama", string(m[1]), "ollama")
	if _, err := os.Stat(b); err != nil {
		return "", fmt.Sprintf("no Ollama server at %s: run `bash hack/ollama.sh` (or set LLM_RING_OLLAMA)", b)
	}
	return b, ""
}

// ollamaServer is one running `ollama serve`.
type ollamaServer struct {
	name, url string
	log       string // its log file (OLLAMA_DEBUG=1: the runner's cache lines)
}

// startOllamas starts n servers on loopback sharing one models directory
// that holds the tiny model (as "tiny"), and stops them at the end. Each
// keeps 4 cache slots and picks them for several users
// (OLLAMA_MULTIUSER_CACHE): with one slot, or the single-user choice of the
// longest slot, a new conversation overwrites another's cache. They run
// Ollama's own engine (OLLAMA_NEW_ENGINE): its llama.cpp runner aborts
// when the multi-user cache forks a slot (GGML_ASSERT "seq_cp() is only
// supported for full KV buffers", Ollama 0.17.4; docs/notes/ollama.md).
// env (KEY=value) is added last, so it overrides these.
func startOllamas(t *testing.T, bin string, n int, env ...string) []ollamaServer {
	t.Helper()
	dir := t.TempDir()
	models := filepath.Join(dir, "models")
	var out []ollamaServer
	for i := range n {
		port := freePort(t)
		s := ollamaServer{name: fmt.Sprint("ollama-", i), url: fmt.Sprintf("http://127.0.0.1:%d", port),
			log: filepath.Join(dir, fmt.Sprintf("ollama-%d.log", i))}
		logf, err := os.Create(s.log)
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, "serve")
		cmd.Env = append(os.Environ(), "OLLAMA_HOST=127.0.0.1:"+strconv.Itoa(port), "OLLAMA_MODELS="+models,
			"HOME="+dir, "OLLAMA_DEBUG=1", "OLLAMA_NUM_PARALLEL=4", "OLLAMA_MULTIUSER_CACHE=1", "OLLAMA_NEW_ENGINE=1",
			"OLLAMA_KEEP_ALIVE=1h", "OLLAMA_NOPRUNE=1")
		cmd.Env = append(cmd.Env, env...)
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if t.Failed() {
				logTail(t, s.log)
			}
			cmd.Process.Signal(os.Interrupt)
			done := make(chan struct{})
			go func() { cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				cmd.Process.Kill()
				<-done
			}
			logf.Close()
		})
		out = append(out, s)
	}
	for _, s := range out {
		waitUp(t, s.url+"/api/version")
	}
	createTiny(t, bin, out[0].url, dir)
	return out
}

// waitUp waits for url to answer 200.
func waitUp(t *testing.T, url string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not come up: %v", url, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// createTiny writes the tiny model (go run ./hack/tinymodel) and creates it
// as "tiny" through the server at url.
func createTiny(t *testing.T, bin, url, dir string) {
	t.Helper()
	mdir := filepath.Join(dir, "tiny")
	gen := exec.Command("go", "run", "../../hack/tinymodel", "-out", mdir)
	if out, err := gen.CombinedOutput(); err != nil {
		t.Fatalf("go run hack/tinymodel: %v\n%s", err, out)
	}
	create := exec.Command(bin, "create", "tiny", "-f", "Modelfile")
	create.Dir = mdir
	create.Env = append(os.Environ(), "OLLAMA_HOST="+strings.TrimPrefix(url, "http://"), "HOME="+dir)
	if out, err := create.CombinedOutput(); err != nil {
		t.Fatalf("ollama create: %v\n%s", err, out)
	}
}

// routerFor starts a router with the shipped configuration (as it is:
// its engine is llamacpp) in front of the servers, with edit applied.
func routerFor(t *testing.T, servers []ollamaServer, edit func(*config.Router)) (url string, logs *testlog.Buffer) {
	t.Helper()
	c, err := config.Load("../../config/router.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c.Discovery.Static = nil
	for _, s := range servers {
		c.Discovery.Static = append(c.Discovery.Static, replicaset.Replica{Name: s.name, URL: s.url})
	}
	if edit != nil {
		edit(c)
	}
	logs = &testlog.Buffer{}
	rt, err := router.New(router.Options{Config: c, Logger: jsonLogger(logs)})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	src, err := discovery.FromConfig(c, nil) // as the binary: the shipped model_source polls the servers' model lists
	if err != nil {
		t.Fatal(err)
	}
	go func() { done <- rt.Serve(ctx, ln, src) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	url = "http://" + ln.Addr().String()
	waitReady(t, url, len(servers))
	return url, logs
}

// waitReady waits until the router's /readyz counts n replicas: the
// model poller publishes a replica once its first model-list poll ended,
// as a deployment's readiness probe waits for it.
func waitReady(t *testing.T, url string, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(url + "/readyz")
		var body struct{ Replicas int }
		if err == nil {
			_ = json.NewDecoder(resp.Body).Decode(&body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && body.Replicas == n {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the router never counted %d ready replicas (last: %d, %v)", n, body.Replicas, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// slotLine is one "loading cache slot" line of the runner: the prompt's
// length and how many of its tokens the slot already held.
type slotLine struct{ prompt, used int }

var slotRE = regexp.MustCompile(`msg="loading cache slot" id=\d+ cache=\d+ prompt=(\d+) used=(\d+)`)

// slotLines reads a server's log: one line per completion request, in
// the order the requests arrived.
func slotLines(t *testing.T, path string) []slotLine {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []slotLine
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if m := slotRE.FindStringSubmatch(sc.Text()); m != nil {
			p, _ := strconv.Atoi(m[1])
			u, _ := strconv.Atoi(m[2])
			out = append(out, slotLine{prompt: p, used: u})
		}
	}
	return out
}

// logTail logs the last lines of a server's log (a failed test's evidence).
func logTail(t *testing.T, path string) {
	b, err := os.ReadFile(path)
	if err != nil {
		return
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	t.Logf("%s, last lines:\n%s", path, strings.Join(lines[max(0, len(lines)-25):], "\n"))
}
