package replica

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/llm-ring/llm-ring/internal/model"
	"github.com/llm-ring/llm-ring/internal/wire"
)

// completionBody is /completion's request: wire's subset plus what only the
// replica reads.
type completionBody struct {
	wire.CompletionRequest
	ReturnTokens bool `json:"return_tokens"`
}

// completionPartial is one streamed /completion chunk (llama.cpp's
// server_task_result_cmpl_partial::to_json_non_oaicompat).
type completionPartial struct {
	Index           int    `json:"index"`
	Content         string `json:"content"`
	Tokens          []int  `json:"tokens"`
	Stop            bool   `json:"stop"`
	IDSlot          int    `json:"id_slot"`
	TokensPredicted int    `json:"tokens_predicted"`
	TokensEvaluated int    `json:"tokens_evaluated"`
}

// completionFinal is /completion's answer, or the last chunk of its stream
// (server_task_result_cmpl_final::to_json_non_oaicompat).
type completionFinal struct {
	Index              int            `json:"index"`
	Content            string         `json:"content"`
	Tokens             []int          `json:"tokens"`
	IDSlot             int            `json:"id_slot"`
	Stop               bool           `json:"stop"`
	Model              string         `json:"model"`
	TokensPredicted    int            `json:"tokens_predicted"`
	TokensEvaluated    int            `json:"tokens_evaluated"`
	GenerationSettings map[string]any `json:"generation_settings"`
	Prompt             string         `json:"prompt"`
	HasNewLine         bool           `json:"has_new_line"`
	Truncated          bool           `json:"truncated"`
	StopType           string         `json:"stop_type"`
	StoppingWord       string         `json:"stopping_word"`
	TokensCached       int            `json:"tokens_cached"`
	Timings            *wire.Timings  `json:"timings"`
}

func tokenIDs(toks []model.Token) []int {
	out := make([]int, len(toks))
	for i, t := range toks {
		out[i] = int(t)
	}
	return out
}

// completion serves llama.cpp's native POST /completion.
func (r *Replica) completion(w http.ResponseWriter, req *http.Request) {
	var body completionBody
	if !decode(w, req, &body) {
		return
	}
	toks, err := promptTokens(body.Prompt)
	if err != nil {
		writeError(w, http.StatusBadRequest, wire.ErrTypeInvalidRequest, err.Error())
		return
	}
	id, wt, ok := r.start(w, model.Request{
		Tokens:      toks,
		NoCache:     body.CachePrompt != nil && !*body.CachePrompt,
		Seed:        seedOf(body.Seed),
		TokenEvents: body.Stream,
	}, body.NPredict)
	if !ok {
		return
	}
	nPredict, seed := -1, int64(defaultSeed)
	if body.NPredict != nil {
		nPredict = *body.NPredict
	}
	if body.Seed != nil {
		seed = *body.Seed
	}
	final := func(res *model.Result, content string) completionFinal {
		out := completionFinal{
			Content:            content,
			Tokens:             []int{},
			IDSlot:             res.Slot,
			Stop:               true,
			Model:              r.h.alias,
			TokensPredicted:    res.PredictedN,
			TokensEvaluated:    res.PromptTokens,
			GenerationSettings: r.generationSettings(nPredict, body.Stream, seed),
			Prompt:             r.promptText(body.Prompt, toks),
			HasNewLine:         strings.Contains(res.Output.Text, "\n"),
			StopType:           string(res.Stop),
			TokensCached:       res.PromptTokens + max(res.PredictedN-1, 0),
			Timings:            timingsOf(res),
		}
		if body.ReturnTokens && !body.Stream {
			out.Tokens = tokenIDs(res.Output.Tokens)
		}
		return out
	}
	if !body.Stream {
		res, err := r.await(req.Context(), id, wt, nil)
		if err != nil {
			r.awaitFailed(w, err)
			return
		}
		r.finished(req, res)
		writeJSON(w, http.StatusOK, final(res, res.Output.Text))
		return
	}
	sse := startSSE(w)
	res, err := r.await(req.Context(), id, wt, func(ev model.Event) error {
		c := completionPartial{
			Content:         ev.Piece,
			Tokens:          []int{},
			IDSlot:          -1,
			TokensPredicted: ev.N,
			TokensEvaluated: len(toks),
		}
		if body.ReturnTokens {
			c.Tokens = []int{int(ev.Token)}
		}
		return sse.send(c)
	})
	if err != nil {
		return // the client is gone or the host closed: nothing more to say
	}
	r.finished(req, res)
	_ = sse.send(final(res, ""))
}

