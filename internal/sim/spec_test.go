package sim

import (
	"testing"

	"github.com/llm-ring/llm-ring/internal/model"
)

// A paged run's record says its engine and pool (a reader must be able to
// rerun it); a llama.cpp run's record keeps only the keys it always had.
func TestRunConfigRecordsTheEngine(t *testing.T) {
	paged, err := model.Preset("vllm-h100-8b")
	if err != nil {
		t.Fatal(err)
	}
	rec := replicaConfig(paged, false)
	if rec["engine"] != model.EngineVLLM || rec["kv_tokens"] != paged.KVTokens || rec["prefill_token_cost"] != paged.PrefillTokenCost.String() {
		t.Errorf("paged record = %v", rec)
	}
	rec = replicaConfig(model.DefaultConfig(), true)
	if len(rec) != 12 || rec["token_cost"] != "12.7ms" || rec["shared_cpu"] != true {
		t.Errorf("llama.cpp record = %v (want the 11 model keys and shared_cpu)", rec)
	}
}
