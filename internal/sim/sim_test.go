package sim

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/llm-ring/llm-ring/internal/config"
	"github.com/llm-ring/llm-ring/internal/model"
	"github.com/llm-ring/llm-ring/internal/policy"
	"github.com/llm-ring/llm-ring/internal/record"
	"github.com/llm-ring/llm-ring/internal/traffic"
	"github.com/llm-ring/llm-ring/internal/wire"
)

// rowsOf collects the rows of a run.
type rowsOf []record.Request

func (r *rowsOf) Write(x *record.Request) error { *r = append(*r, *x); return nil }

// fixed is a Source of hand-made conversations.
type fixed []traffic.Conversation

func (f fixed) Conversation(i int) traffic.Conversation { return f[i] }

// digitsHash is a readable hash: the number at the end of the input
// ("c2" → 2, "17:llm-0" → 0, no digits → 0), so that mod-n puts
// conversation cK on replica K mod N.
func digitsHash(b []byte) uint64 {
	i := len(b)
	for i > 0 && b[i-1] >= '0' && b[i-1] <= '9' {
		i--
	}
	v, _ := strconv.ParseUint(string(b[i:]), 10, 64)
	return v
}

// tinyModel is a replica whose costs are easy to add up: one slot, 1 ms per
// token in a step and nothing else, answers of exactly 4 tokens.
func tinyModel(ramMiB int) model.Config {
	c := model.DefaultConfig()
	c.NParallel = 1
	c.CtxSize = 4096
	c.StepOverhead = 0
	c.TokenCost = time.Millisecond
	c.AttnCost = 0
	c.AnswerMin, c.AnswerMax = 4, 4
	c.CacheRAMMiB = ramMiB
	return c
}

func tinyProfile(convs, users int) traffic.Profile {
	return traffic.Profile{
		Name: "tiny", Conversations: convs, Concurrency: users, TurnsMin: 1, TurnsMax: 2,
		UserWordsMin: 1, UserWordsMax: 10, ThinkSMin: 0, ThinkSMax: 5,
		MaxTokens: 4, MaxContextTokens: 3500, SystemPrompts: 1,
	}
}

// promptOf returns the tokens the replica sees for turn t of c, given the
// answers of the earlier turns, and the answer it gives (4 tokens).
func promptOf(cfg model.Config, c *traffic.Conversation, t int, answers []string) ([]model.Token, string) {
	msgs, err := model.MessagesFromWire(traffic.Messages(c, t, answers))
	if err != nil {
		panic(err)
	}
	toks := model.ChatTokens(msgs)
	return toks, model.GenerateAnswer(cfg.Seed, model.PromptKey(toks), 4).Text
}