// promptText is the "prompt" of /completion's final answer: llama.cpp gives
// the prompt's tokens detokenized; a string prompt is itself.
func (r *Replica) promptText(raw json.RawMessage, toks []model.Token) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '"' {
		var s string
		if json.Unmarshal(raw, &s) == nil {
			return s
		}
	}
	return r.h.vocab.text(tokenIDs(toks))
}

// finished logs a result and remembers the text of its tokens (/detokenize).
func (r *Replica) finished(req *http.Request, res *model.Result) {
	r.logResult(req, res)
	r.h.vocab.learnOutput(&res.Output)
}

// chatBody is /v1/chat/completions' request: wire's subset plus what only
// the replica reads.
type chatBody struct {
	wire.ChatRequest
	AddGenerationPrompt  *bool           `json:"add_generation_prompt"`
	ContinueFinalMessage json.RawMessage `json:"continue_final_message"`
	ResponseFormat       json.RawMessage `json:"response_format"`
}

// Errors llama.cpp answers with 400 (tools/server/server-common.cpp,
// oaicompat_chat_params_parse).
const (
	errTwoAssistants  = "Cannot have 2 or more assistant messages at the end of the list."
	errContinueAndGen = "Cannot set both add_generation_prompt and continue_final_message to true."
)

// checkResponseFormat applies llama.cpp's rules to response_format: type
// "text", "json_object" (optional "schema") or "json_schema"
// ("json_schema.schema"); any other type is refused, and so is a schema
// that is not a JSON Schema object (llama.cpp fails to turn it into a
// grammar; tests/unit/test_chat_completion.py,
// test_completion_with_response_format).
func checkResponseFormat(raw json.RawMessage) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' {
		return nil // llama.cpp's json_value falls back to {} for other types
	}
	var rf struct {
		Type       string          `json:"type"`
		Schema     json.RawMessage `json:"schema"`
		JSONSchema *struct {
			Schema json.RawMessage `json:"schema"`
		} `json:"json_schema"`
	}
	if err := json.Unmarshal(raw, &rf); err != nil {
		return fmt.Errorf("response_format: %v", err)
	}
	var schema json.RawMessage
	switch rf.Type {
	case "", "text":
		return nil
	case "json_object":
		schema = rf.Schema
	case "json_schema":
		if rf.JSONSchema != nil {
			schema = rf.JSONSchema.Schema
		}
	default:
		return fmt.Errorf(`response_format type must be one of "text" or "json_object", but got: %s`, rf.Type)
	}
	schema = bytes.TrimSpace(schema)
	if len(schema) == 0 || bytes.Equal(schema, []byte("null")) {
		return nil
	}
	var s struct {
		Type json.RawMessage `json:"type"`
	}
	if schema[0] != '{' || json.Unmarshal(schema, &s) != nil {
		return fmt.Errorf(`"json_schema": Unrecognized schema: %s`, schema)
	}
	if len(s.Type) == 0 {
		return nil
	}
	var typ string
	if json.Unmarshal(s.Type, &typ) != nil {
		var types []string
		if json.Unmarshal(s.Type, &types) == nil {
			return nil // a union of types
		}
		return fmt.Errorf(`"json_schema": Unrecognized schema: %s`, schema)
	}
	switch typ {
	case "string", "number", "integer", "boolean", "object", "array", "null":
		return nil
	}
	return fmt.Errorf(`"json_schema": Unrecognized schema: %s`, schema)
}

// continuation reads continue_final_message: absent, null or false mean no.
func continuation(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) > 0 && !bytes.Equal(raw, []byte("null")) && !bytes.Equal(raw, []byte("false"))
}

