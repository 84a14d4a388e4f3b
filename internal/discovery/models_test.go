package discovery

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"

	"github.com/llm-ring/llm-ring/internal/replicaset"
)

// modelServer is a replica's model list endpoint whose answer a test
// changes; it counts the polls it answered and the most in flight at once.
type modelServer struct {
	*httptest.Server
	mu       sync.Mutex
	status   int
	body     string
	delay    time.Duration // before answering (a slow replica), cut short by the poll's end
	paths    []string
	polls    atomic.Int64
	inflight atomic.Int64
	maxIn    atomic.Int64
}

func newModelServer(t *testing.T, body string) *modelServer {
	s := &modelServer{status: http.StatusOK, body: body}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := s.inflight.Add(1)
		defer s.inflight.Add(-1)
		for {
			m := s.maxIn.Load()
			if n <= m || s.maxIn.CompareAndSwap(m, n) {
				break
			}
		}
		s.mu.Lock()
		status, body, delay := s.status, s.body, s.delay
		s.paths = append(s.paths, r.URL.Path)
		s.mu.Unlock()
		defer s.polls.Add(1)
		if delay > 0 {
			select {
			case <-time.After(delay):
			case <-r.Context().Done():
				return
			}
		}
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *modelServer) setDelay(d time.Duration) {
	s.mu.Lock()
	s.delay = d
	s.mu.Unlock()
}

func (s *modelServer) answer(status int, body string) {
	s.mu.Lock()
	s.status, s.body = status, body
	s.mu.Unlock()
}

// waitPolls waits until the server has answered n more polls than now.
func (s *modelServer) waitPolls(t *testing.T, n int64) {
	t.Helper()
	target := s.polls.Load() + n
	deadline := time.Now().Add(30 * time.Second)
	for s.polls.Load() < target {
		if time.Now().After(deadline) {
			t.Fatalf("the replica was not polled %d more times", n)
		}
		time.Sleep(time.Millisecond)
	}
}

// logs is a slog handler's output that tests count lines in.
type logs struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logs) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logs) count(msg string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.buf.String(), "msg="+msg+" ")
}

func (l *logs) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// chanSource publishes what a test sends it.
type chanSource struct {
	sets chan []replicaset.Replica
	err  chan error
}

func newChanSource() *chanSource {
	return &chanSource{sets: make(chan []replicaset.Replica), err: make(chan error)}
}

func (c *chanSource) Run(ctx context.Context, update func([]replicaset.Replica)) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-c.err:
			return err
		case rs := <-c.sets:
			update(rs)
		}
	}
}

// polled runs a ModelPoller around src and collects what it publishes.
type polled struct {
	t    *testing.T
	sets chan []replicaset.Replica
	logs *logs
	done chan error
	stop func()
}

func startPoller(t *testing.T, src Source, o ModelPollOptions) *polled {
	t.Helper()
	l := &logs{}
	o.Logger = slog.New(slog.NewTextHandler(l, nil))
	if o.Refresh == 0 {
		o.Refresh = 10 * time.Millisecond
	}
	if o.Engine == "" {
		o.Engine = "vllm"
	}
	p, err := NewModelPoller(src, o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &polled{t: t, sets: make(chan []replicaset.Replica, 1000), logs: l, done: make(chan error, 1)}
	go func() { w.done <- p.Run(ctx, func(rs []replicaset.Replica) { w.sets <- rs }) }()
	var once sync.Once
	w.stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-w.done:
				if err != nil {
					t.Errorf("Run: %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Error("Run did not return after cancel")
			}
		})
	}
	t.Cleanup(w.stop)
	return w
}

// until returns the first publication that satisfies ok; the deadline only
// turns a hang into a failure.
func (w *polled) until(what string, ok func([]replicaset.Replica) bool) []replicaset.Replica {
	w.t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case rs := <-w.sets:
			if ok(rs) {
				return rs
			}
		case <-timeout:
			w.t.Fatalf("%s: never published\nlogs:\n%s", what, w.logs)
			return nil
		}
	}
}

// noneQueued fails if a publication is waiting.
func (w *polled) noneQueued(why string) {
	w.t.Helper()
	select {
	case rs := <-w.sets:
		w.t.Fatalf("%s: unexpected publication %v", why, rs)
	default:
	}
}

func models(pairs ...string) []replicaset.Model {
	out := []replicaset.Model{}
	for i := 0; i < len(pairs); i += 2 {
		out = append(out, replicaset.Model{Name: pairs[i], Parent: pairs[i+1]})
	}
	return out
}

