package router

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llm-ring/llm-ring/internal/config"
	"github.com/llm-ring/llm-ring/internal/discovery"
	"github.com/llm-ring/llm-ring/internal/replicaset"
	"github.com/llm-ring/llm-ring/internal/state"
)

type stateReplica = state.ReplicaStatus

// modelReplica is a replica serving some models (and adapters) as vLLM
// does: it refuses a model it does not serve with 404, records the body of
// every request it serves, lists its models on GET /v1/models and reports
// its adapters on /metrics (vllm:lora_requests_info).
type modelReplica struct {
	name   string
	models []replicaset.Model
	srv    *httptest.Server

	mu     sync.Mutex
	bodies []string // the bodies it served, in order
	wrong  int      // requests for a model it does not serve
	lora   string   // its vllm:lora_requests_info labels
}

func newModelReplica(t testing.TB, name string, models ...replicaset.Model) *modelReplica {
	m := &modelReplica{name: name, models: models}
	m.srv = httptest.NewServer(http.HandlerFunc(m.serve))
	t.Cleanup(m.srv.Close)
	return m
}

func (m *modelReplica) replica() replicaset.Replica {
	return replicaset.Replica{Name: m.name, URL: m.srv.URL, Engine: "vllm", Models: m.models}
}

func (m *modelReplica) serves(model string) bool {
	if m.models == nil {
		return true // unknown: serves anything (the catch-all pool)
	}
	return slices.ContainsFunc(m.models, func(x replicaset.Model) bool { return x.Name == model })
}

func (m *modelReplica) serve(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/health":
		return
	case "/metrics":
		m.mu.Lock()
		lora := m.lora
		m.mu.Unlock()
		fmt.Fprint(w, "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 0\n"+
			"# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting 0\n")
		if lora != "" {
			fmt.Fprintf(w, "# TYPE vllm:lora_requests_info gauge\nvllm:lora_requests_info{%s} 1.7e9\n", lora)
		}
		return
	case "/v1/models":
		var data []string
		for _, x := range m.models {
			data = append(data, fmt.Sprintf(`{"id":%q,"object":"model","owned_by":"vllm","max_model_len":4096}`, x.Name))
		}
		fmt.Fprintf(w, `{"object":"list","data":[%s]}`, strings.Join(data, ","))
		return
	}
	body, _ := io.ReadAll(r.Body)
	var req struct {
		Model  string `json:"model"`
		Stream bool   `json:"stream"`
	}
	json.Unmarshal(body, &req)
	m.mu.Lock()
	m.bodies = append(m.bodies, string(body))
	if !m.serves(req.Model) {
		m.wrong++
		m.mu.Unlock()
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprintf(w, `{"error":{"message":"The model %s does not exist.","type":"NotFoundError","code":404}}`, req.Model)
		return
	}
	m.mu.Unlock()
	w.Header().Set("x-served-model", req.Model)
	usage := `"usage":{"prompt_tokens":20,"completion_tokens":2,"total_tokens":22}`
	if req.Stream {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "data: {\"model\":%q,\"choices\":[{\"index\":0,\"delta\":{\"content\":\"ok\"}}]}\n\n", req.Model)
		fmt.Fprintf(w, "data: {\"model\":%q,\"choices\":[],%s}\n\ndata: [DONE]\n\n", req.Model, usage)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"id":"c","object":"chat.completion","model":%q,"choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],%s}`, req.Model, usage)
}

// got returns the bodies served and the refused requests.
func (m *modelReplica) got() ([]string, int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.bodies), m.wrong
}

// poolRouter starts a router on rs (with Serve: health checks and signals
// run) and returns its client URL.
func poolRouter(t *testing.T, rs []replicaset.Replica, edit ...func(*config.Router)) (*Router, string) {
	t.Helper()
	rt, err := New(Options{Config: testConfig(t, "llm-aware", rs, edit...)})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- rt.Serve(ctx, ln, discovery.Static(rs)) }()
	t.Cleanup(func() { cancel(); <-served })
	url := "http://" + ln.Addr().String()
	waitUntil(t, "the router's pools", func() bool { return rt.Pools().Pool("") != nil && len(rt.view().Replicas) == len(rs) })
	return rt, url
}