func commonPrefix(a, b []model.Token) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// TestTinyScenario: two replicas of one slot each, three conversations,
// mod-n with a readable hash (c0 and c2 on llm-0, c1 on llm-1), 1 ms per
// token. Every row is computed by hand from the prompt sizes:
//
//	c0 turn 1 at 0 ms on idle llm-0: prefill a1 tokens, then 3 decode steps.
//	c2 turn 1 at 5 ms: llm-0's only slot is busy, so it waits until c0's
//	   answer is done (a1+3 ms); it shares only the "<|im_start|>system\n"
//	   header (h tokens) with what the slot holds (another system prompt).
//	c1 turn 1 at 100 ms on idle llm-1.
//	c0 turn 2, 1 s after its answer: the slot now holds c2. Without a RAM
//	   cache c0's history is gone (cache_n = h); with one, c0's state was
//	   saved when c2 took the slot and is loaded back (cache_n = a1+3: the
//	   prompt and the answer but its last token, never decoded).
//	c2 turn 2, 3 s after its answer: the slot holds c0 now; the same story.
//
// With these texts a1 = 33, h = 3, c1 = 27 tokens: c2's first turn waits
// from 5 to 36 ms, prefills 24 tokens (first token at 60 ms, TTFT 55 ms)
// and ends at 63 ms (latency 58 ms).
func TestTinyScenario(t *testing.T) {
	convs := fixed{
		{ID: "c0", Index: 0, User: 0, System: "Alpha is a careful assistant.", Turns: []traffic.Turn{
			{User: "How do I plant tulips in autumn?", ThinkS: 0, MaxTokens: 4},
			{User: "And how deep?", ThinkS: 1, MaxTokens: 4}}},
		{ID: "c1", Index: 1, User: 1, System: "Bravo helps with money.", Turns: []traffic.Turn{
			{User: "What is a budget?", ThinkS: 0.1, MaxTokens: 4}}},
		{ID: "c2", Index: 2, User: 2, System: "Zulu answers briefly.", Turns: []traffic.Turn{
			{User: "Name three rivers in Europe.", ThinkS: 0.005, MaxTokens: 4},
			{User: "Which is the longest?", ThinkS: 3, MaxTokens: 4}}},
	}
	for _, tc := range []struct {
		name string
		ram  int // RAM prompt cache, MiB
	}{
		{"no RAM cache: a conversation that lost its slot starts over", 0},
		{"RAM cache: a conversation's state is saved and loaded back", 64},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tinyModel(tc.ram)
			a1t, a1Ans := promptOf(cfg, &convs[0], 0, nil)
			a2t, _ := promptOf(cfg, &convs[0], 1, []string{a1Ans})
			b1t, _ := promptOf(cfg, &convs[1], 0, nil)
			c1t, c1Ans := promptOf(cfg, &convs[2], 0, nil)
			c2t, _ := promptOf(cfg, &convs[2], 1, []string{c1Ans})
			a1, a2, b1, c1, c2 := len(a1t), len(a2t), len(b1t), len(c1t), len(c2t)
			h := commonPrefix(a1t, c1t) // "<|im_start|>system\n"
			if h != commonPrefix(a2t, c2t) || h >= 10 {
				t.Fatalf("test setup: the system prompts should share only the header, got %d and %d tokens",
					h, commonPrefix(a2t, c2t))
			}

			type row struct {
				replica                    string
				cacheN, promptN            int
				startMS, ttftMS, latencyMS float64
			}
			f := func(n int) float64 { return float64(n) }
			want := map[string]row{}
			// c0 turn 1: idle replica, whole prompt.
			c0t1End := f(a1 + 3)
			want["c0/1"] = row{"llm-0", 0, a1, 0, f(a1), c0t1End}
			// c2 turn 1: waits for c0, reuses the header only.
			c2t1End := c0t1End + f(c1-h+3)
			want["c2/1"] = row{"llm-0", h, c1 - h, 5, c0t1End + f(c1-h) - 5, c2t1End - 5}
			// c1 turn 1: alone on llm-1.
			want["c1/1"] = row{"llm-1", 0, b1, 100, f(b1), f(b1 + 3)}
			// c0 turn 2 and c2 turn 2: their history is cached only with the RAM cache.
			c0Cached, c2Cached := h, h
			if tc.ram > 0 {
				c0Cached, c2Cached = a1+3, c1+3
			}
			want["c0/2"] = row{"llm-0", c0Cached, a2 - c0Cached, c0t1End + 1000, f(a2 - c0Cached), f(a2 - c0Cached + 3)}
			want["c2/2"] = row{"llm-0", c2Cached, c2 - c2Cached, c2t1End + 3000, f(c2 - c2Cached), f(c2 - c2Cached + 3)}

			var rows rowsOf
			res, err := Run(context.Background(), Spec{
				RunID: "tiny", Policy: "mod-n", Seed: 1, Profile: tinyProfile(3, 3), Replicas: 2,
				Model: cfg, Router: DefaultRouter(), Source: convs, Hash: digitsHash,
			}, &rows)
			if err != nil {
				t.Fatal(err)
			}
			if len(rows) != len(want) || res.Completed != len(want) || res.Failed != 0 {
				t.Fatalf("%d rows, %d completed, %d failed; want %d, %d, 0", len(rows), res.Completed, res.Failed, len(want), len(want))
			}
			for _, r := range rows {
				key := fmt.Sprintf("%s/%d", r.Conversation, r.Turn)
				w, ok := want[key]
				if !ok {
					t.Fatalf("unexpected row %s", key)
				}
				got := row{r.Replica, r.CacheN, r.PromptN, r.StartMS, r.TTFTMS, r.LatencyMS}
				if got != w {
					t.Errorf("%s: got %+v\nwant %+v", key, got, w)
				}
				if r.PredictedN != 4 || r.Status != 200 || r.Error != "" || r.Reason != "hash" {
					t.Errorf("%s: predicted %d status %d error %q reason %q; want 4, 200, none, hash",
						key, r.PredictedN, r.Status, r.Error, r.Reason)
				}
				if r.EndMS != r.StartMS+r.LatencyMS {
					t.Errorf("%s: end %v != start %v + latency %v", key, r.EndMS, r.StartMS, r.LatencyMS)
				}
			}
			if d := want["c2/2"].startMS + want["c2/2"].latencyMS; res.Info.DurationMS != d {
				t.Errorf("duration %v ms, want %v (the last answer)", res.Info.DurationMS, d)
			}
		})
	}
}

