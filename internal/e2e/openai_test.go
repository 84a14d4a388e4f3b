// Package e2e drives the whole live path — the official OpenAI Go SDK, the
// router, simulated llama.cpp replicas — on loopback, as a user would.
package e2e

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/llm-ring/llm-ring/internal/config"
	"github.com/llm-ring/llm-ring/internal/discovery"
	"github.com/llm-ring/llm-ring/internal/model"
	"github.com/llm-ring/llm-ring/internal/replica"
	"github.com/llm-ring/llm-ring/internal/replicaset"
	"github.com/llm-ring/llm-ring/internal/router"
)

// stack starts n simulated replicas and a router on loopback listeners and
// returns the router's base URL.
func stack(t *testing.T, n int, policy string) string {
	t.Helper()
	return stackAPI(t, n, policy, replica.APILlamaCpp)
}

// stackAPI is stack with replicas wearing the given engine's face (the
// vLLM and SGLang faces report cached tokens, as with
// --enable-prompt-tokens-details and --enable-cache-report).
func stackAPI(t *testing.T, n int, policy, api string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	host, err := replica.NewHost(replica.Options{Model: model.DefaultConfig(), Speed: 200, API: api, CacheReport: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { host.Close() })
	var rs []replicaset.Replica
	for i := range n {
		name := "llm-" + string(rune('0'+i))
		r, err := host.Add(name, 0)
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go replica.Serve(ctx, ln, r)
		rs = append(rs, replicaset.Replica{Name: name, URL: "http://" + ln.Addr().String()})
	}
	cfg, err := config.Load("../../config/router.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Policy, cfg.Discovery.Static = policy, rs
	cfg.Signals.Engine = api // the scraper reads the engine's metric names
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
	for { // until discovery has fed the ring
		if resp, err := http.Get(url + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
	}
	return url
}

// TestOpenAISDK: an unmodified OpenAI client (no conversation header)
// holds a three-turn chat, plain and streamed; every turn lands on the same
// replica, and turns 2 and 3 reuse the cache (usage.prompt_tokens_details).
func TestOpenAISDK(t *testing.T) {
	url := stack(t, 3, "llm-aware")
	client := openai.NewClient(option.WithBaseURL(url+"/v1"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	ctx := context.Background()
	for _, stream := range []bool{false, true} {
		msgs := []openai.ChatCompletionMessageParamUnion{
			openai.SystemMessage("You are a concise assistant for platform engineers."),
			openai.UserMessage(map[bool]string{false: "What does a KV cache hold?", true: "Why do chats resend history?"}[stream]),
		}
		var home string
		for turn := 1; turn <= 3; turn++ {
			params := openai.ChatCompletionNewParams{Model: "qwen2.5-0.5b", Messages: msgs, MaxTokens: openai.Int(24)}
			var resp *http.Response
			var answer string
			var usage openai.CompletionUsage
			if !stream {
				c, err := client.Chat.Completions.New(ctx, params, option.WithResponseInto(&resp))
				if err != nil {
					t.Fatalf("turn %d: %v", turn, err)
				}
				answer, usage = c.Choices[0].Message.Content, c.Usage
			} else {
				params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
				s := client.Chat.Completions.NewStreaming(ctx, params, option.WithResponseInto(&resp))
				var acc openai.ChatCompletionAccumulator
				chunks := 0
				for s.Next() {
					acc.AddChunk(s.Current())
					chunks++
				}
				if err := s.Err(); err != nil {
					t.Fatalf("turn %d (stream): %v", turn, err)
				}
				if chunks < 3 {
					t.Errorf("turn %d: only %d chunks: not streamed", turn, chunks)
				}
				answer, usage = acc.Choices[0].Message.Content, acc.Usage
			}
			to := resp.Header.Get(router.HeaderRoutedTo)
			if to == "" || resp.Header.Get(router.HeaderRouteReason) == "" {
				t.Fatalf("turn %d: no routing headers in %v", turn, resp.Header)
			}
			if home == "" {
				home = to
			} else if to != home {
				t.Errorf("stream=%v turn %d on %s, turn 1 on %s", stream, turn, to, home)
			}
			if strings.TrimSpace(answer) == "" || usage.CompletionTokens == 0 {
				t.Fatalf("turn %d: empty answer or usage: %q %+v", turn, answer, usage)
			}
			if turn > 1 && usage.PromptTokensDetails.CachedTokens*10 < usage.PromptTokens*7 {
				t.Errorf("stream=%v turn %d reused %d of %d prompt tokens, want ≥ 70%%", stream, turn,
					usage.PromptTokensDetails.CachedTokens, usage.PromptTokens)
			}
			msgs = append(msgs, openai.AssistantMessage(answer), openai.UserMessage("Tell me more, briefly."))
		}
	}
}
