// Package engine speaks the inference engines' contracts for the router:
// what llama.cpp, vLLM and SGLang (and the Anthropic Messages API they
// serve) put in their requests and answers, as a small library the router's
// proxy calls. It does no I/O of its own beyond wrapping a response body.
//
//   - PrepareStream asks an OpenAI-style streamed request for usage
//     (stream_options.include_usage), so that the router learns exact
//     token counts from vLLM and SGLang, which report usage in a stream only
//     when asked.
//   - NewFilter wraps the replica's SSE body: it hands the usage it sees to a
//     callback and, when the router injected the option, removes the
//     usage-only last chunk (and moves llama.cpp's timings back where they
//     are without the option), so the client receives byte for byte the
//     stream it would have received directly.
//   - UsageOf reads the counts of a whole (non-streamed) answer of any shape.
//   - ParseMessages reads what the router needs of an Anthropic Messages
//     request; MergeModels joins several replicas' /v1/models answers.
package engine

import (
	"bytes"
	"encoding/json"
	"errors"
)

// Usage is what an engine reported about one answer.
type Usage struct {
	// Prompt is the prompt length in tokens; Cached of them were reused
	// from a cache (prefix cache, slot, or prompt cache).
	Prompt, Cached int
	// Completion is the number of generated tokens.
	Completion int
	// CachedKnown reports whether the engine said how many prompt tokens it
	// reused (llama.cpp's timings, usage.prompt_tokens_details, Anthropic's
	// cache_read_input_tokens); without it Cached is 0 and means unknown.
	CachedKnown bool
}

// answer is the part of every answer shape that carries counts.
type answer struct {
	Timings *struct {
		CacheN     int `json:"cache_n"`
		PromptN    int `json:"prompt_n"`
		PredictedN int `json:"predicted_n"`
	} `json:"timings"`
	Usage *struct {
		// OpenAI (llama.cpp, vLLM, SGLang).
		PromptTokens        *int `json:"prompt_tokens"`
		CompletionTokens    int  `json:"completion_tokens"`
		PromptTokensDetails *struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
		// Anthropic Messages.
		InputTokens              *int `json:"input_tokens"`
		OutputTokens             int  `json:"output_tokens"`
		CacheReadInputTokens     *int `json:"cache_read_input_tokens"`
		CacheCreationInputTokens int  `json:"cache_creation_input_tokens"`
	} `json:"usage"`
	// SGLang's native /generate: meta_info.
	MetaInfo *struct {
		PromptTokens     int  `json:"prompt_tokens"`
		CompletionTokens int  `json:"completion_tokens"`
		CachedTokens     *int `json:"cached_tokens"`
	} `json:"meta_info"`
	// Anthropic streams: message_start carries the message and its usage.
	Message *answer `json:"message"`
}

// ErrNoUsage is returned by UsageOf for an answer that reports no counts.
var ErrNoUsage = errors.New("the answer reports no token counts")

// UsageOf reads the counts of one JSON answer (or one SSE event's data):
// llama.cpp's timings (preferred: they split cached and processed tokens),
// OpenAI usage with prompt_tokens_details.cached_tokens, Anthropic usage
// (input_tokens + cache_read_input_tokens + cache_creation_input_tokens is
// the prompt), SGLang's meta_info. An Anthropic message_delta carries only
// output_tokens: Prompt is then 0 and the caller keeps message_start's.
func UsageOf(data []byte) (Usage, error) {
	var a answer
	if err := json.Unmarshal(data, &a); err != nil {
		return Usage{}, err
	}
	return a.usage()
}