// TestRouterSeesTheLiveInput: the simulated router gets the same input as
// the live one would from the chat request body: the characters of the
// messages (internal/convo's accumulator, which internal/router's
// parseMessages also feeds) and max_tokens; its estimate is checked on the
// row.
func TestRouterSeesTheLiveInput(t *testing.T) {
	c := traffic.Conversation{ID: "c0", System: "Be brief.", Turns: []traffic.Turn{
		{User: "Hello there, how are you?", MaxTokens: 4},
		{User: "Fine.", ThinkS: 1, MaxTokens: 4},
	}}
	cfg := tinyModel(0)
	var rows rowsOf
	router := DefaultRouter()
	if _, err := Run(context.Background(), Spec{RunID: "x", Policy: "llm-aware", Seed: 1, Profile: tinyProfile(1, 1),
		Replicas: 1, Model: cfg, Router: router, Source: fixed{c}}, &rows); err != nil {
		t.Fatal(err)
	}
	_, ans := promptOf(cfg, &c, 0, nil)
	chars := func(msgs []wire.ChatMessage) int {
		n := 0
		for _, m := range msgs {
			text, _ := wire.ContentText(m.Content)
			n += len(text) + len(m.Role) + 24
		}
		return n
	}
	// Turn 1: nothing known, all characters at chars_per_token (rounded up).
	c1 := chars(traffic.Messages(&c, 0, nil))
	if want := (c1 + 3) / 4; rows[0].EstPrompt != want {
		t.Errorf("turn 1 estimate %d, want ⌈%d/4⌉ = %d", rows[0].EstPrompt, c1, want)
	}
	// Turn 2: the reported prompt of turn 1, plus the new characters.
	c2 := chars(traffic.Messages(&c, 1, []string{ans}))
	prev := rows[0].CacheN + rows[0].PromptN
	if want := prev + (c2-c1+3)/4; rows[1].EstPrompt != want {
		t.Errorf("turn 2 estimate %d, want %d + ⌈(%d−%d)/4⌉ = %d", rows[1].EstPrompt, prev, c2, c1, want)
	}
}

