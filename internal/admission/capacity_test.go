package admission

import (
	"math"
	"strings"
	"testing"

	"github.com/llm-ring/llm-ring/internal/policy"
)

// TestTokenCapacityFor, hand-computed: a configured capacity wins; else
// the share of a known pool, rounded down; else off.
func TestTokenCapacityFor(t *testing.T) {
	for _, tt := range []struct {
		name     string
		capacity int64
		share    float64
		kv       float64
		want     int64
	}{
		{"off: no share", 0, 0, 450560, 0},
		{"off: no pool (llama.cpp, Ollama)", 0, 0.45, 0, 0},
		{"vllm-h100-8b: 0.45 × 450,560", 0, 0.45, 450560, 202752},
		{"vllm-l4-qwen0.5b: 0.25 × 987,000", 0, 0.25, 987000, 246750},
		{"rounded down: 0.3 × 1,001 = 300.3", 0, 0.3, 1001, 300},
		{"at least 1: 0.1 × 3", 0, 0.1, 3, 1},
		{"configured wins over the share", 100000, 0.45, 450560, 100000},
		{"configured, no pool", 100000, 0.45, 0, 100000},
		{"unknown: negative pool", 0, 0.45, -1, 0},
		{"unknown: NaN pool", 0, 0.45, math.NaN(), 0},
		{"unknown: infinite pool", 0, 0.45, math.Inf(1), 0},
		{"a pool beyond 2^40 is bounded", 0, 0.5, 1 << 50, 1 << 39},
	} {
		s := on()
		s.TokenCapacity, s.TokenShare = tt.capacity, tt.share
		if got := s.TokenCapacityFor(tt.kv); got != tt.want {
			t.Errorf("%s: %d, want %d", tt.name, got, tt.want)
		}
	}
}

// TestSetKVTokens: the controller's score uses the derived capacity; a
// pool learned later (or lost) changes it; the configured one never does.
func TestSetKVTokens(t *testing.T) {
	s := on()
	s.TokenShare = 0.5
	c := New(s)
	row := policy.Row{Load: policy.Load{Requests: 1, Tokens: 3000}} // unreporting: waiting 0
	score := func() float64 { return ReplicaScore(&row, 0, c.Settings(), 0) }
	if c.Settings().TokenCapacity != 0 || score() != 0 {
		t.Fatalf("before the pool is known: capacity %d, score %v, want 0, 0", c.Settings().TokenCapacity, score())
	}
	c.SetKVTokens(10000) // 0.5 × 10,000 = 5,000: 3,000 / 5,000 = 0.6
	if c.Settings().TokenCapacity != 5000 || math.Abs(score()-0.6) > 1e-12 {
		t.Fatalf("pool 10,000: capacity %d, score %v, want 5000, 0.6", c.Settings().TokenCapacity, score())
	}
	c.SetKVTokens(4000) // 2,000: 1.5
	if c.Settings().TokenCapacity != 2000 || math.Abs(score()-1.5) > 1e-12 {
		t.Fatalf("pool 4,000: capacity %d, score %v, want 2000, 1.5", c.Settings().TokenCapacity, score())
	}
	c.SetKVTokens(0) // unknown again: off
	if c.Settings().TokenCapacity != 0 {
		t.Fatalf("pool unknown: capacity %d, want 0", c.Settings().TokenCapacity)
	}
	s.TokenCapacity = 6000 // configured: kept whatever the pool
	c = New(s)
	for _, kv := range []float64{0, 10000, 1e6} {
		if c.SetKVTokens(kv); c.Settings().TokenCapacity != 6000 {
			t.Errorf("configured 6000, pool %v: capacity %d", kv, c.Settings().TokenCapacity)
		}
	}
}

func TestValidateTokenShare(t *testing.T) {
	for _, bad := range []float64{-0.1, 1.5, math.NaN()} {
		s := on()
		s.TokenShare = bad
		if err := s.Validate(); err == nil || !strings.Contains(err.Error(), "token_share") {
			t.Errorf("token_share %v: %v, want an error naming token_share", bad, err)
		}
	}
}
