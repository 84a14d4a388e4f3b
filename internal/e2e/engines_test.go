package e2e

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/prometheus/common/expfmt"
	pmodel "github.com/prometheus/common/model"

	"github.com/llm-ring/llm-ring/internal/replica"
	"github.com/llm-ring/llm-ring/internal/router"
)

// promptTokens reads the router's llm_ring_prompt_tokens_total{kind} from
// its /metrics: what it learned from the replicas' answers.
func promptTokens(t *testing.T, url, kind string) float64 {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(pmodel.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range fams["llm_ring_prompt_tokens_total"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "kind" && l.GetValue() == kind {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no llm_ring_prompt_tokens_total{kind=%q}", kind)
	return 0
}

// TestSDKEngineFaces (issue 14): through the router, behind each engine's
// face, the OpenAI Go SDK lists the models, embeds, and streams a chat
// without asking for usage. The client gets no usage (it did not ask),
// and the router still learns that turns 2 and 3 reused the cache.
func TestSDKEngineFaces(t *testing.T) {
	for _, api := range replica.APIs {
		t.Run(api, func(t *testing.T) {
			url := stackAPI(t, 2, "llm-aware", api)
			client := openai.NewClient(option.WithBaseURL(url+"/v1"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
			ctx := context.Background()

			models, err := client.Models.List(ctx)
			if err != nil || len(models.Data) != 1 || models.Data[0].ID == "" {
				t.Fatalf("models.list: %v %+v", err, models)
			}
			model := models.Data[0].ID

			emb, err := client.Embeddings.New(ctx, openai.EmbeddingNewParams{Model: model,
				Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: []string{"hashing rings", "bread"}}})
			if err != nil || len(emb.Data) != 2 || len(emb.Data[0].Embedding) == 0 {
				t.Fatalf("embeddings: %v %+v", err, emb)
			}

			msgs := []openai.ChatCompletionMessageParamUnion{
				openai.SystemMessage("You are a concise assistant for platform engineers."),
				openai.UserMessage("Why do chats resend their whole history?"),
			}
			var home string
			for turn := 1; turn <= 3; turn++ {
				before := promptTokens(t, url, "cached")
				var resp *http.Response
				s := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: model, Messages: msgs,
					MaxTokens: openai.Int(16)}, option.WithResponseInto(&resp))
				var acc openai.ChatCompletionAccumulator
				for s.Next() {
					c := s.Current()
					if c.JSON.Usage.Valid() && c.Usage.PromptTokens > 0 {
						t.Errorf("turn %d: a usage the client did not ask for: %s", turn, c.RawJSON())
					}
					acc.AddChunk(c)
				}
				if err := s.Err(); err != nil {
					t.Fatalf("turn %d: %v", turn, err)
				}
				answer := acc.Choices[0].Message.Content
				if strings.TrimSpace(answer) == "" {
					t.Fatalf("turn %d: empty answer", turn)
				}
				if to := resp.Header.Get(router.HeaderRoutedTo); home == "" {
					home = to
				} else if to != home {
					t.Errorf("turn %d on %s, turn 1 on %s", turn, to, home)
				}
				if turn > 1 {
					// The router settles before the stream's end reaches the
					// client; its metrics follow when the request is logged.
					var cached float64
					for range 1000 {
						if cached = promptTokens(t, url, "cached"); cached > before {
							break
						}
						time.Sleep(5 * time.Millisecond)
					}
					if cached <= before {
						t.Errorf("turn %d: the router learned no cached tokens (%v before, %v after)", turn, before, cached)
					}
				}
				msgs = append(msgs, openai.AssistantMessage(answer), openai.UserMessage("Tell me more, briefly."))
			}
		})
	}
}

// TestNodeSDK (issue 14) runs the official OpenAI Node.js SDK
// (hack/sdk-node/check.mjs, openai 6.49.0 from the npm registry) through
// the router: models.list, chat plain and streamed, completions,
// embeddings. It needs node and `npm ci` in hack/sdk-node (.ci/run does
// it); without them it is skipped, except under CI=true, where it fails.
func TestNodeSDK(t *testing.T) {
	dir, err := filepath.Abs("../../hack/sdk-node")
	if err != nil {
		t.Fatal(err)
	}
	node, err := exec.LookPath("node")
	if _, serr := os.Stat(filepath.Join(dir, "node_modules", "openai")); err != nil || serr != nil {
		msg := "node or hack/sdk-node/node_modules missing: run (cd hack/sdk-node && npm ci --no-audit --no-fund)"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	url := stack(t, 2, "llm-aware")
	cmd := exec.Command(node, "check.mjs", url+"/v1")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	t.Logf("node check.mjs:\n%s", out)
	if err != nil {
		t.Fatalf("node check.mjs: %v", err)
	}
	if strings.Contains(string(out), "FAIL") || !strings.Contains(string(out), "PASS models.list") {
		t.Errorf("not every call passed")
	}
}
