package replica

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llm-ring/llm-ring/internal/engine"
	"github.com/llm-ring/llm-ring/internal/model"
	"github.com/llm-ring/llm-ring/internal/replicaset"
	"github.com/llm-ring/llm-ring/internal/signals"
)

// servedOpts: a vLLM replica serving models a and b, adapters x and y on
// a, z on b, with one adapter slot.
func servedOpts(api string) func(*Options) {
	return func(o *Options) {
		o.API = api
		o.Model.Engine = model.EngineVLLM
		o.Model.MaxLoras = 1
		o.Models = []string{"a", "b"}
		o.Adapters = []Adapter{{Name: "x", Base: "a"}, {Name: "y"}, {Name: "z", Base: "b"}}
	}
}

func chatFor(m string) string {
	return `{"model":"` + m + `","messages":[{"role":"user","content":"Hi"}],"max_tokens":3}`
}

func TestModelsListsModelsAndAdapters(t *testing.T) {
	r := newTestReplica(t, servedOpts(APIVLLM))
	var list struct {
		Object string `json:"object"`
		Data   []struct {
			ID, Object, OwnedBy, Root string
			Parent                    *string `json:"parent"`
			MaxModelLen               *int    `json:"max_model_len"`
		} `json:"data"`
	}
	rec := do(t, r, "GET", "/v1/models", "")
	if err := json.Unmarshal(rec.Body.Bytes(), &list); err != nil || rec.Code != 200 {
		t.Fatalf("%d %s: %v", rec.Code, rec.Body, err)
	}
	var got []string
	for _, c := range list.Data {
		p := "-"
		if c.Parent != nil {
			p = *c.Parent
		}
		got = append(got, fmt.Sprintf("%s<%s root=%s len=%v", c.ID, p, c.Root, c.MaxModelLen != nil))
	}
	want := "a<- root=a len=true b<- root=b len=true x<a root=x len=false y<a root=y len=false z<b root=z len=false"
	if strings.Join(got, " ") != want || list.Object != "list" {
		t.Fatalf("cards %q, want %q", strings.Join(got, " "), want)
	}
	if !strings.Contains(rec.Body.String(), `"parent":null`) {
		t.Errorf("base cards lack parent null: %s", rec.Body)
	}
}

func TestUnknownModelIs404LikeVLLM(t *testing.T) {
	r := newTestReplica(t, servedOpts(APIVLLM))
	for _, path := range []string{"/v1/chat/completions", "/v1/completions", "/v1/messages"} {
		body := chatFor("nope")
		if path == "/v1/completions" {
			body = `{"model":"nope","prompt":"Hi","max_tokens":3}`
		}
		rec := do(t, r, "POST", path, body)
		want := `{"error":{"message":"The model ` + "`nope`" + ` does not exist.","type":"NotFoundError","param":"model","code":404}}` + "\n"
		if rec.Code != 404 || rec.Body.String() != want {
			t.Errorf("%s: %d %s, want 404 %s", path, rec.Code, rec.Body, want)
		}
	}
	for _, m := range []string{"a", "b", "x", "z", ""} {
		rec := do(t, r, "POST", "/v1/chat/completions", chatFor(m))
		want := m
		if m == "" {
			want = "a" // the first model
		}
		if rec.Code != 200 || !strings.Contains(rec.Body.String(), `"model":"`+want+`"`) {
			t.Errorf("model %q: %d %s", m, rec.Code, rec.Body)
		}
	}
	// llama.cpp's face answers in llama.cpp's error shape.
	l := newTestReplica(t, func(o *Options) { o.Models = []string{"a"} })
	if rec := do(t, l, "POST", "/v1/chat/completions", chatFor("nope")); rec.Code != 404 || !strings.Contains(rec.Body.String(), `"type":"not_found_error"`) {
		t.Errorf("llama.cpp face: %d %s", rec.Code, rec.Body)
	}
}

func TestAnyModelWithoutModels(t *testing.T) {
	r := newTestReplica(t, func(o *Options) { o.API = APIVLLM })
	if rec := do(t, r, "POST", "/v1/chat/completions", chatFor("whatever")); rec.Code != 200 || !strings.Contains(rec.Body.String(), `"model":"whatever"`) {
		t.Fatalf("no --models: %d %s", rec.Code, rec.Body)
	}
	models := do(t, r, "GET", "/v1/models", "").Body.String()
	if !strings.Contains(models, `"id":"`+DefaultAlias+`"`) || strings.Count(models, `"id"`) != 1 {
		t.Fatalf("models %s", models)
	}
}

func TestServedOptionsAreChecked(t *testing.T) {
	for _, o := range []Options{
		{Models: []string{"a", "a"}},
		{Models: []string{"a"}, Adapters: []Adapter{{Name: "x", Base: "nope"}}},
		{Models: []string{"a"}, Adapters: []Adapter{{Name: "a"}}},
		{Adapters: []Adapter{{Name: ""}}},
	} {
		o.Model = model.DefaultConfig()
		if h, err := NewHost(o); err == nil {
			h.Close()
			t.Errorf("%+v accepted", o)
		}
	}
	if _, err := ParseAdapters([]string{"x:a", ":a"}); err == nil {
		t.Error("ParseAdapters accepted an empty name")
	}
	if a, err := ParseAdapters([]string{"x:a", "y"}); err != nil || a[0] != (Adapter{"x", "a"}) || a[1] != (Adapter{"y", ""}) {
		t.Errorf("ParseAdapters: %+v %v", a, err)
	}
}