// TestConservation: every request sent ends in exactly one row, completed
// (status 200) or failed with a status and an error text; a conversation's
// turns are 1, 2, ... with nothing after a failure; every conversation of
// the run starts. Replicas whose context is too small for the pasted
// documents make some requests fail (llama.cpp's 400).
func TestConservation(t *testing.T) {
	prof, err := traffic.LoadProfile(os.DirFS("."), "quick")
	if err != nil {
		t.Fatal(err)
	}
	cfg := model.DefaultConfig()
	cfg.CtxSize = 4 * 600 // 600 tokens per slot: documents do not fit
	for _, pol := range PolicyNames() {
		t.Run(pol, func(t *testing.T) {
			var rows rowsOf
			res, err := Run(context.Background(), Spec{RunID: "c", Policy: pol, Seed: 3, Profile: prof, Replicas: 3,
				Model: cfg, Router: DefaultRouter(), ScaleAt: 20 * time.Second, LoadDelay: 5 * time.Second}, &rows)
			if err != nil {
				t.Fatal(err)
			}
			if res.Sent != len(rows) || res.Sent != res.Completed+res.Failed {
				t.Fatalf("sent %d, rows %d, completed %d + failed %d", res.Sent, len(rows), res.Completed, res.Failed)
			}
			if res.Failed == 0 {
				t.Fatal("test setup: expected some requests over the context to fail")
			}
			if res.Info.Requests != len(rows) || res.Info.Errors != res.Failed {
				t.Fatalf("run JSON says %d requests, %d errors; rows %d, failed %d", res.Info.Requests, res.Info.Errors, len(rows), res.Failed)
			}
			turns := map[string][]record.Request{}
			for _, r := range rows {
				if r.Status == 200 {
					if r.Error != "" || r.PredictedN == 0 {
						t.Fatalf("%s/%d: status 200 with error %q, predicted %d", r.Conversation, r.Turn, r.Error, r.PredictedN)
					}
				} else if r.Status != 400 || !strings.HasPrefix(r.Error, "HTTP 400: request (") || !strings.Contains(r.Error, "exceeds the available context size") {
					t.Fatalf("%s/%d: status %d error %q, want 400 and llama.cpp's context error", r.Conversation, r.Turn, r.Status, r.Error)
				}
				turns[r.Conversation] = append(turns[r.Conversation], r)
			}
			if len(turns) != prof.Conversations {
				t.Fatalf("%d conversations in the rows, want %d", len(turns), prof.Conversations)
			}
			for id, rs := range turns {
				for i, r := range rs {
					if r.Turn != i+1 {
						t.Fatalf("%s: rows in order have turns %v", id, turnsOf(rs))
					}
					if r.Status != 200 && i != len(rs)-1 {
						t.Fatalf("%s: turn %d failed but turn %d was sent", id, r.Turn, r.Turn+1)
					}
				}
			}
		})
	}
}

func turnsOf(rs []record.Request) []int {
	out := make([]int, len(rs))
	for i, r := range rs {
		out[i] = r.Turn
	}
	return out
}