func (a *answer) usage() (Usage, error) {
	switch {
	case a.Timings != nil:
		t := a.Timings
		return Usage{Prompt: t.CacheN + t.PromptN, Cached: t.CacheN, Completion: t.PredictedN, CachedKnown: true}, nil
	case a.Usage != nil && a.Usage.PromptTokens != nil:
		u := a.Usage
		out := Usage{Prompt: *u.PromptTokens, Completion: u.CompletionTokens}
		if u.PromptTokensDetails != nil {
			out.Cached, out.CachedKnown = u.PromptTokensDetails.CachedTokens, true
		}
		return out, nil
	case a.Usage != nil:
		u := a.Usage
		out := Usage{Completion: u.OutputTokens}
		if u.InputTokens != nil {
			out.Prompt = *u.InputTokens + u.CacheCreationInputTokens
		}
		if u.CacheReadInputTokens != nil {
			out.Prompt += *u.CacheReadInputTokens
			out.Cached, out.CachedKnown = *u.CacheReadInputTokens, true
		}
		return out, nil
	case a.MetaInfo != nil:
		m := a.MetaInfo
		out := Usage{Prompt: m.PromptTokens, Completion: m.CompletionTokens}
		if m.CachedTokens != nil {
			out.Cached, out.CachedKnown = *m.CachedTokens, true
		}
		return out, nil
	case a.Message != nil:
		return a.Message.usage()
	}
	return Usage{}, ErrNoUsage
}

// streamFields is what PrepareStream reads of a request.
type streamFields struct {
	Stream        bool            `json:"stream"`
	StreamOptions json.RawMessage `json:"stream_options"`
}

// ErrNotObject is returned by PrepareStream for a body that is not a JSON
// object.
var ErrNotObject = errors.New("request body: must be a JSON object")

// PrepareStream makes an OpenAI-style streamed request (chat or
// completions) ask for usage: when "stream" is true and
// stream_options.include_usage is not, it returns the body with
// "include_usage": true added (inside stream_options, or in a new
// "stream_options" member at the end) and injected true. Every other byte of
// the body is kept. A request that is not streamed, or already asks, comes
// back as it is.
func PrepareStream(body []byte) (newBody []byte, injected bool, err error) {
	var f streamFields
	if err := json.Unmarshal(body, &f); err != nil {
		return body, false, err
	}
	if !f.Stream {
		return body, false, nil
	}
	opts := bytes.TrimSpace(f.StreamOptions)
	if len(opts) > 0 && opts[0] == '{' {
		var so struct {
			IncludeUsage bool `json:"include_usage"`
		}
		if json.Unmarshal(opts, &so) == nil && so.IncludeUsage {
			return body, false, nil
		}
	}
	start, end, ok := memberSpan(body, "stream_options")
	if !ok {
		out, err := AddStreamOptions(body)
		return out, err == nil, err
	}
	val := body[start:end]
	var repl []byte
	if val[0] != '{' {
		repl = []byte(`{"include_usage":true}`) // null or another type
	} else if s, e, ok := memberSpan(val, "include_usage"); ok {
		repl = append(append(append([]byte{}, val[:s]...), "true"...), val[e:]...)
	} else {
		sep := ","
		if len(bytes.TrimSpace(val[1:len(val)-1])) == 0 {
			sep = ""
		}
		repl = append([]byte(`{"include_usage":true`+sep), val[1:]...)
	}
	out := make([]byte, 0, len(body)+len(repl))
	out = append(out, body[:start]...)
	out = append(out, repl...)
	return append(out, body[end:]...), true, nil
}

// AddStreamOptions is PrepareStream for a streamed request the caller
// knows has no stream_options member (the router's one-pass parse saw the
// whole object): it adds "stream_options":{"include_usage":true} before
// the object's closing brace, keeping every other byte.
func AddStreamOptions(body []byte) ([]byte, error) {
	close := bytes.LastIndexByte(body, '}')
	open := bytes.IndexByte(body, '{')
	if close < 0 || open < 0 || open > close {
		return body, ErrNotObject
	}
	sep := ","
	if len(bytes.TrimSpace(body[open+1:close])) == 0 {
		sep = ""
	}
	out := make([]byte, 0, len(body)+40)
	out = append(out, body[:close]...)
	out = append(out, sep...)
	out = append(out, `"stream_options":{"include_usage":true}`...)
	return append(out, body[close:]...), nil
}

// memberSpan finds the value of key among obj's top-level members: its
// byte span [start, end). The last occurrence wins, as in encoding/json.
// obj must be valid JSON (both callers' was decoded by encoding/json
// first): this walks it without checking it (span.go).
func memberSpan(obj []byte, key string) (start, end int, ok bool) {
	return fastMemberSpan(obj, key)
}
