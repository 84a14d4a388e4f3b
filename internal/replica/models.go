package replica

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
)

// Adapter is a LoRA adapter a replica serves on top of one of its models
// (vLLM's --lora-modules name=path, with the base model as its parent).
type Adapter struct {
	Name string // the model name a request gives to use it
	Base string // its base model ("": the replica's first model, or Alias)
}

// ParseAdapters reads `name:base` entries (`name` alone: the first
// model), as `llm-ring replica --adapters x:a,y:a` gives them.
func ParseAdapters(list []string) ([]Adapter, error) {
	out := make([]Adapter, 0, len(list))
	for _, s := range list {
		name, base, _ := strings.Cut(strings.TrimSpace(s), ":")
		if name == "" {
			return nil, fmt.Errorf("adapter %q: the name is empty (want name:base)", s)
		}
		out = append(out, Adapter{Name: name, Base: base})
	}
	return out, nil
}

// served is what a host serves: its models and adapters (Options.Models
// and Options.Adapters), checked.
type served struct {
	models   []string          // base models; nil: any name is accepted
	adapters []Adapter         // in the order given, Base filled in
	parent   map[string]string // adapter → base model
}

// newServed checks opts' models and adapters: names unique and non-empty,
// an adapter's base among the models (when they are given).
func newServed(opts Options, alias string) (served, error) {
	s := served{parent: map[string]string{}}
	seen := map[string]bool{}
	for _, m := range opts.Models {
		if m == "" || seen[m] {
			return served{}, fmt.Errorf("models: %q is empty or given twice", m)
		}
		seen[m] = true
		s.models = append(s.models, m)
	}
	first := alias
	if len(s.models) > 0 {
		first = s.models[0]
	}
	for _, a := range opts.Adapters {
		switch {
		case a.Name == "":
			return served{}, errors.New("adapters: an adapter name is empty")
		case seen[a.Name]:
			return served{}, fmt.Errorf("adapters: %q is already a model or an adapter", a.Name)
		case a.Base == "":
			a.Base = first
		case len(s.models) > 0 && !slices.Contains(s.models, a.Base):
			return served{}, fmt.Errorf("adapters: %q's base model %q is not among --models %s",
				a.Name, a.Base, strings.Join(s.models, ","))
		}
		seen[a.Name] = true
		s.adapters = append(s.adapters, a)
		s.parent[a.Name] = a.Base
	}
	return s, nil
}

// resolve maps a request's model name to the adapter it runs with ("" for
// a base model). ok is false for a model the replica does not serve
// (only when its models are given; "" is the first model).
func (s *served) resolve(name string) (adapter string, ok bool) {
	if _, isAdapter := s.parent[name]; isAdapter {
		return name, true
	}
	if s.models == nil || name == "" || slices.Contains(s.models, name) {
		return "", true
	}
	return "", false
}

// notFound is vLLM's answer to an unknown model (vllm/entrypoints/openai
// serving_engine.py _check_model; the ErrorResponse{error: ErrorInfo}
// shape of vllm/entrypoints/serve/engine/protocol.py).
type notFound struct {
	Error struct {
		Message string `json:"message"`
		Type    string `json:"type"`
		Param   string `json:"param"`
		Code    int    `json:"code"`
	} `json:"error"`
}

// resolveModel resolves a request's model name; for a model not served it
// answers 404 (vLLM's shape on the vllm and sglang faces, llama.cpp's on
// its own) and returns ok false.
func (r *Replica) resolveModel(w http.ResponseWriter, name string) (adapter string, ok bool) {
	adapter, ok = r.h.served.resolve(name)
	if ok {
		return adapter, true
	}
	if base, a, cut := strings.Cut(name, ":"); cut && r.h.api == APISGLang && r.h.served.parent[a] == base {
		return a, true // SGLang's model "base:adapter" (python/sglang/srt/entrypoints/openai)
	}
	msg := fmt.Sprintf("The model `%s` does not exist.", name)
	if r.h.api == APILlamaCpp {
		writeError(w, http.StatusNotFound, "not_found_error", msg)
		return "", false
	}
	var body notFound
	body.Error.Message, body.Error.Type, body.Error.Param, body.Error.Code = msg, "NotFoundError", "model", http.StatusNotFound
	writeJSON(w, http.StatusNotFound, body)
	return "", false
}

// baseModels are the models GET /v1/models lists first.
func (h *Host) baseModels() []string {
	if len(h.served.models) > 0 {
		return h.served.models
	}
	return []string{h.alias}
}

// engineCards are vLLM's GET /v1/models cards (vllm/entrypoints/openai
// serving_models.py show_available_models): each base model (root its
// path, here its name; parent null), then each adapter (root its path,
// here its name; parent its base model; no max_model_len).
func (r *Replica) engineCards(created int64) []engineModel {
	var out []engineModel
	maxLen := r.h.modelConfig.CtxSize
	for _, m := range r.h.baseModels() {
		out = append(out, engineModel{ID: m, Object: "model", Created: created, OwnedBy: r.h.api, Root: m,
			MaxModelLen: &maxLen})
	}
	for _, a := range r.h.served.adapters {
		out = append(out, engineModel{ID: a.Name, Object: "model", Created: created, OwnedBy: r.h.api, Root: a.Name,
			Parent: &a.Base})
	}
	return out
}