// chatTokens renders a chat request's prompt with llama.cpp's rules for a
// trailing assistant message (a prefill the answer continues) and
// continue_final_message / add_generation_prompt. Errors are 400s.
func chatTokens(body *chatBody, msgs []model.Message) ([]model.Token, error) {
	if err := checkResponseFormat(body.ResponseFormat); err != nil {
		return nil, err
	}
	addGen := body.AddGenerationPrompt == nil || *body.AddGenerationPrompt
	cont := continuation(body.ContinueFinalMessage)
	last := len(msgs) - 1
	if !cont && msgs[last].Role == "assistant" {
		if last > 0 && msgs[last-1].Role == "assistant" {
			return nil, errors.New(errTwoAssistants)
		}
		cont, addGen = true, false
	}
	if cont && addGen {
		return nil, errors.New(errContinueAndGen)
	}
	if !cont && addGen {
		return model.ChatTokens(msgs), nil
	}
	var toks []model.Token
	if model.NeedsDefaultSystem(msgs) {
		toks = model.AppendMessageTokens(toks, model.Message{Role: "system", Content: model.DefaultSystemPrompt})
	}
	if !cont {
		for _, m := range msgs {
			toks = model.AppendMessageTokens(toks, m)
		}
		return toks, nil
	}
	// Continue the last message: its header, its text, no end of turn.
	for _, m := range msgs[:last] {
		toks = model.AppendMessageTokens(toks, m)
	}
	toks = append(toks, model.TokImStart)
	toks = model.AppendTokens(toks, msgs[last].Role+"\n")
	return model.AppendTokens(toks, msgs[last].Content), nil
}

// chat serves the OpenAI-compatible POST /v1/chat/completions.
func (r *Replica) chat(w http.ResponseWriter, req *http.Request) {
	var body chatBody
	if !decode(w, req, &body) {
		return
	}
	adapter, ok := r.resolveModel(w, body.Model)
	if !ok {
		return
	}
	msgs, err := model.MessagesFromWire(body.Messages)
	if err != nil {
		writeError(w, http.StatusBadRequest, wire.ErrTypeInvalidRequest, err.Error())
		return
	}
	toks, err := chatTokens(&body, msgs)
	if err != nil {
		writeError(w, http.StatusBadRequest, wire.ErrTypeInvalidRequest, err.Error())
		return
	}
	id, wt, ok := r.start(w, model.Request{Tokens: toks, Seed: seedOf(body.Seed), TokenEvents: body.Stream, Adapter: adapter},
		body.MaxCompletionTokens, body.MaxTokens, body.NPredict)
	if !ok {
		return
	}
	f := r.face()
	base := wire.ChatResponse{
		ID:                fmt.Sprintf("chatcmpl-%s-%d", r.name, id),
		Created:           r.h.clock.Now().Unix(),
		Model:             r.modelName(body.Model),
		SystemFingerprint: f.fingerprint,
	}
	if !body.Stream {
		res, err := r.await(req.Context(), id, wt, nil)
		if err != nil {
			r.awaitFailed(w, err)
			return
		}
		r.finished(req, res)
		out := base
		out.Object = "chat.completion"
		out.Choices = []wire.ChatChoice{{
			Message:      &wire.ChatMessage{Role: "assistant", Content: wire.TextContent(res.Output.Text)},
			FinishReason: wire.Ptr(finishReason(res)),
		}}
		out.Usage = r.usageOf(res)
		out.Timings = f.timings(res)
		writeJSON(w, http.StatusOK, out)
		return
	}
	r.chatStream(w, req, id, wt, f, base, body.StreamOptions != nil && body.StreamOptions.IncludeUsage)
}

// chatStream streams a chat answer as SSE chunks in the face's manner.
func (r *Replica) chatStream(w http.ResponseWriter, req *http.Request, id model.ID, wt *waiter, f face, base wire.ChatResponse, includeUsage bool) {
	sse := startSSE(w)
	chunk := base
	chunk.Object = "chat.completion.chunk"
	// vLLM and SGLang put the finish reason on the last token's chunk;
	// llama.cpp sends it in a chunk of its own with an empty delta. The
	// face's lastOnToken tells which; a token chunk is held back by one so
	// that the last one can carry it.
	var held *wire.ChatResponse
	res, err := r.await(req.Context(), id, wt, func(ev model.Event) error {
		if ev.Kind == model.EventFirstToken {
			c := chunk
			c.Choices = []wire.ChatChoice{{Delta: f.roleDelta()}}
			if err := sse.send(c); err != nil {
				return err
			}
		}
		if held != nil {
			if err := sse.send(*held); err != nil {
				return err
			}
		}
		c := chunk
		c.Choices = []wire.ChatChoice{{Delta: &wire.ChatDelta{Content: wire.Ptr(ev.Piece)}}}
		if !f.finishOnLastToken {
			held = nil
			return sse.send(c)
		}
		held = &c
		return nil
	})
	if err != nil {
		return
	}
	r.finished(req, res)
	last := chunk
	last.Choices = []wire.ChatChoice{{Delta: &wire.ChatDelta{}, FinishReason: wire.Ptr(finishReason(res))}}
	if held != nil {
		last = *held
		last.Choices[0].FinishReason = wire.Ptr(finishReason(res))
	}
	if includeUsage {
		if sse.send(last) != nil {
			return
		}
		last = chunk
		last.Choices = []wire.ChatChoice{}
		last.Usage = r.usageOf(res)
	}
	last.Timings = f.timings(res)
	if sse.send(last) == nil {
		sse.done()
	}
}