// TestScaleUp: the extra replica starts at --scale-at, joins the ring
// load-delay later, and serves nothing before; the run JSON says when.
func TestScaleUp(t *testing.T) {
	prof, err := traffic.LoadProfile(os.DirFS("."), "quick")
	if err != nil {
		t.Fatal(err)
	}
	var rows rowsOf
	res, err := Run(context.Background(), Spec{RunID: "s", Policy: "consistent", Seed: 1, Profile: prof, Replicas: 3,
		Model: model.DefaultConfig(), Router: DefaultRouter(), ScaleAt: 30 * time.Second, LoadDelay: 10 * time.Second}, &rows)
	if err != nil {
		t.Fatal(err)
	}
	info := res.Info
	if info.ScaleAtMS != 30000 || info.ScaleReadyMS != 40000 || info.ScaleReplica != "llm-3" {
		t.Fatalf("scale at %v ready %v replica %q, want 30000, 40000, llm-3", info.ScaleAtMS, info.ScaleReadyMS, info.ScaleReplica)
	}
	served := 0
	for _, r := range rows {
		if r.Replica == "llm-3" {
			served++
			if r.StartMS < info.ScaleReadyMS {
				t.Fatalf("%s/%d sent at %v ms went to llm-3, ready at %v ms", r.Conversation, r.Turn, r.StartMS, info.ScaleReadyMS)
			}
		}
	}
	if served == 0 {
		t.Fatal("llm-3 served nothing after joining the ring")
	}
	// A scale-up after the traffic ends never happens.
	res, err = Run(context.Background(), Spec{RunID: "s", Policy: "consistent", Seed: 1, Profile: prof, Replicas: 3,
		Model: model.DefaultConfig(), Router: DefaultRouter(), ScaleAt: 10 * time.Hour, LoadDelay: time.Second}, &rowsOf{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Info.ScaleAtMS != 0 || res.Info.ScaleReadyMS != 0 || res.Info.ScaleReplica != "" {
		t.Fatalf("scale-up after the end recorded: %+v", res.Info)
	}
}

// TestSharedCPUSlowsBusyReplicas: with one shared CPU, the same traffic
// takes longer than with a CPU per replica (the replicas are busy together).
func TestSharedCPUSlowsBusyReplicas(t *testing.T) {
	prof, err := traffic.LoadProfile(os.DirFS("."), "quick")
	if err != nil {
		t.Fatal(err)
	}
	meanLatency := func(shared bool) float64 {
		var rows rowsOf
		if _, err := Run(context.Background(), Spec{RunID: "x", Policy: "consistent", Seed: 1, Profile: prof, Replicas: 3,
			Model: model.DefaultConfig(), SharedCPU: shared, Router: DefaultRouter()}, &rows); err != nil {
			t.Fatal(err)
		}
		total := 0.0
		for _, r := range rows {
			total += r.LatencyMS
		}
		return total / float64(len(rows))
	}
	own, shared := meanLatency(false), meanLatency(true)
	if !(shared > 1.3*own) {
		t.Fatalf("mean latency %v ms shared vs %v ms own CPU: want the shared CPU clearly slower", shared, own)
	}
}

// TestVariants: each variant is its base policy with settings changed, and
// it shows in the decisions: without placement memory no decision is
// sticky, without long stickiness none is -long. An unknown name is an
// error listing the names.
func TestVariants(t *testing.T) {
	prof, err := traffic.LoadProfile(os.DirFS("."), "standard")
	if err != nil {
		t.Fatal(err)
	}
	base := DefaultRouter()
	for _, tc := range []struct {
		name, base string
		never      []string // reasons the variant cannot give
		some       []string // reasons it gives on the standard profile
	}{
		{"llm-aware", "llm-aware", nil, []string{"sticky", "home-long"}},                               // all three additions
		{"llm-aware-no-memory", "llm-aware", []string{"sticky", "sticky-long"}, []string{"home-long"}}, // placement memory off
		{"llm-aware-no-long", "llm-aware", []string{"home-long", "sticky-long"}, []string{"sticky"}},   // long stickiness off
		{"bounded-tokens", "bounded", []string{"sticky", "home-long", "sticky-long"}, []string{"overflow"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := NewPolicy(tc.name, &base)
			if err != nil {
				t.Fatal(err)
			}
			if p.Name() != tc.base {
				t.Errorf("policy %s, want %s", p.Name(), tc.base)
			}
			var rows rowsOf
			if _, err := Run(context.Background(), Spec{RunID: "v", Policy: tc.name, Seed: 1, Profile: prof, Replicas: 3,
				Model: model.DefaultConfig(), Router: DefaultRouter()}, &rows); err != nil {
				t.Fatal(err)
			}
			count := map[string]int{}
			for _, r := range rows {
				count[r.Reason]++
				if r.Policy != tc.name {
					t.Fatalf("row policy %q, want the variant's name %q", r.Policy, tc.name)
				}
			}
			for _, r := range tc.never {
				if count[r] > 0 {
					t.Errorf("%d decisions %s", count[r], r)
				}
			}
			for _, r := range tc.some {
				if count[r] == 0 {
					t.Errorf("no decision %s (reasons %v)", r, count)
				}
			}
		})
	}
	if _, err := NewPolicy("llm-aware-no-such", &base); err == nil || !strings.Contains(err.Error(), "llm-aware-no-long") {
		t.Fatalf("unknown variant: error %v, want one listing the names", err)
	}
}

// TestDefaultRouterIsTheShippedOne: the simulator's default routing
// settings are those of config/router.yaml, which the live router ships with.
func TestDefaultRouterIsTheShippedOne(t *testing.T) {
	shipped, err := config.Load(filepath.Join("..", "..", "config", "router.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	def := DefaultRouter()
	for _, name := range policy.Names() {
		got, err1 := def.PolicySettings(name)
		want, err2 := shipped.PolicySettings(name)
		if err1 != nil || err2 != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%s settings %+v (%v), shipped %+v (%v)", name, got, err1, want, err2)
		}
	}
	if got, want := def.StateConfig(), shipped.StateConfig(); got.VirtualNodes != want.VirtualNodes ||
		got.CharsPerToken != want.CharsPerToken || got.MaxEntries != want.MaxEntries || got.TTL != want.TTL {
		t.Errorf("state config %+v, shipped %+v", got, want)
	}
	if def.Policy != shipped.Policy {
		t.Errorf("policy %q, shipped %q", def.Policy, shipped.Policy)
	}
	if err := def.Validate(); err != nil {
		t.Errorf("DefaultRouter is not a valid router configuration: %v", err)
	}
}
