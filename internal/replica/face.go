package replica

import (
	"net/http"

	"github.com/llm-ring/llm-ring/internal/model"
	"github.com/llm-ring/llm-ring/internal/wire"
)

// face is what differs between the engines whose HTTP face a replica wears
// (Options.API): the same model behind, other response shapes and rules.
type face struct {
	// fingerprint is system_fingerprint ("" leaves it out).
	fingerprint string
	// withTimings: llama.cpp adds its timings block to OpenAI answers.
	withTimings bool
	// emptyRoleContent: the first chat chunk's delta is
	// {"role":"assistant","content":""} (vLLM, SGLang) rather than llama.cpp's
	// {"role":"assistant","content":null}.
	emptyRoleContent bool
	// finishOnLastToken: the finish reason rides on the last token's chunk
	// (vLLM) instead of a chunk of its own with an empty delta (llama.cpp).
	finishOnLastToken bool
	// completionsUsageAlways: /v1/completions streams end with usage
	// whatever the client asked (llama.cpp).
	completionsUsageAlways bool
}

func (r *Replica) face() face {
	switch r.h.api {
	case APIVLLM:
		return face{emptyRoleContent: true, finishOnLastToken: true}
	case APISGLang:
		return face{emptyRoleContent: true}
	}
	return face{fingerprint: systemFingerprint, withTimings: true, completionsUsageAlways: true}
}

func (f face) timings(res *model.Result) *wire.Timings {
	if !f.withTimings {
		return nil
	}
	return timingsOf(res)
}

func (f face) roleDelta() *wire.ChatDelta {
	if f.emptyRoleContent {
		return &wire.ChatDelta{Role: "assistant", Content: wire.Ptr("")}
	}
	return &wire.ChatDelta{Role: "assistant", NullContent: true}
}

// applyFace trims and extends the routes for the replica's engine: vLLM and
// SGLang serve the OpenAI-compatible paths (and their own health), not
// llama.cpp's native ones.
func (r *Replica) applyFace() {
	if r.h.api == APILlamaCpp {
		return
	}
	keep := []string{
		wire.PathChatCompletions, wire.PathCompletions, wire.PathModels, wire.PathEmbeddings,
		wire.PathTokenize, wire.PathDetokenize, "/health", "/metrics",
	}
	switch r.h.api {
	case APIVLLM:
		keep = append(keep, wire.PathMessages, wire.PathRerank, "/rerank", "/v1/score")
	case APISGLang:
		keep = append(keep, wire.PathRerank, "/health_generate")
	}
	routes := map[string]route{}
	for _, p := range keep {
		if rt, ok := r.routes[p]; ok {
			routes[p] = rt
		}
	}
	// Both answer GET /health with 200 and an empty body once up.
	routes["/health"] = route{http.MethodGet, r.emptyHealth, true}
	if r.h.api == APISGLang {
		routes["/health_generate"] = route{http.MethodGet, r.emptyHealth, true}
	}
	r.routes = routes
}

func (r *Replica) emptyHealth(w http.ResponseWriter, _ *http.Request) {
	if !r.Ready() {
		writeError(w, http.StatusServiceUnavailable, wire.ErrTypeUnavailable, "Loading model")
		return
	}
	w.WriteHeader(http.StatusOK)
}