// has reports whether rs holds the named replica with exactly these models
// (nil: unknown).
func has(rs []replicaset.Replica, name string, want []replicaset.Model) bool {
	i := slices.IndexFunc(rs, func(r replicaset.Replica) bool { return r.Name == name })
	return i >= 0 && (rs[i].Models == nil) == (want == nil) && slices.Equal(rs[i].Models, want)
}

const (
	vllmBase    = `{"object":"list","data":[{"id":"llama-3.1-8b","object":"model","root":"meta-llama/Llama-3.1-8B","parent":null}]}`
	vllmAdapter = `{"object":"list","data":[{"id":"llama-3.1-8b","parent":null},{"id":"sql-lora","root":"/a/sql","parent":"llama-3.1-8b"}]}`
)

// Models appear after the first poll (unknown before it), change when the
// replica's list changes (an adapter loaded), and a steady list publishes
// nothing more.
func TestModelPollerFollowsLists(t *testing.T) {
	a := newModelServer(t, vllmBase)
	b := newModelServer(t, `{"data":[{"id":"qwen-2.5-7b"}]}`)
	src := Static{{Name: "b", URL: b.URL}, {Name: "a", URL: a.URL + "/"}}
	w := startPoller(t, src, ModelPollOptions{})

	// Each replica is held back until its first poll ends: no set shows
	// it with unknown models.
	rs := w.until("both polled", func(rs []replicaset.Replica) bool {
		for _, r := range rs {
			if r.Models == nil {
				t.Fatalf("%s published before its first poll ended: %v", r.Name, rs)
			}
		}
		return has(rs, "a", models("llama-3.1-8b", "")) && has(rs, "b", models("qwen-2.5-7b", ""))
	})
	if len(rs) != 2 || rs[0].Name != "a" {
		t.Fatalf("set %v: want a and b, sorted", rs)
	}
	a.answer(http.StatusOK, vllmAdapter)
	rs = w.until("adapter loaded", func(rs []replicaset.Replica) bool {
		return has(rs, "a", models("llama-3.1-8b", "", "sql-lora", "llama-3.1-8b"))
	})
	if !has(rs, "b", models("qwen-2.5-7b", "")) || rs[0].URL != a.URL+"/" {
		t.Fatalf("the other replica or the URL changed: %v", rs)
	}
	a.waitPolls(t, 3)
	b.waitPolls(t, 3)
	w.noneQueued("lists unchanged for three polls")
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.paths[0] != "/v1/models" {
		t.Errorf("vLLM polled at %q, want /v1/models", a.paths[0])
	}
	if got := w.logs.count("replica_models_changed"); got != 3 {
		t.Errorf("%d replica_models_changed lines, want 3 (a, b, a again)\n%s", got, w.logs)
	}
}

// A failing poll keeps the last known list and logs once; nil stays nil
// (unknown) until a first success; recovery is logged once.
func TestModelPollerKeepsListOnFailure(t *testing.T) {
	a := newModelServer(t, vllmBase)
	down := newModelServer(t, "")
	down.answer(http.StatusServiceUnavailable, `{"error":"loading"}`)
	w := startPoller(t, Static{{Name: "a", URL: a.URL}, {Name: "down", URL: down.URL}}, ModelPollOptions{})

	w.until("a known", func(rs []replicaset.Replica) bool {
		return has(rs, "a", models("llama-3.1-8b", "")) && has(rs, "down", nil)
	})
	a.answer(http.StatusInternalServerError, "oops")
	a.waitPolls(t, 3)
	down.waitPolls(t, 3)
	w.noneQueued("failures change nothing")
	if got := w.logs.count("replica_models_poll_failed"); got != 2 {
		t.Fatalf("%d poll_failed lines, want 2 (one per replica, however many polls failed)\n%s", got, w.logs)
	}
	if !strings.Contains(w.logs.String(), "status 503") || !strings.Contains(w.logs.String(), "kept=[llama-3.1-8b]") {
		t.Errorf("the failure line says neither the status nor the kept list:\n%s", w.logs)
	}
	down.answer(http.StatusOK, `{"data":[{"id":"m"}]}`)
	a.answer(http.StatusOK, vllmBase)
	rs := w.until("down recovered", func(rs []replicaset.Replica) bool { return has(rs, "down", models("m", "")) })
	if !has(rs, "a", models("llama-3.1-8b", "")) {
		t.Fatalf("a lost its list: %v", rs)
	}
	a.waitPolls(t, 3)
	if got := w.logs.count("replica_models_poll_recovered"); got != 2 {
		t.Errorf("%d recovered lines, want 2\n%s", got, w.logs)
	}
}

