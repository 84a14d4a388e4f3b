package sim

import (
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/llm-ring/llm-ring/internal/model"
	"github.com/llm-ring/llm-ring/internal/policy"
	"github.com/llm-ring/llm-ring/internal/replicaset"
	"github.com/llm-ring/llm-ring/internal/ring"
	"github.com/llm-ring/llm-ring/internal/state"
)

// learnOn routes n requests, one at a time, through a routing table with
// the predictive policy to one simulated replica of configuration cfg, and
// feeds each answer back as the simulator does (llama.cpp's timings and the
// measured times). It returns the rates the table learned.
func learnOn(t *testing.T, cfg model.Config, n int) policy.Speed {
	t.Helper()
	rep, err := model.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p, err := policy.New("predictive", nil)
	if err != nil {
		t.Fatal(err)
	}
	tab := state.New(state.Config{VirtualNodes: 16, CharsPerToken: 4, MaxEntries: 1000, TTL: time.Hour}, p)
	tab.SetReplicas([]replicaset.Replica{{Name: "llm-0", URL: "sim://llm-0"}})
	rng := rand.New(rand.NewPCG(11, 12))
	now := time.Duration(0)
	var evs []model.Event
	for i := range n {
		prompt := make([]model.Token, 200+rng.IntN(600)) // distinct prompts: always cold
		for j := range prompt {
			prompt[j] = model.Token(rng.IntN(model.NumOrdinary))
		}
		key := "c" + strconv.Itoa(i)
		tk, _, err := tab.Route(state.Input{Key: key, Hash: ring.HashString(key), Tokens: len(prompt), OutputTokens: 64}, int64(now))
		if err != nil {
			t.Fatal(err)
		}
		sent := now
		id, err := rep.Submit(now, model.Request{Tokens: prompt, NPredict: 64, Seed: uint64(i + 1)})
		if err != nil {
			t.Fatal(err)
		}
		var res *model.Result
		var ttft time.Duration
		for res == nil {
			at, ok := rep.NextEvent()
			if !ok {
				t.Fatal("the replica went idle without answering")
			}
			evs = rep.Advance(at, evs[:0])
			for _, e := range evs {
				if e.ID == id && e.Kind == model.EventFirstToken {
					ttft = e.At - sent
				}
				if e.ID == id && e.Kind == model.EventDone {
					res, now = e.Result, e.At
				}
			}
		}
		tab.Release(&tk, state.Outcome{OK: true, Known: true, CacheN: res.CacheN, PromptN: res.PromptN, PredictedN: res.PredictedN,
			PromptTime: res.PromptTime(), PredictedTime: res.PredictedTime(), TTFT: ttft, Latency: now - sent}, int64(now))
		now += time.Second // think
	}
	return tab.Speed("llm-0")
}

// TestPredictiveLearnsTheReplicasRates: the rates predictive reads
// converge on the simulated replica's true ones within 5 %. Alone on the
// replica, a cold prompt costs TokenCost per token (plus one step's
// overhead and attention, < 4 % for prompts of 200–800 tokens), and each
// generated token one step, StepOverhead + TokenCost (plus attention, < 3 %
// at these context lengths). A replica twice as slow is learned as such.
func TestPredictiveLearnsTheReplicasRates(t *testing.T) {
	fast := model.DefaultConfig()
	slow := fast
	slow.StepOverhead, slow.TokenCost, slow.AttnCost = 2*fast.StepOverhead, 2*fast.TokenCost, 2*fast.AttnCost
	for _, tc := range []struct {
		name string
		cfg  model.Config
	}{{"default", fast}, {"twice as slow", slow}} {
		t.Run(tc.name, func(t *testing.T) {
			got := learnOn(t, tc.cfg, 30)
			prefill := 1 / tc.cfg.TokenCost.Seconds()
			decode := 1 / (tc.cfg.StepOverhead + tc.cfg.TokenCost).Seconds()
			t.Logf("learned prefill %.1f tok/s (true %.1f), decode %.1f tok/s (true %.1f), %d samples",
				got.Prefill, prefill, got.Decode, decode, got.Samples)
			if got.Samples != 30 {
				t.Errorf("learned from %d answers, want 30", got.Samples)
			}
			if e := math.Abs(got.Prefill/prefill - 1); e > 0.05 {
				t.Errorf("prefill %.1f tok/s, true %.1f: off by %.1f %% (> 5 %%)", got.Prefill, prefill, 100*e)
			}
			if e := math.Abs(got.Decode/decode - 1); e > 0.05 {
				t.Errorf("decode %.1f tok/s, true %.1f: off by %.1f %% (> 5 %%)", got.Decode, decode, 100*e)
			}
		})
	}
}
