package discovery

// The poller against llm-ring's own simulated replica (internal/replica),
// which wears the engines' faces: what `llm-ring replica --models
// --adapters` lists is what pools are built from.

import (
	"net/http/httptest"
	"testing"

	"github.com/llm-ring/llm-ring/internal/model"
	"github.com/llm-ring/llm-ring/internal/replica"
	"github.com/llm-ring/llm-ring/internal/replicaset"
)

func simulatedReplica(t *testing.T, opts replica.Options) string {
	t.Helper()
	opts.Model = model.DefaultConfig()
	if opts.API == replica.APIVLLM {
		opts.Model.Engine = model.EngineVLLM
	}
	h, err := replica.NewHost(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	r, err := h.Add("sim", 0)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestModelPollerSimulatedReplicas(t *testing.T) {
	vllm := simulatedReplica(t, replica.Options{API: replica.APIVLLM, Models: []string{"a", "b"},
		Adapters: []replica.Adapter{{Name: "x", Base: "a"}, {Name: "z", Base: "b"}}})
	llama := simulatedReplica(t, replica.Options{Alias: "qwen-sim"})
	src := Static{{Name: "vllm", URL: vllm}, {Name: "llama", URL: llama, Engine: "llamacpp"}}
	w := startPoller(t, src, ModelPollOptions{Engine: "vllm"})
	w.until("both listed", func(rs []replicaset.Replica) bool {
		return has(rs, "vllm", models("a", "", "b", "", "x", "a", "z", "b")) && has(rs, "llama", models("qwen-sim", ""))
	})
}