// Ollama replicas are asked for their tags; a replica's own engine wins
// over the set's.
func TestModelPollerOllamaTags(t *testing.T) {
	o := newModelServer(t, `{"models":[{"name":"llama3:latest","model":"llama3:latest","size":1},{"name":"qwen2:7b"}]}`)
	w := startPoller(t, Static{{Name: "o", URL: o.URL, Engine: "ollama"}}, ModelPollOptions{Engine: "llamacpp"})
	w.until("tags read", func(rs []replicaset.Replica) bool { return has(rs, "o", models("llama3:latest", "", "qwen2:7b", "")) })
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.paths[0] != "/api/tags" {
		t.Errorf("ollama polled at %q, want /api/tags", o.paths[0])
	}
}

// A slow, a huge and a malformed answer each fail that replica's poll
// within its bounds (logged, naming why); the set is still published with
// the good replica's models.
func TestModelPollerBoundsBadAnswers(t *testing.T) {
	good := newModelServer(t, vllmBase)
	slow := newModelServer(t, vllmBase)
	slow.setDelay(time.Hour)
	huge := newModelServer(t, `{"data":[{"id":"`+strings.Repeat("x", 4096)+`"}]}`)
	bad := newModelServer(t, `{"data":[{"object":"model"}]}`)
	html := newModelServer(t, `<html>not found</html>`)
	src := Static{{Name: "good", URL: good.URL}, {Name: "slow", URL: slow.URL}, {Name: "huge", URL: huge.URL},
		{Name: "bad", URL: bad.URL}, {Name: "html", URL: html.URL}}
	w := startPoller(t, src, ModelPollOptions{Refresh: 100 * time.Millisecond, Timeout: 200 * time.Millisecond, MaxBytes: 1024})
	// Each bad replica joins, unknown, once its first poll has failed.
	rs := w.until("all five", func(rs []replicaset.Replica) bool { return len(rs) == 5 })
	if !has(rs, "good", models("llama-3.1-8b", "")) {
		t.Errorf("good: %v", rs)
	}
	for _, name := range []string{"slow", "huge", "bad", "html"} {
		if !has(rs, name, nil) {
			t.Errorf("%s: models %v, want unknown", name, rs)
		}
	}
	slow.waitPolls(t, 2) // each cut short by the timeout
	for _, want := range []string{"context deadline exceeded", "answer over 1024 bytes", "data[0]: no model name", "model list: invalid character"} {
		deadline := time.Now().Add(30 * time.Second)
		for !strings.Contains(w.logs.String(), want) {
			if time.Now().After(deadline) {
				t.Fatalf("no log line says %q:\n%s", want, w.logs)
			}
			time.Sleep(time.Millisecond)
		}
	}
	if got := w.logs.count("replica_models_poll_failed"); got != 4 {
		t.Errorf("%d poll_failed lines, want 4 (one per bad replica)\n%s", got, w.logs)
	}
}

// A joining replica whose first poll does not end is held back for at
// most two refresh intervals, then published with unknown models.
func TestModelPollerReleasesSlowJoiner(t *testing.T) {
	good := newModelServer(t, vllmBase)
	slow := newModelServer(t, vllmBase)
	slow.setDelay(time.Hour)
	w := startPoller(t, Static{{Name: "good", URL: good.URL}, {Name: "slow", URL: slow.URL}},
		ModelPollOptions{Refresh: 200 * time.Millisecond, Timeout: time.Hour})
	rs := w.until("good", func(rs []replicaset.Replica) bool { return len(rs) > 0 })
	if len(rs) != 1 || !has(rs, "good", models("llama-3.1-8b", "")) {
		t.Fatalf("first set %v, want good alone (slow held back)", rs)
	}
	w.until("slow released", func(rs []replicaset.Replica) bool { return has(rs, "slow", nil) && len(rs) == 2 })
	if n := w.logs.count("replica_models_poll_failed"); n != 0 {
		t.Errorf("%d failures logged for a poll still in flight", n)
	}
}

