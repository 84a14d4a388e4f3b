package replica

import (
	"strings"
	"testing"

	"github.com/llm-ring/llm-ring/internal/model"
	"github.com/llm-ring/llm-ring/internal/signals"
)

// A replica running the paged engine reports vLLM's own metrics, and the
// router's scraper reads its state from them.
func TestPagedEngineMetrics(t *testing.T) {
	r := newTestReplica(t, func(o *Options) {
		o.API = APIVLLM
		o.Model.Engine = model.EngineVLLM
	})
	body := `{"messages":[{"role":"system","content":"` + strings.Repeat("You are a careful assistant. ", 20) + `"},{"role":"user","content":"Hi"}],"max_tokens":3}`
	for i := 0; i < 2; i++ {
		if rec := do(t, r, "POST", "/v1/chat/completions", body); rec.Code != 200 {
			t.Fatalf("chat %d: %d %s", i, rec.Code, rec.Body)
		}
	}
	metrics := do(t, r, "GET", "/metrics", "").Body.String()
	for _, w := range []string{
		`vllm:prefix_cache_queries_total{model_name="qwen2.5-0.5b-instruct-sim"}`,
		`vllm:num_preemptions_total{model_name="qwen2.5-0.5b-instruct-sim"} 0`,
		`vllm:cache_config_info{block_size="16",enable_prefix_caching="True",engine="0",num_gpu_blocks="1024"} 1`,
	} {
		if !strings.Contains(metrics, w) {
			t.Errorf("metrics lack %s:\n%s", w, metrics)
		}
	}
	// The second request found the first one's prompt blocks cached.
	if strings.Contains(metrics, `vllm:prefix_cache_hits_total{model_name="qwen2.5-0.5b-instruct-sim"} 0`) {
		t.Errorf("no prefix-cache hit:\n%s", metrics)
	}
	m, _ := signals.Preset(signals.PresetVLLM)
	s, err := signals.Parse(strings.NewReader(metrics), m)
	if err != nil {
		t.Fatal(err)
	}
	if !s.HasRunning || !s.HasWaiting || !s.HasKV || s.Running != 0 || s.KVUse != 0 {
		t.Fatalf("scraped %+v: want an idle engine with every signal present", s)
	}
}
