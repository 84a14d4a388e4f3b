package engine

import (
	"slices"
	"strings"
	"testing"

	"github.com/llm-ring/llm-ring/internal/replicaset"
)

func TestPresetsListModels(t *testing.T) {
	// Every engine says where it lists its models, and in which shape.
	want := map[string][2]any{
		LlamaCpp: {"/v1/models", ModelsOpenAI},
		VLLM:     {"/v1/models", ModelsOpenAI},
		SGLang:   {"/v1/models", ModelsOpenAI},
		Ollama:   {"/api/tags", ModelsOllamaTags},
	}
	for _, name := range Names() {
		p, _ := PresetOf(name)
		if got := [2]any{p.ModelsPath, p.ModelsFormat}; got != want[name] {
			t.Errorf("%s: models %v, want %v", name, got, want[name])
		}
	}
}

func TestParseModels(t *testing.T) {
	m := func(pairs ...string) []replicaset.Model {
		out := []replicaset.Model{}
		for i := 0; i < len(pairs); i += 2 {
			out = append(out, replicaset.Model{Name: pairs[i], Parent: pairs[i+1]})
		}
		return out
	}
	tests := []struct {
		name   string
		format ModelsFormat
		body   string
		want   []replicaset.Model
		err    string
	}{
		// vLLM with a LoRA adapter: the base's parent is null, the adapter's
		// names the base (serving_models.py, show_available_models).
		{"vllm adapters", ModelsOpenAI, `{"object":"list","data":[
			{"id":"sql-lora","object":"model","root":"/adapters/sql","parent":"llama-3.1-8b"},
			{"id":"llama-3.1-8b","object":"model","root":"meta-llama/Llama-3.1-8B","parent":null}]}`,
			m("llama-3.1-8b", "", "sql-lora", "llama-3.1-8b"), ""},
		// llama.cpp answers both lists: the OpenAI one is read.
		{"llama.cpp both lists", ModelsOpenAI, `{"models":[{"name":"x"}],"object":"list","data":[{"id":"qwen"}]}`,
			m("qwen", ""), ""},
		// Order and duplicates do not matter.
		{"sorted and unique", ModelsOpenAI, `{"data":[{"id":"b"},{"id":"a"},{"id":"b"}]}`, m("a", "", "b", ""), ""},
		// No model at all: known to serve nothing (non-nil).
		{"empty", ModelsOpenAI, `{"data":[]}`, m(), ""},
		// Ollama's tags: the name, or its model field.
		{"ollama tags", ModelsOllamaTags, `{"models":[{"name":"llama3:latest","model":"llama3:latest"},{"model":"qwen2:7b"}]}`,
			m("llama3:latest", "", "qwen2:7b", ""), ""},
		// Malformed answers are errors that say what is wrong.
		{"not json", ModelsOpenAI, `<html>`, nil, "model list:"},
		{"no data", ModelsOpenAI, `{"models":[{"name":"x"}]}`, nil, `no "data" array`},
		{"ollama wrong shape", ModelsOllamaTags, `{"data":[{"id":"x"}]}`, nil, `no "models" array`},
		{"entry without id", ModelsOpenAI, `{"data":[{"id":"a"},{"object":"model"}]}`, nil, "data[1]: no model name"},
		{"own parent", ModelsOpenAI, `{"data":[{"id":"a","parent":"a"}]}`, nil, `data[0]: "a" is its own parent`},
		{"data not array", ModelsOpenAI, `{"data":{}}`, nil, "model list:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseModels(tt.format, []byte(tt.body))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil || got == nil || !slices.Equal(got, tt.want) {
				t.Fatalf("got %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

func TestNormalizeModels(t *testing.T) {
	if NormalizeModels(nil) != nil {
		t.Error("nil (unknown) must stay nil")
	}
	in := []replicaset.Model{{Name: "b"}, {Name: "a", Parent: "x"}, {Name: "a"}}
	got := NormalizeModels(in)
	if want := []replicaset.Model{{Name: "a", Parent: "x"}, {Name: "b"}}; !slices.Equal(got, want) {
		t.Errorf("got %v, want %v (the first entry of a name wins)", got, want)
	}
	if in[0].Name != "b" {
		t.Error("the input was modified")
	}
}