// With one adapter slot held by x's running request, a request for y
// waits: /metrics says so in vLLM's vllm:lora_requests_info, stamped with
// the wall clock; when x's request ends, y's runs.
func TestLoRARequestsInfoOnMetrics(t *testing.T) {
	clk := NewManualClock(epoch)
	opts := Options{Model: model.DefaultConfig(), Speed: 1, Clock: clk}
	servedOpts(APIVLLM)(&opts)
	h, err := NewHost(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	r, err := h.Add("v", 0)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	codes := make([]int, 2)
	send := func(i int, m string) {
		wg.Add(1)
		go func() { defer wg.Done(); codes[i] = do(t, r, "POST", "/v1/chat/completions", chatFor(m)).Code }()
	}
	ts := fmt.Sprintf("%g", float64(epoch.UnixNano())/1e9)
	send(0, "x")
	waitMetric(t, r, `vllm:lora_requests_info{max_lora="1",running_lora_adapters="x",waiting_lora_adapters=""} `+ts)
	send(1, "y")
	waitMetric(t, r, `vllm:lora_requests_info{max_lora="1",running_lora_adapters="x",waiting_lora_adapters="y"} `+ts)
	// The router's scraper (internal/signals, vLLM preset) reads the same.
	m, _ := signals.Preset(signals.PresetVLLM)
	s, err := signals.Parse(strings.NewReader(do(t, r, "GET", "/metrics", "").Body.String()), m)
	if err != nil || s.Adapters == nil || s.Adapters.Max != 1 || !slices.Equal(s.Adapters.Running, []string{"x"}) ||
		!slices.Equal(s.Adapters.Waiting, []string{"y"}) {
		t.Fatalf("scraped %+v (%v), want running [x], waiting [y], max 1", s.Adapters, err)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for {
		select {
		case <-done:
			if codes[0] != 200 || codes[1] != 200 {
				t.Fatalf("codes %v", codes)
			}
			waitMetric(t, r, `running_lora_adapters="",waiting_lora_adapters=""}`)
			return
		case <-time.After(time.Millisecond):
			clk.Advance(100 * time.Millisecond)
		}
	}
}

// waitMetric polls /metrics (a bounded number of times) until it holds want.
func waitMetric(t *testing.T, r *Replica, want string) {
	t.Helper()
	var body string
	for i := 0; i < 2000; i++ {
		body = do(t, r, "GET", "/metrics", "").Body.String()
		if strings.Contains(body, want) {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("metrics never showed %s:\n%s", want, body)
}

func TestSGLangLoRAPoolMetrics(t *testing.T) {
	r := newTestReplica(t, func(o *Options) {
		servedOpts(APISGLang)(o)
		o.Model.MaxLoras = 2
	})
	for _, m := range []string{"x", "z", "a"} {
		if rec := do(t, r, "POST", "/v1/chat/completions", chatFor(m)); rec.Code != 200 {
			t.Fatalf("%s: %d %s", m, rec.Code, rec.Body)
		}
	}
	// SGLang's own syntax names an adapter as base:adapter.
	if rec := do(t, r, "POST", "/v1/chat/completions", chatFor("a:y")); rec.Code != 200 {
		t.Fatalf("a:y: %d %s", rec.Code, rec.Body)
	}
	if rec := do(t, r, "POST", "/v1/chat/completions", chatFor("b:y")); rec.Code != 404 {
		t.Fatalf("b:y (y is a's): %d %s", rec.Code, rec.Body)
	}
	metrics := do(t, r, "GET", "/metrics", "").Body.String()
	for _, w := range []string{
		`sglang:lora_pool_slots_used{model_name="a"} 2`,
		`sglang:lora_pool_slots_total{model_name="a"} 2`,
		`sglang:lora_pool_utilization{model_name="a"} 1`,
	} {
		if !strings.Contains(metrics, w) {
			t.Errorf("metrics lack %s:\n%s", w, metrics)
		}
	}
	if strings.Contains(metrics, "lora_requests_info") {
		t.Error("sglang face exports vLLM's lora_requests_info")
	}
}

// Without adapter slots the vLLM face exports no LoRA series (vLLM only
// with LoRA enabled).
func TestNoLoRASeriesWithoutSlots(t *testing.T) {
	r := newTestReplica(t, func(o *Options) { o.API = APIVLLM; o.Model.Engine = model.EngineVLLM })
	if m := do(t, r, "GET", "/metrics", "").Body.String(); strings.Contains(m, "lora") {
		t.Fatalf("LoRA series without slots:\n%s", m)
	}
}

// The router's model-list reader (internal/engine, used by discovery)
// learns the replica's models and adapters from its GET /v1/models.
func TestDiscoveryReadsTheModelList(t *testing.T) {
	r := newTestReplica(t, servedOpts(APIVLLM))
	ms, err := engine.ParseModels(engine.ModelsOpenAI, do(t, r, "GET", "/v1/models", "").Body.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	want := []replicaset.Model{{Name: "a"}, {Name: "b"}, {Name: "x", Parent: "a"}, {Name: "y", Parent: "a"}, {Name: "z", Parent: "b"}}
	if !slices.Equal(ms, want) {
		t.Fatalf("parsed %+v, want %+v", ms, want)
	}
}
