package model

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestPresets(t *testing.T) {
	if got := strings.Join(PresetNames(), ","); got != "cpu-qwen0.5b,gpu-h100-8b,ollama-tiny-cpu,ollama-tiny-cpu-simtok,vllm-4xh100-70b,vllm-h100-8b,vllm-l4-qwen0.5b" {
		t.Fatalf("PresetNames() = %s", got)
	}
	cpu, err := Preset(PresetCPU)
	if err != nil || cpu != DefaultConfig() {
		t.Errorf("Preset(%q) = %+v, %v; want DefaultConfig()", PresetCPU, cpu, err)
	}
	for _, name := range PresetNames() {
		c, err := Preset(name)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Validate(); err != nil {
			t.Errorf("preset %s: %v", name, err)
		}
	}
	if _, err := Preset("tpu"); err == nil || !strings.Contains(err.Error(), "known: cpu-qwen0.5b, gpu-h100-8b") {
		t.Errorf("unknown preset: error %v", err)
	}
}

// The GPU preset's derived numbers are those its comment computes.
func TestGPUPresetArithmetic(t *testing.T) {
	c := GPUH100Llama8B()
	if c.KVTokens != 450_560 || int64(c.KVTokens)*int64(c.BytesPerToken) != 55<<30 {
		t.Errorf("KV pool %d tokens × %d bytes, want 450,560 × 131,072 = 55 GiB", c.KVTokens, c.BytesPerToken)
	}
	if kv := float64(c.KVTokens) * float64(c.BytesPerToken); kv > 60e9 {
		t.Errorf("KV pool of %.1f GB, want at most ~60 GB", kv/1e9)
	}
	if c.SlotContext() != 131072 || c.NParallel != 256 || c.NBatch != 8192 {
		t.Errorf("slots %d × %d tokens, batch %d", c.NParallel, c.SlotContext(), c.NBatch)
	}
	// Decode attention reads the KV of every context token at HBM speed.
	if want := float64(c.BytesPerToken) / gpuHBMBytesPerSec * 1e9; math.Abs(float64(c.AttnCost)-want) > 0.01*want {
		t.Errorf("AttnCost %v, want %.1f ns", c.AttnCost, want)
	}
}

// runAlone submits reqs at time 0 to a fresh replica and returns the
// results by submission order, and the token events.
func runAlone(t *testing.T, c Config, reqs []Request) ([]*Result, []Event) {
	t.Helper()
	r, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[ID]int{}
	for i, q := range reqs {
		id, err := r.Submit(0, q)
		if err != nil {
			t.Fatal(err)
		}
		ids[id] = i
	}
	out := make([]*Result, len(reqs))
	var toks []Event
	var evs []Event
	for {
		at, ok := r.NextEvent()
		if !ok {
			break
		}
		evs = r.Advance(at, evs[:0])
		for _, e := range evs {
			switch e.Kind {
			case EventDone:
				out[ids[e.ID]] = e.Result
			case EventToken:
				toks = append(toks, e)
			}
		}
	}
	return out, toks
}

// prompt returns n tokens unique to k.
func prompt(k, n int) []Token {
	out := make([]Token, n)
	for i := range out {
		out[i] = Token((k*7919 + i*104729) % NumOrdinary)
	}
	return out
}

// The GPU preset reproduces its cited figures (computed in model time, not
// timed): llm-d's per-token prefill, 30 ms + n × 250 µs, for a 4,000-token
// prompt within 2 % (the attention term adds 0.8 %), and a decode step of
// 256 sequences at llm-d's saturated inter-token latency, 2 × 12 ms, within
// 2 % plus the KV reads of the step's context (39 ns per token).
func TestGPUPresetCitedFigures(t *testing.T) {
	c := GPUH100Llama8B()
	res, _ := runAlone(t, c, []Request{{Tokens: prompt(1, 4000), NPredict: 1}})
	want := 30*time.Millisecond + 4000*250*time.Microsecond
	if got := res[0].PromptTime(); math.Abs(float64(got-want)) > 0.02*float64(want) {
		t.Errorf("4,000-token prefill: %v, want %v ± 2 %%", got, want)
	}
	t.Logf("4,000-token prefill: %v (llm-d: %v)", res[0].PromptTime(), want)

	// 256 sequences of 16-token prompts: one prefill step, then decode
	// steps of all 256; the steps' spacing is read off request 0's tokens.
	reqs := make([]Request, 256)
	for i := range reqs {
		reqs[i] = Request{Tokens: prompt(i+2, 16), NPredict: 20, TokenEvents: i == 0}
	}
	results, toks := runAlone(t, c, reqs)
	for i, r := range results {
		if r == nil || r.PredictedN != 20 || r.Started != 0 {
			t.Fatalf("request %d: %+v, want 20 tokens, started at once", i, r)
		}
	}
	// Between tokens 5 and 6 every sequence is decoding at position ~21:
	// context Σ = 256 × 21 tokens.
	step := toks[5].At - toks[4].At
	attn := time.Duration(256*21) * c.AttnCost
	want = 24*time.Millisecond + attn
	if math.Abs(float64(step-want)) > 0.02*float64(24*time.Millisecond) {
		t.Errorf("decode step of 256 sequences: %v, want 24 ms + %v of KV reads, ± 2 %%", step, attn)
	}
	t.Logf("decode step of 256 sequences: %v (llm-d: 24 ms, plus %v of KV reads)", step, attn)
}