// At most Concurrency polls are in flight at once, across all replicas.
func TestModelPollerBoundsConcurrency(t *testing.T) {
	s := newModelServer(t, vllmBase)
	s.setDelay(5 * time.Millisecond)
	var src Static
	for _, n := range []string{"r0", "r1", "r2", "r3", "r4", "r5", "r6", "r7", "r8", "r9"} {
		src = append(src, replicaset.Replica{Name: n, URL: s.URL})
	}
	w := startPoller(t, src, ModelPollOptions{Concurrency: 2, Refresh: 20 * time.Millisecond})
	w.until("all known", func(rs []replicaset.Replica) bool {
		return !slices.ContainsFunc(rs, func(r replicaset.Replica) bool { return r.Models == nil })
	})
	s.waitPolls(t, 20)
	if m := s.maxIn.Load(); m < 1 || m > 2 {
		t.Fatalf("%d polls in flight at once, want at most 2", m)
	}
}

// Membership changes publish at once: a new replica joins unknown and is
// polled at once, one that leaves is gone, one whose source gives its
// models (configured) is never polled.
func TestModelPollerMembership(t *testing.T) {
	a := newModelServer(t, vllmBase)
	b := newModelServer(t, `{"data":[{"id":"qwen"}]}`)
	c := newModelServer(t, `{"data":[{"id":"never-asked"}]}`)
	src := newChanSource()
	w := startPoller(t, src, ModelPollOptions{Refresh: time.Hour}) // only joins trigger polls here
	src.sets <- []replicaset.Replica{{Name: "a", URL: a.URL}}
	w.until("a polled", func(rs []replicaset.Replica) bool { return has(rs, "a", models("llama-3.1-8b", "")) })

	configured := models("configured", "")
	src.sets <- []replicaset.Replica{{Name: "a", URL: a.URL}, {Name: "b", URL: b.URL}, {Name: "c", URL: c.URL, Models: configured}}
	// c (configured) joins at once; b once its first poll has ended.
	rs := w.until("c joined", func([]replicaset.Replica) bool { return true })
	if len(rs) != 2 || !has(rs, "a", models("llama-3.1-8b", "")) || !has(rs, "c", configured) {
		t.Fatalf("joined: %v, want a known and c configured, b held back", rs)
	}
	rs = w.until("b polled", func([]replicaset.Replica) bool { return true })
	if len(rs) != 3 || !has(rs, "b", models("qwen", "")) {
		t.Fatalf("b polled: %v", rs)
	}

	src.sets <- []replicaset.Replica{{Name: "b", URL: b.URL}, {Name: "c", URL: c.URL, Models: configured}}
	rs = w.until("a left", func([]replicaset.Replica) bool { return true })
	if len(rs) != 2 || !has(rs, "b", models("qwen", "")) || !has(rs, "c", configured) {
		t.Fatalf("after a left: %v", rs)
	}
	// b moves to another URL: its last list is kept until it is polled there.
	b2 := newModelServer(t, `{"data":[{"id":"qwen-2"}]}`)
	src.sets <- []replicaset.Replica{{Name: "b", URL: b2.URL}, {Name: "c", URL: c.URL, Models: configured}}
	rs = w.until("b moved", func(rs []replicaset.Replica) bool { return len(rs) == 2 && rs[0].URL == b2.URL })
	if !has(rs, "b", models("qwen", "")) {
		t.Fatalf("b moved: %v, want its last list kept until polled at the new URL", rs)
	}
	w.until("b polled at its new URL", func(rs []replicaset.Replica) bool { return has(rs, "b", models("qwen-2", "")) })
	if n := c.polls.Load(); n != 0 {
		t.Errorf("the configured replica was polled %d times", n)
	}
}

// A consumer that does not take the set for a while never holds up the
// wrapped source: its callback returns at once.
func TestModelPollerNeverBlocksTheSource(t *testing.T) {
	s := newModelServer(t, vllmBase)
	block := make(chan struct{})
	sent := make(chan struct{})
	src := sourceFunc(func(ctx context.Context, update func([]replicaset.Replica)) error {
		for i := range 100 {
			update([]replicaset.Replica{{Name: "r", URL: s.URL}, {Name: "x" + string(rune('a'+i%26)), URL: s.URL}})
		}
		close(sent)
		<-ctx.Done()
		return nil
	})
	p, err := NewModelPoller(src, ModelPollOptions{Refresh: time.Second, Engine: "vllm"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx, func([]replicaset.Replica) { <-block }) }() // the consumer is stuck
	select {
	case <-sent:
	case <-time.After(30 * time.Second):
		t.Fatal("the source's calls were held up by a stuck consumer")
	}
	for deadline := time.Now().Add(30 * time.Second); s.polls.Load() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no poll while the consumer is stuck")
		}
	}
	cancel()
	close(block)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