// oaiCompletion serves the OpenAI-compatible POST /v1/completions.
func (r *Replica) oaiCompletion(w http.ResponseWriter, req *http.Request) {
	var body wire.CompletionsRequest
	if !decode(w, req, &body) {
		return
	}
	adapter, ok := r.resolveModel(w, body.Model)
	if !ok {
		return
	}
	toks, err := promptTokens(body.Prompt)
	if err != nil {
		writeError(w, http.StatusBadRequest, wire.ErrTypeInvalidRequest, err.Error())
		return
	}
	id, wt, ok := r.start(w, model.Request{Tokens: toks, Seed: seedOf(body.Seed), TokenEvents: body.Stream, Adapter: adapter},
		body.MaxTokens, body.NPredict)
	if !ok {
		return
	}
	f := r.face()
	base := wire.CompletionsResponse{
		ID:                fmt.Sprintf("cmpl-%s-%d", r.name, id),
		Object:            "text_completion",
		Created:           r.h.clock.Now().Unix(),
		Model:             r.modelName(body.Model),
		SystemFingerprint: f.fingerprint,
	}
	if !body.Stream {
		res, err := r.await(req.Context(), id, wt, nil)
		if err != nil {
			r.awaitFailed(w, err)
			return
		}
		r.finished(req, res)
		out := base
		out.Choices = []wire.CompletionsChoice{{Text: res.Output.Text, FinishReason: wire.Ptr(finishReason(res))}}
		out.Usage = r.usageOf(res)
		out.Timings = f.timings(res)
		writeJSON(w, http.StatusOK, out)
		return
	}
	r.completionsStream(w, req, id, wt, f, base, body.StreamOptions != nil && body.StreamOptions.IncludeUsage)
}

// completionsStream streams a completion as SSE chunks in the face's manner.
func (r *Replica) completionsStream(w http.ResponseWriter, req *http.Request, id model.ID, wt *waiter, f face, base wire.CompletionsResponse, includeUsage bool) {
	sse := startSSE(w)
	var held *wire.CompletionsResponse
	res, err := r.await(req.Context(), id, wt, func(ev model.Event) error {
		if held != nil {
			if err := sse.send(*held); err != nil {
				return err
			}
		}
		c := base
		c.Choices = []wire.CompletionsChoice{{Text: ev.Piece}}
		if !f.finishOnLastToken {
			return sse.send(c)
		}
		held = &c
		return nil
	})
	if err != nil {
		return
	}
	r.finished(req, res)
	last := base
	last.Choices = []wire.CompletionsChoice{{FinishReason: wire.Ptr(finishReason(res))}}
	if held != nil {
		last = *held
		last.Choices[0].FinishReason = wire.Ptr(finishReason(res))
	}
	switch {
	case f.completionsUsageAlways:
		// llama.cpp: the finish chunk carries usage and timings whatever
		// the client asked (server-task.cpp, to_json_oaicompat).
		last.Usage = r.usageOf(res)
	case includeUsage:
		if sse.send(last) != nil {
			return
		}
		last = base
		last.Choices = []wire.CompletionsChoice{}
		last.Usage = r.usageOf(res)
	}
	last.Timings = f.timings(res)
	if sse.send(last) == nil {
		sse.done()
	}
}

// usageOf is the OpenAI usage block of a result; prompt_tokens_details is
// there when the engine reports it (llama.cpp always; vLLM and SGLang with
// their option, Options.CacheReport).
func (r *Replica) usageOf(res *model.Result) *wire.Usage {
	u := &wire.Usage{
		PromptTokens:     res.PromptTokens,
		CompletionTokens: res.PredictedN,
		TotalTokens:      res.PromptTokens + res.PredictedN,
	}
	if r.h.cacheReport {
		u.PromptTokensDetails = &wire.PromptTokensDetails{CachedTokens: res.CacheN}
	}
	return u
}