func waitUntil(t testing.TB, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !ok(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func chat(t testing.TB, url, model, conv string, stream bool) (int, http.Header, string) {
	t.Helper()
	m := ""
	if model != "" {
		m = fmt.Sprintf(`"model":%q,`, model)
	}
	body := fmt.Sprintf(`{%s"messages":[{"role":"user","content":"hello from %s"}],"temperature":0.70,"stream":%v}`, m, conv, stream)
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("x-conversation-id", conv)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// A request for a model no pool serves gets 404 in OpenAI's shape, listing
// the models served; a request naming none, with two pools and no
// default, too. Nothing reaches a replica.
func TestUnknownModel(t *testing.T) {
	a := newModelReplica(t, "a-0", replicaset.Model{Name: "model-a"})
	b := newModelReplica(t, "b-0", replicaset.Model{Name: "model-b"}, replicaset.Model{Name: "sql-lora", Parent: "model-b"})
	_, url := poolRouter(t, []replicaset.Replica{a.replica(), b.replica()})
	for _, tc := range []struct{ model, msg string }{
		{"gpt-5", "the model `gpt-5` does not exist; models served: model-a, model-b, sql-lora"},
		{"", "the request names no model and no default model is configured; models served: model-a, model-b, sql-lora"},
	} {
		code, _, body := chat(t, url, tc.model, "c1", false)
		var got struct {
			Error map[string]any `json:"error"`
		}
		if err := json.Unmarshal([]byte(body), &got); code != http.StatusNotFound || err != nil {
			t.Fatalf("model %q: %d %s", tc.model, code, body)
		}
		want := map[string]any{"message": tc.msg, "type": "invalid_request_error", "param": "model", "code": "model_not_found"}
		if fmt.Sprint(got.Error) != fmt.Sprint(want) {
			t.Errorf("model %q: error %v, want %v", tc.model, got.Error, want)
		}
	}
	for _, m := range []*modelReplica{a, b} {
		if bodies, _ := m.got(); len(bodies) != 0 {
			t.Errorf("%s served %d requests for unknown models", m.name, len(bodies))
		}
	}
}

// Requests for model B never reach a replica serving only A (and the
// other way round), over many conversations, streamed or not; each pool's
// requests spread over its own replicas; the body goes upstream as sent.
func TestModelsStayInTheirPools(t *testing.T) {
	a0 := newModelReplica(t, "a-0", replicaset.Model{Name: "model-a"})
	a1 := newModelReplica(t, "a-1", replicaset.Model{Name: "model-a"})
	b0 := newModelReplica(t, "b-0", replicaset.Model{Name: "model-b"})
	both := newModelReplica(t, "ab", replicaset.Model{Name: "model-a"}, replicaset.Model{Name: "model-b"})
	rt, url := poolRouter(t, []replicaset.Replica{a0.replica(), a1.replica(), b0.replica(), both.replica()})
	for i := range 60 {
		model := []string{"model-a", "model-b"}[i%2]
		code, h, body := chat(t, url, model, fmt.Sprintf("conv-%d", i), i%3 == 0)
		if code != 200 || h.Get("x-served-model") != model {
			t.Fatalf("request %d for %s: %d %v %s", i, model, code, h, body)
		}
	}
	for _, m := range []*modelReplica{a0, a1, b0, both} {
		bodies, wrong := m.got()
		if wrong != 0 {
			t.Errorf("%s got %d requests for a model it does not serve", m.name, wrong)
		}
		if len(bodies) == 0 {
			t.Errorf("%s served nothing: the pool did not spread", m.name)
		}
		for _, b := range bodies {
			if !strings.Contains(b, `"temperature":0.70`) {
				t.Errorf("%s: body changed on the way: %s", m.name, b)
			}
		}
	}
	// GET /v1/models: the union, each with its pool size, the replicas'
	// own cards kept.
	resp, err := http.Get(url + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Data []struct {
			ID       string `json:"id"`
			OwnedBy  string `json:"owned_by"`
			Replicas int    `json:"replicas"`
		} `json:"data"`
	}
	json.NewDecoder(resp.Body).Decode(&list)
	resp.Body.Close()
	if got := fmt.Sprint(list.Data); got != "[{model-a vllm 3} {model-b vllm 2}]" {
		t.Errorf("GET /v1/models = %s", got)
	}
	// /replicas shows each replica's models and pools, and the pools.
	rec := httptest.NewRecorder()
	rt.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/replicas", nil))
	var info ReplicasInfo
	json.Unmarshal(rec.Body.Bytes(), &info)
	if len(info.Replicas) != 4 || fmt.Sprintf("%s %v %v", info.Replicas[2].Name, info.Replicas[2].Models, info.Replicas[2].Pools) != "ab [model-a model-b] [model-a model-b]" {
		t.Errorf("/replicas: %s", rec.Body.String())
	}
	if len(info.Pools) != 3 || info.Pools[1].Model != "model-a" || info.Pools[1].Replicas != 3 {
		t.Errorf("/replicas pools: %+v", info.Pools)
	}
}

// A rewrite splits a name over two models per conversation: every turn of
// a conversation goes to the same target, both targets are used, and the
// body each replica gets names its model with everything else as the
// client sent it (streamed too, where the router also asks for usage). An
// alias and the default model rewrite the name as well.
func TestRewriteRewritesTheBody(t *testing.T) {
	a := newModelReplica(t, "a-0", replicaset.Model{Name: "model-a"})
	b := newModelReplica(t, "b-0", replicaset.Model{Name: "model-b"})
	_, url := poolRouter(t, []replicaset.Replica{a.replica(), b.replica()}, func(c *config.Router) {
		c.Models = config.Models{Default: "model-b", Aliases: map[string]string{"fast": "model-a"},
			Rewrites: []config.ModelRewrite{{From: "gpt-4o", To: []config.RewriteTarget{{Model: "model-a", Weight: 1}, {Model: "model-b", Weight: 1}}}}}
	})
	target := map[string]string{}
	for turn := range 3 {
		for i := range 20 {
			conv := fmt.Sprintf("conv-%d", i)
			code, h, body := chat(t, url, "gpt-4o", conv, turn == 1)
			if code != 200 {
				t.Fatalf("%s: %d %s", conv, code, body)
			}
			got := h.Get("x-served-model")
			if prev, ok := target[conv]; ok && prev != got {
				t.Fatalf("%s moved from %s to %s", conv, prev, got)
			}
			target[conv] = got
		}
	}
	counts := map[string]int{}
	for _, m := range target {
		counts[m]++
	}
	if counts["model-a"] == 0 || counts["model-b"] == 0 {
		t.Errorf("the split used one target only: %v", counts)
	}
	for _, tc := range []struct{ asked, want string }{{"fast", "model-a"}, {"", "model-b"}} {
		if code, h, body := chat(t, url, tc.asked, "alias", true); code != 200 || h.Get("x-served-model") != tc.want {
			t.Fatalf("model %q: %d %s %s", tc.asked, code, h.Get("x-served-model"), body)
		}
	}
	for _, m := range []*modelReplica{a, b} {
		bodies, _ := m.got()
		want := `{"model":"` + m.models[0].Name + `","messages":` // rewritten in place, or the default added first
		for _, body := range bodies {
			streamed := strings.Contains(body, `"stream":true`)
			if !strings.HasPrefix(body, want) || !strings.Contains(body, `"temperature":0.70`) ||
				streamed != strings.Contains(body, `"stream_options":{"include_usage":true}`) {
				t.Errorf("%s: upstream body %s", m.name, body)
			}
		}
	}
}

// Adapter preference through the router: replicas report their adapters
// on /metrics (vLLM's vllm:lora_requests_info), the scraper feeds them to
// the pool, and a request for an adapter goes to the replica that has it
// resident; an adapter resident nowhere goes to a replica with a free
// adapter slot, never to one that would have to evict.
func TestAdapterPreference(t *testing.T) {
	base := replicaset.Model{Name: "base"}
	lora := func(n string) replicaset.Model { return replicaset.Model{Name: n, Parent: "base"} }
	full := newModelReplica(t, "full", base, lora("sql-lora"), lora("new-lora"), lora("x-lora"))
	free := newModelReplica(t, "free", base, lora("sql-lora"), lora("new-lora"), lora("y-lora"))
	hot := newModelReplica(t, "hot", base, lora("sql-lora"), lora("new-lora"), lora("z-lora"))
	full.lora = `max_lora="1",running_lora_adapters="x-lora",waiting_lora_adapters=""`
	free.lora = `max_lora="4",running_lora_adapters="y-lora",waiting_lora_adapters=""`
	hot.lora = `max_lora="2",running_lora_adapters="sql-lora,z-lora",waiting_lora_adapters=""`
	rt, url := poolRouter(t, []replicaset.Replica{full.replica(), free.replica(), hot.replica()}, func(c *config.Router) {
		c.Signals.Interval = config.Duration(10 * time.Millisecond)
	})
	waitUntil(t, "the adapters reported", func() bool {
		p := rt.Pools().Pool("base")
		if p == nil {
			return false
		}
		st := p.Table().Status()
		return len(st.Replicas) == 3 && !slices.ContainsFunc(st.Replicas, func(x stateReplica) bool { return !x.Reported.Adapters.Has })
	})
	for i := range 12 {
		if code, h, body := chat(t, url, "sql-lora", fmt.Sprintf("sql-%d", i), i%2 == 0); code != 200 || h.Get(HeaderRoutedTo) != "hot" {
			t.Fatalf("sql-lora conversation %d: %d routed to %s (want hot, where it is resident): %s", i, code, h.Get(HeaderRoutedTo), body)
		}
	}
	code, h, body := chat(t, url, "new-lora", "new-0", false)
	if code != 200 || h.Get(HeaderRoutedTo) != "free" {
		t.Fatalf("new-lora: %d routed to %s (want free, the free slot; full must evict, hot has no slot left): %s", code, h.Get(HeaderRoutedTo), body)
	}
	// The adapter's name goes upstream as the client sent it (vLLM serves
	// an adapter by its name in "model").
	bodies, _ := hot.got()
	if len(bodies) != 12 || !strings.HasPrefix(bodies[0], `{"model":"sql-lora",`) {
		t.Errorf("hot got %d bodies, first %q", len(bodies), bodies[0])
	}
}

// The admin API sets each pool's policy: ?model= names the pool (an alias
// its model's), none the catch-all; an unknown model is a 404 naming the
// pools; a reset of one pool leaves the others' memory.
func TestAdminPerPool(t *testing.T) {
	a := newModelReplica(t, "a-0", replicaset.Model{Name: "model-a"})
	b := newModelReplica(t, "b-0", replicaset.Model{Name: "model-b"})
	rt, url := poolRouter(t, []replicaset.Replica{a.replica(), b.replica()}, withAdmin(t, "s3cret"), func(c *config.Router) {
		c.Models = config.Models{Aliases: map[string]string{"fast": "model-a"},
			Pools: map[string]config.ModelPool{"model-b": {Policy: "bounded"}}}
	})
	admin := httptest.NewServer(rt.AdminHandler())
	defer admin.Close()
	do := func(method, path, body string) (int, string) {
		req, _ := http.NewRequest(method, admin.URL+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer s3cret")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	policyOf := func(q string) string {
		code, body := do(http.MethodGet, "/admin/policy"+q, "")
		var s PolicySettings
		if err := json.Unmarshal([]byte(body), &s); code != 200 || err != nil {
			t.Fatalf("GET /admin/policy%s: %d %s", q, code, body)
		}
		return s.Model + ":" + s.Policy
	}
	if got := policyOf(""); got != ":llm-aware" {
		t.Errorf("catch-all: %s", got)
	}
	if got := policyOf("?model=model-b"); got != "model-b:bounded" {
		t.Errorf("model-b (configured bounded): %s", got)
	}
	if code, body := do(http.MethodPut, "/admin/policy?model=fast", `{"policy":"consistent"}`); code != 200 || !strings.Contains(body, `"model": "model-a"`) {
		t.Fatalf("PUT ?model=fast: %d %s", code, body)
	}
	if got := policyOf("?model=model-a") + " " + policyOf("?model=model-b") + " " + policyOf(""); got != "model-a:consistent model-b:bounded :llm-aware" {
		t.Errorf("after the PUT: %s", got)
	}
	if code, body := do(http.MethodGet, "/admin/policy?model=nope", ""); code != 404 || !strings.Contains(body, `\"model-a\"`) {
		t.Errorf("unknown pool: %d %s", code, body)
	}
	for i := range 4 {
		chat(t, url, []string{"model-a", "model-b"}[i%2], fmt.Sprintf("c%d", i), false)
	}
	memory := func(model string) int { return rt.Pools().Pool(model).Table().Status().Memory }
	waitUntil(t, "both pools remember", func() bool { return memory("model-a") == 2 && memory("model-b") == 2 })
	if code, _ := do(http.MethodPost, "/admin/reset?model=model-b", ""); code != 200 || memory("model-b") != 0 || memory("model-a") != 2 {
		t.Errorf("reset of model-b: %d, memory a=%d b=%d", code, memory("model-a"), memory("model-b"))
	}
	// The requests are counted under their pool's label.
	if got := testutilCount(rt, "model-a"); got != 2 {
		t.Errorf("llm_ring_requests_total{model=model-a} = %v, want 2", got)
	}
	// Without ?model= a PUT switches every pool (the experiment runner's
	// switch), and a pool created later (a model discovered after it)
	// takes it too.
	if code, body := do(http.MethodPut, "/admin/policy", `{"policy":"round-robin","reset":true}`); code != 200 || !strings.Contains(body, `"policy": "round-robin"`) {
		t.Fatalf("PUT for every pool: %d %s", code, body)
	}
	if got := policyOf("?model=model-a") + " " + policyOf("?model=model-b") + " " + policyOf(""); got != "model-a:round-robin model-b:round-robin :round-robin" {
		t.Errorf("after the PUT for every pool: %s", got)
	}
	if memory("model-a") != 0 {
		t.Errorf("the reset did not reach model-a: memory %d", memory("model-a"))
	}
	c := newModelReplica(t, "c-0", replicaset.Model{Name: "model-c"})
	rt.SetReplicas([]replicaset.Replica{a.replica(), b.replica(), c.replica()})
	if got := policyOf("?model=model-c"); got != "model-c:round-robin" {
		t.Errorf("a pool created after the PUT: %s", got)
	}
	if code, body := do(http.MethodPut, "/admin/policy", `{"policy":"no-such"}`); code != 400 || policyOf("?model=model-a") != "model-a:round-robin" {
		t.Errorf("a bad update for every pool: %d %s; model-a now %s", code, body, policyOf("?model=model-a"))
	}
}

// testutilCount sums llm_ring_requests_total over the series of a model
// label.
func testutilCount(rt *Router, label string) float64 {
	mfs, _ := rt.Registry().Gather()
	var n float64
	for _, mf := range mfs {
		if mf.GetName() != "llm_ring_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "model" && l.GetValue() == label {
					n += m.GetCounter().GetValue()
				}
			}
		}
	}
	return n
}

// Without models (replicas with no model list, no models section) every
// request goes to the catch-all pool whatever it names, and its body
// reaches the replica byte for byte; a request routed by load (embeddings)
// with pools goes to its model's pool.
func TestLegacyAndByLoad(t *testing.T) {
	any0 := newModelReplica(t, "any-0")
	_, url := poolRouter(t, []replicaset.Replica{any0.replica()})
	body := `{ "model" : "whatever-I-like",  "messages":[{"role":"user","content":"x"}], "n":1 }`
	resp, err := http.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got, _ := any0.got(); resp.StatusCode != 200 || len(got) != 1 || got[0] != body {
		t.Fatalf("legacy: %d, the replica got %q", resp.StatusCode, got)
	}

	a := newModelReplica(t, "a-0", replicaset.Model{Name: "model-a"})
	b := newModelReplica(t, "b-0", replicaset.Model{Name: "model-b"})
	_, url = poolRouter(t, []replicaset.Replica{a.replica(), b.replica()})
	for range 4 {
		resp, err := http.Post(url+"/v1/embeddings", "application/json", strings.NewReader(`{"input":"x","model":"model-b"}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get(HeaderRoutedTo) != "b-0" {
			t.Fatalf("embeddings for model-b: %d on %q", resp.StatusCode, resp.Header.Get(HeaderRoutedTo))
		}
	}
	resp, err = http.Post(url+"/v1/embeddings", "application/json", strings.NewReader(`{"input":"x","model":"nope"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("embeddings for an unknown model: %d", resp.StatusCode)
	}
}

// The endpoint picker's Flight refuses an unknown model as the proxy does
// (404, the message listing the models), and routes a known one in its
// pool.
func TestFlightUnknownModel(t *testing.T) {
	a := newModelReplica(t, "a-0", replicaset.Model{Name: "model-a"})
	b := newModelReplica(t, "b-0", replicaset.Model{Name: "model-b"})
	rt, _ := poolRouter(t, []replicaset.Replica{a.replica(), b.replica()})
	_, err := rt.NewFlight(context.Background(), http.MethodPost, "/v1/chat/completions", http.Header{},
		[]byte(`{"model":"nope","messages":[{"role":"user","content":"x"}]}`))
	var fe *FlightError
	if !errors.As(err, &fe) || fe.Status != http.StatusNotFound || !strings.Contains(fe.Msg, "models served: model-a, model-b") {
		t.Fatalf("unknown model: %v", err)
	}
	fl, err := rt.NewFlight(context.Background(), http.MethodPost, "/v1/chat/completions", http.Header{},
		[]byte(`{"model":"model-b","messages":[{"role":"user","content":"x"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer fl.Finish(context.Background())
	if err := fl.Route(); err != nil || fl.Replica().Name != "b-0" {
		t.Fatalf("model-b: %v on %q", err, fl.Replica().Name)
	}
}
