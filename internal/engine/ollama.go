package engine

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Ollama's native API (github.com/ollama/ollama, api/types.go and
// docs/api.md): POST /api/chat and /api/generate answer one JSON object,
// or, streamed (the default: "stream" absent means true), NDJSON: one
// object per line, the last with "done": true and the counts. The counts
// are prompt_eval_count (the prompt's tokens: measured against Ollama
// 0.17.4, it counts the whole prompt even when the runner reused most of
// it from its cache, see docs/notes/ollama.md), eval_count (generated
// tokens) and their durations in nanoseconds.

// OllamaFinal is the counts of an Ollama answer's final object.
type OllamaFinal struct {
	// Prompt is prompt_eval_count: every prompt token, cached or not.
	Prompt int
	// Completion is eval_count.
	Completion int
	// PromptNS and EvalNS are prompt_eval_duration and eval_duration:
	// the time spent on the tokens actually evaluated.
	PromptNS, EvalNS int64
}

// ollamaObject is the part of an Ollama answer object that carries counts.
type ollamaObject struct {
	Done               bool  `json:"done"`
	PromptEvalCount    int   `json:"prompt_eval_count"`
	EvalCount          int   `json:"eval_count"`
	PromptEvalDuration int64 `json:"prompt_eval_duration"`
	EvalDuration       int64 `json:"eval_duration"`
}

// OllamaUsage reads the counts of an Ollama /api/chat or /api/generate
// answer: a single JSON object, or a whole NDJSON stream (its last object
// with "done": true). ok is false when no final object is found.
func OllamaUsage(body []byte) (OllamaFinal, bool) {
	body = bytes.TrimSpace(body)
	for len(body) > 0 {
		line := body
		if i := bytes.LastIndexByte(body, '\n'); i >= 0 {
			line, body = body[i+1:], bytes.TrimSpace(body[:i])
		} else {
			body = nil
		}
		var o ollamaObject
		if json.Unmarshal(bytes.TrimSpace(line), &o) != nil || !o.Done {
			continue
		}
		return OllamaFinal{Prompt: o.PromptEvalCount, Completion: o.EvalCount,
			PromptNS: o.PromptEvalDuration, EvalNS: o.EvalDuration}, true
	}
	return OllamaFinal{}, false
}

// MergeOllamaModels joins several replicas' GET /api/tags (or /api/ps)
// answers, {"models": [{"name": …, …}]}, into one: each name once (the
// first replica's entry), sorted by name. An answer that is not such a
// list is an error naming it.
func MergeOllamaModels(lists ...[]byte) ([]byte, error) {
	seen := map[string]json.RawMessage{}
	for i, l := range lists {
		var in struct {
			Models []json.RawMessage `json:"models"`
		}
		if err := json.Unmarshal(l, &in); err != nil {
			return nil, fmt.Errorf("model list %d: %w", i, err)
		}
		for j, m := range in.Models {
			var id struct {
				Name string `json:"name"`
			}
			if err := json.Unmarshal(m, &id); err != nil || id.Name == "" {
				return nil, fmt.Errorf("model list %d: models[%d]: must be an object with a name", i, j)
			}
			if _, ok := seen[id.Name]; !ok {
				seen[id.Name] = m
			}
		}
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	slices.Sort(names)
	out := make([]json.RawMessage, len(names))
	for i, n := range names {
		out[i] = seen[n]
	}
	return json.Marshal(struct {
		Models []json.RawMessage `json:"models"`
	}{out})
}

// MergeOllamaVersion joins several replicas' GET /api/version answers
// ({"version": "…"}): the lowest version when they differ (the one a
// client must be compatible with), compared number by number.
func MergeOllamaVersion(lists ...[]byte) ([]byte, error) {
	var low string
	for i, l := range lists {
		var v struct {
			Version string `json:"version"`
		}
		if err := json.Unmarshal(l, &v); err != nil || v.Version == "" {
			return nil, fmt.Errorf("version %d: must be an object with a version", i)
		}
		if low == "" || versionLess(v.Version, low) {
			low = v.Version
		}
	}
	return json.Marshal(map[string]string{"version": low})
}

// versionLess compares dotted versions number by number ("0.9.1" <
// "0.10.0"); a part that is not a number compares as text.
func versionLess(a, b string) bool {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := range min(len(as), len(bs)) {
		x, errX := strconv.Atoi(as[i])
		y, errY := strconv.Atoi(bs[i])
		switch {
		case errX == nil && errY == nil && x != y:
			return x < y
		case (errX != nil || errY != nil) && as[i] != bs[i]:
			return as[i] < bs[i]
		}
	}
	return len(as) < len(bs)
}
