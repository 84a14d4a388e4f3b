package engine

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/llm-ring/llm-ring/internal/replicaset"
)

// ModelsFormat is the shape of an engine's model list (Preset.ModelsPath).
type ModelsFormat int

const (
	// ModelsOpenAI is GET /v1/models: {"object": "list", "data": [{"id":
	// …, "parent": …}]}; parent (vLLM) names a LoRA adapter's base model,
	// absent or null for a base model.
	ModelsOpenAI ModelsFormat = iota
	// ModelsOllamaTags is Ollama's GET /api/tags: {"models": [{"name": …}]}.
	ModelsOllamaTags
)

// ParseModels reads a model list answer of the given format into the
// models a replica serves: sorted by name, each name once (the first entry
// wins). An entry without a name, a body that is not such a list, and a
// list whose parent names itself are errors naming the entry. An empty list
// is an empty, non-nil result: the replica serves no model.
func ParseModels(f ModelsFormat, body []byte) ([]replicaset.Model, error) {
	type entry struct {
		ID     string  `json:"id"`
		Name   string  `json:"name"`
		Model  string  `json:"model"` // Ollama's second name field
		Parent *string `json:"parent"`
	}
	var in struct {
		Data   *[]entry `json:"data"`
		Models *[]entry `json:"models"`
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&in); err != nil {
		return nil, fmt.Errorf("model list: %w", err)
	}
	list, key := in.Data, "data"
	if f == ModelsOllamaTags {
		list, key = in.Models, "models"
	}
	if list == nil {
		return nil, fmt.Errorf("model list: no %q array", key)
	}
	out := make([]replicaset.Model, 0, len(*list))
	for i, e := range *list {
		m := replicaset.Model{Name: e.ID}
		if f == ModelsOllamaTags {
			m.Name = cmp.Or(e.Name, e.Model)
		} else if e.Parent != nil {
			m.Parent = *e.Parent
		}
		switch {
		case strings.TrimSpace(m.Name) == "":
			return nil, fmt.Errorf("model list: %s[%d]: no model name", key, i)
		case m.Parent == m.Name:
			return nil, fmt.Errorf("model list: %s[%d]: %q is its own parent", key, i, m.Name)
		}
		out = append(out, m)
	}
	return NormalizeModels(out), nil
}

// NormalizeModels sorts ms by name and keeps each name once (the first),
// so that two answers listing the same models in another order compare
// equal. nil stays nil (unknown).
func NormalizeModels(ms []replicaset.Model) []replicaset.Model {
	if ms == nil {
		return nil
	}
	out := slices.Clone(ms)
	slices.SortStableFunc(out, func(a, b replicaset.Model) int {
		return strings.Compare(a.Name, b.Name)
	})
	return slices.CompactFunc(out, func(a, b replicaset.Model) bool { return a.Name == b.Name })
}
