package engine

import (
	"fmt"
	"slices"
	"strings"
)

// Preset is what the router must know of one engine's face beyond the
// OpenAI API they all serve: where it says it is ready, and whether (and
// under which names) it publishes Prometheus metrics. What each engine's
// answers report about prompt, cached and generated tokens needs no
// setting: UsageOf and Filter read every engine's shape (llama.cpp's
// timings, OpenAI usage with or without prompt_tokens_details, Anthropic
// usage, SGLang's meta_info, Ollama's prompt_eval_count / eval_count), and
// PrepareStream asks every OpenAI-style stream for its usage. Each fact is
// recorded with where it was checked in docs/real-engines.md.
type Preset struct {
	// Name is the engine's name in the configuration (engine: NAME).
	Name string
	// HealthPath is answered 200 by a ready engine (GET). llama.cpp
	// answers 503 while it loads the model; vLLM and SGLang answer 200 once
	// serving; Ollama has no health endpoint and answers GET /api/version.
	HealthPath string
	// Metrics names the signals preset of the engine's Prometheus
	// /metrics (signals.Preset), or "" when the engine publishes none
	// (Ollama): its replicas are not scraped and their signals stay
	// unknown, never zero.
	Metrics string
	// ModelsPath lists the models the engine serves (GET), read by
	// discovery.model_source replicas (issue 23: pools by model): the
	// OpenAI list (/v1/models, data[].id, with vLLM's parent for a LoRA
	// adapter) or Ollama's tag list (/api/tags, models[].name), as
	// ModelsFormat says.
	ModelsPath   string
	ModelsFormat ModelsFormat
	// AnyModel: the engine serves a request whatever model it names (it
	// has one model loaded and does not read the field), so a replica
	// whose list was polled also serves the requests for models no pool
	// has (the catch-all pool, as before pools). vLLM and Ollama answer
	// 404 for a model they do not serve; llama.cpp's server (one model,
	// outside its router mode) and SGLang answer with the model they have.
	AnyModel bool
}

// Engine names, as the configuration spells them.
const (
	LlamaCpp = "llamacpp"
	VLLM     = "vllm"
	SGLang   = "sglang"
	Ollama   = "ollama"
)

// presets are the engines the router knows.
var presets = []Preset{
	// llama.cpp's server: GET /health is 503 {"error":{"message":"Loading
	// model"}} while loading, 200 {"status":"ok"} after; /metrics with
	// --metrics (tools/server/server.cpp). GET /v1/models: the OpenAI list
	// of the loaded model (several in its router mode), next to an
	// Ollama-style "models" list.
	// It does not read a request's model (tools/server/server.cpp reads
	// "model" only in its router mode): AnyModel.
	{Name: LlamaCpp, HealthPath: "/health", Metrics: LlamaCpp, ModelsPath: "/v1/models", AnyModel: true},
	// vLLM: GET /health is 200 once the engine serves (its API servers'
	// health route, vllm/entrypoints/openai/api_server.py); /metrics
	// always on. GET /v1/models lists the served model names and every
	// loaded LoRA adapter with "parent": its base model
	// (vllm/entrypoints/openai/serving_models.py, show_available_models).
	{Name: VLLM, HealthPath: "/health", Metrics: VLLM, ModelsPath: "/v1/models"},
	// SGLang: GET /health is 200 once serving (/health_generate also runs
	// a generation; python/sglang/srt/entrypoints/http_server.py); /metrics
	// with --enable-metrics. GET /v1/models: the OpenAI list.
	// A request's model selects only a LoRA adapter ("base:adapter");
	// any other name is served by the loaded model
	// (python/sglang/srt/entrypoints/openai/serving_chat.py): AnyModel.
	{Name: SGLang, HealthPath: "/health", Metrics: SGLang, ModelsPath: "/v1/models", AnyModel: true},
	// Ollama: no /health (404) and no /metrics; GET /api/version answers
	// {"version":"…"} as soon as the server listens (models load on the
	// first request that names them). GET /api/tags lists the pulled
	// models, {"models": [{"name": "llama3:latest", …}]} (docs/api.md, "List
	// Local Models"): the names a request may give.
	{Name: Ollama, HealthPath: "/api/version", Metrics: "", ModelsPath: "/api/tags", ModelsFormat: ModelsOllamaTags},
}

// Names lists the engines, in the order of the presets table.
func Names() []string {
	out := make([]string, len(presets))
	for i, p := range presets {
		out[i] = p.Name
	}
	return out
}

// PresetOf returns the preset of the engine called name.
func PresetOf(name string) (Preset, error) {
	i := slices.IndexFunc(presets, func(p Preset) bool { return p.Name == name })
	if i < 0 {
		return Preset{}, fmt.Errorf("unknown engine %q (known: %s)", name, strings.Join(Names(), ", "))
	}
	return presets[i], nil
}
