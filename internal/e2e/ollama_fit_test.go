package e2e

// The measurements the ollama-tiny-cpu replica preset is fitted to
// (issue 20 §4; internal/model/preset_ollama.go, docs/notes/ollama.md):
//
//	LLM_RING_OLLAMA_FIT=1 go test -run TestOllamaFit -v -count=1 ./internal/e2e/
//
// One real server (4 slots, the multi-user cache, Ollama's own engine, the
// tiny model, one thread) answers fresh prompts of 64 to 2,000 tokens
// alone, then 1 to 4 concurrent requests, then 5 conversations on its 4
// slots; the rates come from the answers' prompt_eval_* and eval_*, what
// the cache kept from the runner's "loading cache slot" lines.

import (
	"bytes"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"sync"
	"testing"
)

// timing is what a native answer says of its own work.
type timing struct {
	PromptEvalCount    int   `json:"prompt_eval_count"`
	PromptEvalDuration int64 `json:"prompt_eval_duration"` // ns
	EvalCount          int   `json:"eval_count"`
	EvalDuration       int64 `json:"eval_duration"` // ns
	TotalDuration      int64 `json:"total_duration"`
	Message            chatMsg
}

// nativeChat sends one plain /api/chat request.
func nativeChat(t *testing.T, url string, msgs []chatMsg, predict int) timing {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"model": "tiny", "messages": msgs, "stream": false,
		"options": map[string]any{"num_predict": predict, "seed": 1}})
	resp, err := http.Post(url+"/api/chat", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Error(err)
		return timing{}
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var tm timing
	if resp.StatusCode != 200 || json.Unmarshal(raw, &tm) != nil {
		t.Errorf("/api/chat: %d %s", resp.StatusCode, raw)
	}
	return tm
}

// text is n random lower-case letters and spaces (one token each in the
// tiny model's byte vocabulary), different for every (seed, n).
func text(seed uint64, n int) string {
	rng := rand.New(rand.NewPCG(seed, uint64(n)))
	b := make([]byte, n)
	for i := range b {
		b[i] = "abcdefghijklmnopqrstuvwxyz "[rng.IntN(27)]
	}
	return string(b)
}

func msPer(d int64, n int) float64 { return float64(d) / 1e6 / float64(max(n, 1)) }

func TestOllamaFit(t *testing.T) {
	if os.Getenv("LLM_RING_OLLAMA_FIT") == "" {
		t.Skip("set LLM_RING_OLLAMA_FIT=1 to measure the real server")
	}
	s := startOllamas(t, ollamaBinary(t), 1)[0]
	nativeChat(t, s.url, []chatMsg{{"user", "warm up"}}, 8)
	seed := uint64(1)
	t.Log("prefill, alone: prompt tokens | prompt_eval ms (median of 3) | ms/token")
	for _, n := range []int{64, 250, 500, 1000, 2000} {
		var d []float64
		count := 0
		for range 3 {
			seed++
			tm := nativeChat(t, s.url, []chatMsg{{"user", text(seed, n)}}, 1)
			d = append(d, float64(tm.PromptEvalDuration)/1e6)
			count = tm.PromptEvalCount
		}
		slices.Sort(d)
		t.Logf("FIT prefill n=%d count=%d ms=%.2f per_token_ms=%.4f", n, count, d[1], d[1]/float64(count))
	}
	for _, n := range []int{64, 1000} {
		seed++
		tm := nativeChat(t, s.url, []chatMsg{{"user", text(seed, n)}}, 128)
		t.Logf("FIT decode-alone ctx=%d eval_count=%d per_token_ms=%.4f", tm.PromptEvalCount, tm.EvalCount,
			msPer(tm.EvalDuration, tm.EvalCount))
	}
	for b := 1; b <= 4; b++ {
		res := make([]timing, b)
		var wg sync.WaitGroup
		for i := range b {
			seed++
			msgs := []chatMsg{{"user", text(seed, 64)}}
			wg.Go(func() { res[i] = nativeChat(t, s.url, msgs, 128) })
		}
		wg.Wait()
		var per, pre []float64
		for _, r := range res {
			per = append(per, msPer(r.EvalDuration, r.EvalCount))
			pre = append(pre, msPer(r.PromptEvalDuration, r.PromptEvalCount))
		}
		t.Logf("FIT batch b=%d decode_per_token_ms=%.4v prefill_per_token_ms=%.4v", b, per, pre)
	}
	fitCache(t, s, seed)
}

// fitCache: 5 conversations of 200-token first turns on 4 slots, then each
// one's follow-up, newest first: which follow-ups found their
// conversation's tokens (the runner's used=).
func fitCache(t *testing.T, s ollamaServer, seed uint64) {
	before := len(slotLines(t, s.log))
	hist := make([][]chatMsg, 5)
	for c := range hist {
		hist[c] = []chatMsg{{"user", text(seed+uint64(100+c), 200)}}
		hist[c] = append(hist[c], chatMsg{"assistant", nativeChat(t, s.url, hist[c], 16).Message.Content})
	}
	for c := len(hist) - 1; c >= 0; c-- {
		hist[c] = append(hist[c], chatMsg{"user", text(seed+uint64(200+c), 20)})
		nativeChat(t, s.url, hist[c], 16)
	}
	lines := slotLines(t, s.log)[before:]
	for i, l := range lines {
		conv := i
		if i >= 5 {
			conv = 9 - i
		}
		t.Logf("FIT cache request=%d conv=%d turn=%d prompt=%d used=%d", i, conv, i/5, l.prompt, l.used)
	}
	if len(lines) != 10 {
		t.Errorf("%d cache lines for 10 requests", len(lines))
	}
}