// The shared KV pool: a request waits while the running ones leave no room,
// and idle slots' cached tokens are evicted to make room.
func TestKVPool(t *testing.T) {
	c := DefaultConfig()
	c.NParallel, c.CtxSize, c.CacheRAMMiB = 4, 4000, 0 // 1,000 tokens per slot
	c.KVTokens = 1000
	a := Request{Tokens: prompt(1, 600), NPredict: 10}
	b := Request{Tokens: prompt(2, 600), NPredict: 10}
	res, _ := runAlone(t, c, []Request{a, b})
	if res[1].Started < res[0].Done {
		t.Errorf("b started at %v, before a ended at %v: 2 × 610 tokens do not fit a pool of 1,000", res[1].Started, res[0].Done)
	}
	// Without the pool both run at once.
	c.KVTokens = 0
	res, _ = runAlone(t, c, []Request{a, b})
	if res[1].Started != 0 {
		t.Errorf("without a pool, b waited until %v", res[1].Started)
	}

	// Eviction: a's cached tokens go when c needs the room; a then
	// reuses nothing.
	for _, tt := range []struct {
		kv        int
		wantCache bool
	}{
		{0, true},     // no pool: a's slot keeps its tokens
		{4000, true},  // room for both
		{1000, false}, // c evicts a's 609 cached tokens
	} {
		cfg := c
		cfg.KVTokens = tt.kv
		r, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		now := time.Duration(0)
		run := func(q Request) *Result {
			if _, err := r.Submit(now, q); err != nil {
				t.Fatal(err)
			}
			var evs []Event
			for {
				at, ok := r.NextEvent()
				if !ok {
					t.Fatal("no result")
				}
				now = at
				evs = r.Advance(at, evs[:0])
				for _, e := range evs {
					if e.Kind == EventDone {
						return e.Result
					}
				}
			}
		}
		run(a)
		run(Request{Tokens: prompt(3, 600), NPredict: 10})
		again := run(a)
		if got := again.CacheN > 0; got != tt.wantCache {
			t.Errorf("kv_tokens %d: a again reused %d tokens, want reuse %v", tt.kv, again.CacheN, tt.wantCache)
		}
	}
}

func TestConfigValidateGPUFields(t *testing.T) {
	tests := []struct {
		name   string
		edit   func(c *Config)
		errHas string
	}{
		{"GPU preset", func(c *Config) { *c = GPUH100Llama8B() }, ""},
		{"negative prefill cost", func(c *Config) { c.PrefillTokenCost = -1 }, "prefill_token_cost: must not be negative"},
		{"negative prefill attention", func(c *Config) { c.PrefillAttnCost = -1 }, "prefill_attn_cost: must not be negative"},
		{"negative prefill overhead", func(c *Config) { c.PrefillOverhead = -1 }, "prefill_overhead: must not be negative"},
		{"pool below a slot", func(c *Config) { c.KVTokens = 100 }, "kv_tokens: 100 cannot hold one slot's context of 4096 tokens"},
		{"negative pool", func(c *Config) { c.KVTokens = -5 }, "kv_tokens: must not be negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			tt.edit(&c)
			err := c.Validate()
			switch {
			case tt.errHas == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tt.errHas != "" && (err == nil || !strings.Contains(err.Error(), tt.errHas)):
				t.Fatalf("error %v, want one containing %q", err, tt.errHas)
			}
		})
	}
}

func TestWithSpeed(t *testing.T) {
	c := GPUH100Llama8B()
	if c.WithSpeed(1) != c {
		t.Error("WithSpeed(1) changed the config")
	}
	h := c.WithSpeed(0.5)
	if h.StepOverhead != 2*c.StepOverhead || h.TokenCost != 2*c.TokenCost || h.AttnCost != 2*c.AttnCost ||
		h.PrefillTokenCost != 2*c.PrefillTokenCost || h.PrefillAttnCost != 2*c.PrefillAttnCost || h.PrefillOverhead != 2*c.PrefillOverhead {
		t.Errorf("WithSpeed(0.5) did not double every cost: %+v", h)
	}
	if h.KVTokens != c.KVTokens || h.NParallel != c.NParallel {
		t.Error("WithSpeed changed more than the costs")
	}
	// Speed halves every duration of a run: the prefill of a prompt takes
	// twice as long on the half-speed replica.
	fast, _ := runAlone(t, c, []Request{{Tokens: prompt(1, 1000), NPredict: 1}})
	slow, _ := runAlone(t, h, []Request{{Tokens: prompt(1, 1000), NPredict: 1}})
	if slow[0].PromptTime() != 2*fast[0].PromptTime() {
		t.Errorf("half speed: prefill %v, full speed %v", slow[0].PromptTime(), fast[0].PromptTime())
	}
}