type sourceFunc func(ctx context.Context, update func([]replicaset.Replica)) error

func (f sourceFunc) Run(ctx context.Context, update func([]replicaset.Replica)) error {
	return f(ctx, update)
}

// The wrapped source's error is Run's; options are checked.
func TestModelPollerErrors(t *testing.T) {
	src := newChanSource()
	w := startPoller(t, src, ModelPollOptions{})
	src.err <- errors.New("watch broke")
	select {
	case err := <-w.done:
		if err == nil || err.Error() != "watch broke" {
			t.Fatalf("Run: %v, want the source's error", err)
		}
		w.done <- nil // for the cleanup's stop
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return the source's error")
	}
	for _, tc := range []struct {
		o    ModelPollOptions
		want string
	}{
		{ModelPollOptions{Engine: "vllm"}, "refresh must be > 0"},
		{ModelPollOptions{Refresh: time.Second, Engine: "tgi"}, `unknown engine "tgi"`},
		{ModelPollOptions{Refresh: time.Second, Engine: "vllm", MaxBytes: -1}, "must not be negative"},
	} {
		if _, err := NewModelPoller(Static{}, tc.o); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: err %v, want %q", tc.o, err, tc.want)
		}
	}
	if _, err := NewModelPoller(nil, ModelPollOptions{Refresh: time.Second, Engine: "vllm"}); err == nil {
		t.Error("nil source accepted")
	}
}

// model_source static: the static list's models pass through as configured
// (sorted by replica, nothing polled, nil stays unknown).
func TestStaticPassesModelsThrough(t *testing.T) {
	configured := models("llama-3.1-8b", "", "sql-lora", "llama-3.1-8b")
	src := Static{{Name: "b", URL: "http://b:8000"}, {Name: "a", URL: "http://a:8000", Models: configured}}
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan []replicaset.Replica, 1)
	go func() { _ = src.Run(ctx, func(rs []replicaset.Replica) { got <- rs; cancel() }) }()
	rs := <-got
	if len(rs) != 2 || !has(rs, "a", configured) || !has(rs, "b", nil) || rs[0].Name != "a" {
		t.Fatalf("static published %v", rs)
	}
}

// The poller wraps the Kubernetes source as it wraps the static list: the
// pods its EndpointSlices name are polled at their URLs.
func TestModelPollerOverKubernetes(t *testing.T) {
	s := newModelServer(t, vllmAdapter)
	u, err := url.Parse(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	port, _ := strconv.Atoi(u.Port())
	es := slice("llm-a", "llm", ep("llm-0", u.Hostname()))
	es.Ports[0].Port = ptr(int32(port))
	client := fake.NewClientset(es)
	k, err := NewKubernetes(KubernetesOptions{Namespace: "llm-ring", Service: "llm", PortName: "http", Client: client})
	if err != nil {
		t.Fatal(err)
	}
	w := startPoller(t, k, ModelPollOptions{})
	w.until("pod polled", func(rs []replicaset.Replica) bool {
		return len(rs) == 1 && rs[0].URL == s.URL && has(rs, "llm-0", models("llama-3.1-8b", "", "sql-lora", "llama-3.1-8b"))
	})
}

// A polled replica whose engine ignores the request's model (llama.cpp,
// SGLang) also serves other names (AnyModel: the catch-all pool too); a
// vLLM or Ollama replica serves only what it lists.
func TestModelPollerAnyModel(t *testing.T) {
	l := newModelServer(t, `{"data":[{"id":"qwen2.5-0.5b"}]}`)
	v := newModelServer(t, vllmBase)
	w := startPoller(t, Static{{Name: "l", URL: l.URL, Engine: "llamacpp"}, {Name: "v", URL: v.URL}}, ModelPollOptions{Engine: "vllm"})
	rs := w.until("both polled", func(rs []replicaset.Replica) bool {
		return has(rs, "l", models("qwen2.5-0.5b", "")) && has(rs, "v", models("llama-3.1-8b", ""))
	})
	for _, r := range rs {
		if want := r.Name == "l"; r.AnyModel != want {
			t.Errorf("%s: AnyModel %v, want %v", r.Name, r.AnyModel, want)
		}
	}
}
