package router

import (
	"encoding/json"

	"github.com/llm-ring/llm-ring/internal/convo"
	"github.com/llm-ring/llm-ring/internal/engine"
	"github.com/llm-ring/llm-ring/internal/prefix"
)

// Ollama's native API (package engine's ollama.go says what its answers
// hold). POST /api/chat is read like an OpenAI chat (messages of role and
// content: the same key, blocks and turn, so a conversation keeps its
// replica whichever API a turn uses); POST /api/generate like a chat of
// its system and prompt. Both stream NDJSON by default. GET /api/tags,
// /api/ps and /api/version are answered from every healthy replica's
// (paths.go).
const (
	pathOllamaChat     = "/api/chat"
	pathOllamaGenerate = "/api/generate"
	pathOllamaTags     = "/api/tags"
	pathOllamaPS       = "/api/ps"
	pathOllamaVersion  = "/api/version"
)

// ollamaStream reads "stream": absent or null means true for Ollama.
func ollamaStream(top map[string]json.RawMessage) (bool, error) {
	if raw, ok := top["stream"]; !ok || isNull(raw) {
		return true, nil
	}
	return optBool(top, "stream")
}

// ollamaMaxTokens reads options.num_predict: the requested output; absent,
// -1 (unlimited) or -2 (fill the context) give def.
func ollamaMaxTokens(top map[string]json.RawMessage, def, limit int) (int, error) {
	raw, ok := top["options"]
	if !ok || isNull(raw) {
		return def, nil
	}
	var opts map[string]json.RawMessage
	if err := json.Unmarshal(raw, &opts); err != nil || opts == nil {
		return 0, badRequest("options: must be an object")
	}
	raw, ok = opts["num_predict"]
	if !ok || isNull(raw) {
		return def, nil
	}
	var n int
	if err := json.Unmarshal(raw, &n); err != nil {
		return 0, badRequest("options.num_predict: must be an integer")
	}
	if n < -2 {
		return 0, badRequest("options.num_predict: must be ≥ -2, got %d", n)
	}
	if n > limit {
		return 0, badRequest("options.num_predict: must be ≤ max_output_tokens (%d), got %d", limit, n)
	}
	if n < 0 {
		return def, nil
	}
	return n, nil
}

// parseOllamaGenerate reads POST /api/generate: its system and prompt, as
// a chat of a system message and one user message.
func (p *parsed) parseOllamaGenerate(top map[string]json.RawMessage, prefixChars int, hs *prefix.Hasher) (string, error) {
	text := func(name string) (string, error) {
		raw, ok := top[name]
		if !ok || isNull(raw) {
			return "", nil
		}
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", badRequest("%s: must be a string", name)
		}
		return s, nil
	}
	system, err := text("system")
	if err != nil {
		return "", err
	}
	prompt, err := text("prompt")
	if err != nil {
		return "", err
	}
	var acc convo.Accumulator
	acc.Reset(prefixChars, hs)
	if system != "" {
		acc.Add("system", system)
	}
	acc.Add("user", prompt)
	return p.accumulated(acc.Routing()), nil
}

// ollamaCounts reads the counts of an Ollama answer: the whole body (one
// object, or the NDJSON stream, which the observer keeps whole because it
// is not SSE). prompt_eval_count counts the whole prompt, cached tokens
// included, and Ollama does not say how many were reused: the cached share
// is unknown (as vLLM's without its report option), not zero.
func ollamaCounts(data []byte, sse bool) (counts, bool) {
	if sse {
		return counts{}, false
	}
	u, ok := engine.OllamaUsage(data)
	if !ok {
		return counts{}, false
	}
	return counts{known: true, promptN: u.Prompt, predictedN: u.Completion, cachedUnknown: true,
		promptMS: float64(u.PromptNS) / 1e6, predictedMS: float64(u.EvalNS) / 1e6}, true
}

// countsParser is the observer's reader of counts for an API whose answers
// are not OpenAI-shaped (nil: the observer's own).
func countsParser(kind apiKind) func([]byte, bool) (counts, bool) {
	switch kind {
	case kindMessages:
		return messagesCounts
	case kindOllamaChat, kindOllamaGenerate:
		return ollamaCounts
	}
	return nil
}
