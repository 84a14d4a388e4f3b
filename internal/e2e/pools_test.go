package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/llm-ring/llm-ring/internal/config"
	"github.com/llm-ring/llm-ring/internal/discovery"
	"github.com/llm-ring/llm-ring/internal/model"
	"github.com/llm-ring/llm-ring/internal/replica"
	"github.com/llm-ring/llm-ring/internal/replicaset"
	"github.com/llm-ring/llm-ring/internal/router"
)

// Many models behind one router (issue 23), live: simulated vLLM replicas
// serving two base models, one of them with four LoRA adapters in two
// adapter slots, the router in front, and the official OpenAI Go SDK
// choosing the model per request.
const (
	modelLlama = "llama-3.1-8b-instruct"
	modelQwen  = "qwen2.5-7b-instruct"
)

var loras = []string{"sql-lora", "chat-lora", "tl-lora", "x-lora"}

// poolStack starts 3 replicas of modelLlama (with loras) and 2 of
// modelQwen, and a router whose static replicas list their models as
// discovery would (GET /v1/models), scraping their LoRA state.
func poolStack(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var rs []replicaset.Replica
	start := func(prefix string, n int, base string, adapters []string) {
		mc := model.DefaultConfig()
		mc.Engine = model.EngineVLLM
		var as []replica.Adapter
		models := []replicaset.Model{{Name: base}}
		if len(adapters) > 0 {
			mc.MaxLoras = 2
			for _, a := range adapters {
				as = append(as, replica.Adapter{Name: a, Base: base})
				models = append(models, replicaset.Model{Name: a, Parent: base})
			}
		}
		host, err := replica.NewHost(replica.Options{Model: mc, Speed: 200, API: replica.APIVLLM, CacheReport: true,
			Models: []string{base}, Adapters: as})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { host.Close() })
		for i := range n {
			name := fmt.Sprintf("%s-%d", prefix, i)
			r, err := host.Add(name, 0)
			if err != nil {
				t.Fatal(err)
			}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			go replica.Serve(ctx, ln, r)
			rs = append(rs, replicaset.Replica{Name: name, URL: "http://" + ln.Addr().String(), Models: models})
		}
	}
	start("llama", 3, modelLlama, loras)
	start("qwen", 2, modelQwen, nil)
	cfg, err := config.Load("../../config/router.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Discovery.Static = rs
	cfg.Signals.Engine = replica.APIVLLM
	cfg.Signals.Interval = config.Duration(20 * time.Millisecond)
	cfg.Models.Aliases = map[string]string{"llama": modelLlama}
	rt, err := router.New(router.Options{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go rt.Serve(ctx, ln, discovery.Static(rs))
	url := "http://" + ln.Addr().String()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if resp, err := http.Get(url + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the router never became ready")
		}
	}
	return url
}

// TestPoolsOpenAISDK: the SDK lists the models (the union, with each pool's
// size), chats with each base model and adapter (plain and streamed), and
// every request lands in its model's pool; the conversations of one
// adapter stay on the replica that has it resident; an alias works; an
// unknown model is the SDK's 404 model_not_found.
func TestPoolsOpenAISDK(t *testing.T) {
	url := poolStack(t)
	client := openai.NewClient(option.WithBaseURL(url+"/v1"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	ctx := context.Background()

	page, err := client.Models.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sizes := map[string]int{}
	for _, m := range page.Data {
		var extra struct {
			Replicas int `json:"replicas"`
		}
		json.Unmarshal([]byte(m.RawJSON()), &extra)
		sizes[m.ID] = extra.Replicas
	}
	want := map[string]int{modelLlama: 3, modelQwen: 2}
	for _, a := range loras {
		want[a] = 3
	}
	if fmt.Sprint(sizes) != fmt.Sprint(want) {
		t.Errorf("models listed %v, want %v", sizes, want)
	}

	send := func(model, conv string, stream bool) string {
		t.Helper()
		params := openai.ChatCompletionNewParams{Model: model, MaxTokens: openai.Int(8),
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Conversation " + conv + ": what is a LoRA adapter?")}}
		var resp *http.Response
		if !stream {
			c, err := client.Chat.Completions.New(ctx, params, option.WithResponseInto(&resp))
			if err != nil || len(c.Choices) == 0 || c.Choices[0].Message.Content == "" {
				t.Fatalf("%s %s: %v %+v", model, conv, err, c)
			}
		} else {
			s := client.Chat.Completions.NewStreaming(ctx, params, option.WithResponseInto(&resp))
			n := 0
			for s.Next() {
				n++
			}
			if err := s.Err(); err != nil || n < 2 {
				t.Fatalf("%s %s (stream): %v after %d chunks", model, conv, err, n)
			}
		}
		return resp.Header.Get(router.HeaderRoutedTo)
	}
	pool := map[string]string{modelLlama: "llama-", "llama": "llama-", modelQwen: "qwen-"}
	for _, a := range loras {
		pool[a] = "llama-"
	}
	// Two adapters (no more than a replica's slots, so that none is
	// evicted): every new conversation of an adapter goes where it is
	// resident, while the base model's spread over the pool.
	home := map[string]string{} // adapter -> the replica its conversations go to
	spread := map[string]bool{}
	for i := range 6 {
		for _, m := range []string{modelLlama, modelQwen, "llama", loras[0], loras[1]} {
			to := send(m, fmt.Sprintf("%s-%d", m, i), i%2 == 1)
			if !strings.HasPrefix(to, pool[m]) {
				t.Fatalf("%s routed to %s, outside its pool", m, to)
			}
			if m == modelLlama || m == "llama" {
				spread[to] = true
			}
			if !slices.Contains(loras, m) {
				continue
			}
			if h, ok := home[m]; ok && h != to {
				t.Errorf("%s conversation %d on %s, the adapter is resident on %s", m, i, to, h)
			}
			home[m] = to
		}
	}
	if len(spread) < 2 {
		t.Errorf("the base model's conversations all went to %v", spread)
	}
	for _, m := range loras[2:] { // the other adapters: in the pool too
		if to := send(m, m, false); !strings.HasPrefix(to, "llama-") {
			t.Fatalf("%s routed to %s, outside its pool", m, to)
		}
	}

	_, err = client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "gpt-5",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusNotFound || apiErr.Code != "model_not_found" ||
		apiErr.Param != "model" || !strings.Contains(apiErr.Message, modelQwen) {
		t.Fatalf("unknown model: %v", err)
	}
}
