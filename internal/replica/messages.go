package replica

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/llm-ring/llm-ring/internal/model"
	"github.com/llm-ring/llm-ring/internal/wire"
)

// The Anthropic Messages API (POST /v1/messages), as llama.cpp serves it:
// the request is turned into a chat (server-common.cpp,
// anthropic_params_from_json / convert_anthropic_to_oai) and the answer
// written in Anthropic's shape (server-task.cpp, to_json_anthropic and
// to_json_anthropic_stream).

type anthropicBlock struct {
	Type    string          `json:"type"`
	Text    string          `json:"text"`
	Content json.RawMessage `json:"content"` // tool_result
}

type anthropicMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type anthropicRequest struct {
	Model     string             `json:"model"`
	System    json.RawMessage    `json:"system"`
	Messages  []anthropicMessage `json:"messages"`
	MaxTokens *int               `json:"max_tokens"`
	Stream    bool               `json:"stream"`
}

// anthropicText flattens a content (wire.MessagesContentText), with
// llama.cpp's error message.
func anthropicText(raw json.RawMessage, field string) (string, error) {
	t, err := wire.MessagesContentText(raw)
	if err != nil {
		return "", fmt.Errorf("Expected '%s' to be a string or an array", field)
	}
	return t, nil
}

func anthropicMessages(req *anthropicRequest) ([]model.Message, error) {
	if req.Messages == nil {
		return nil, errors.New("'messages' is required")
	}
	var msgs []model.Message
	sys, err := anthropicText(req.System, "system")
	if err != nil {
		return nil, err
	}
	if len(bytes.TrimSpace(req.System)) > 0 && !bytes.Equal(bytes.TrimSpace(req.System), []byte("null")) {
		msgs = append(msgs, model.Message{Role: "system", Content: sys})
	}
	for i, m := range req.Messages {
		if m.Role == "" {
			return nil, fmt.Errorf("messages[%d].role: must be a non-empty string", i)
		}
		if len(m.Content) == 0 {
			if m.Role == "assistant" {
				continue
			}
			return nil, errors.New("All non-assistant messages must contain 'content'")
		}
		text, err := anthropicText(m.Content, "content")
		if err != nil {
			return nil, err
		}
		msgs = append(msgs, model.Message{Role: m.Role, Content: text})
	}
	if len(msgs) == 0 || (len(msgs) == 1 && msgs[0].Role == "system") {
		return nil, errors.New("messages: must be a non-empty array")
	}
	return msgs, nil
}

type anthropicUsage struct {
	CacheReadInputTokens int `json:"cache_read_input_tokens"`
	InputTokens          int `json:"input_tokens"`
	OutputTokens         int `json:"output_tokens"`
}

type anthropicResponse struct {
	ID           string           `json:"id"`
	Type         string           `json:"type"`
	Role         string           `json:"role"`
	Content      []anthropicBlock `json:"content"`
	Model        string           `json:"model"`
	StopReason   *string          `json:"stop_reason"`
	StopSequence *string          `json:"stop_sequence"`
	Usage        anthropicUsage   `json:"usage"`
}

type textBlock struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

func stopReason(res *model.Result) string {
	if res.Stop == model.StopEOS {
		return "end_turn"
	}
	return "max_tokens"
}

// messagesPrompt renders a /v1/messages request's prompt; on bad input it
// answers 400 and returns ok false.
func messagesPrompt(w http.ResponseWriter, body *anthropicRequest) ([]model.Token, bool) {
	msgs, err := anthropicMessages(body)
	if err == nil {
		var toks []model.Token
		if toks, err = chatTokens(&chatBody{}, msgs); err == nil {
			return toks, true
		}
	}
	writeError(w, http.StatusBadRequest, wire.ErrTypeInvalidRequest, err.Error())
	return nil, false
}

// messages serves POST /v1/messages.
func (r *Replica) messages(w http.ResponseWriter, req *http.Request) {
	var body anthropicRequest
	if !decode(w, req, &body) {
		return
	}
	adapter, ok := r.resolveModel(w, body.Model)
	if !ok {
		return
	}
	toks, ok := messagesPrompt(w, &body)
	if !ok {
		return
	}
	limit := body.MaxTokens
	if limit == nil {
		limit = wire.Ptr(4096) // llama.cpp's default when max_tokens is missing
	}
	id, wt, ok := r.start(w, model.Request{Tokens: toks, TokenEvents: body.Stream, Adapter: adapter}, limit)
	if !ok {
		return
	}
	msgID := fmt.Sprintf("msg_%s-%d", r.name, id)
	name := r.modelName(body.Model)
	if !body.Stream {
		res, err := r.await(req.Context(), id, wt, nil)
		if err != nil {
			r.awaitFailed(w, err)
			return
		}
		r.finished(req, res)
		content := []textBlock{}
		if res.Output.Text != "" {
			content = append(content, textBlock{"text", res.Output.Text})
		}
		writeJSON(w, http.StatusOK, map[string]any{
			"id": msgID, "type": "message", "role": "assistant", "content": content, "model": name,
			"stop_reason": stopReason(res), "stop_sequence": nil,
			"usage": anthropicUsage{res.CacheN, res.PromptTokens - res.CacheN, res.PredictedN},
		})
		return
	}
	sse := startSSE(w)
	started := false
	res, err := r.await(req.Context(), id, wt, func(ev model.Event) error {
		if ev.Kind == model.EventFirstToken {
			if err := sse.event("message_start", map[string]any{"type": "message_start", "message": map[string]any{
				"id": msgID, "type": "message", "role": "assistant", "content": []any{}, "model": name,
				"stop_reason": nil, "stop_sequence": nil,
				"usage": anthropicUsage{ev.CacheN, len(toks) - ev.CacheN, 0},
			}}); err != nil {
				return err
			}
		}
		if !started {
			started = true
			if err := sse.event("content_block_start", map[string]any{"type": "content_block_start", "index": 0,
				"content_block": textBlock{"text", ""}}); err != nil {
				return err
			}
		}
		return sse.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": 0,
			"delta": map[string]string{"type": "text_delta", "text": ev.Piece}})
	})
	if err != nil {
		return
	}
	r.finished(req, res)
	if started && sse.event("content_block_stop", map[string]any{"type": "content_block_stop", "index": 0}) != nil {
		return
	}
	if sse.event("message_delta", map[string]any{"type": "message_delta",
		"delta": map[string]any{"stop_reason": stopReason(res), "stop_sequence": nil},
		"usage": map[string]int{"output_tokens": res.PredictedN}}) != nil {
		return
	}
	_ = sse.event("message_stop", map[string]string{"type": "message_stop"})
}

// event writes one named SSE event: "event: NAME\ndata: JSON\n\n".
func (s *sseWriter) event(name string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	buf := make([]byte, 0, len(name)+len(data)+16)
	buf = append(buf, "event: "...)
	buf = append(buf, name...)
	buf = append(buf, '\n')
	buf = append(buf, wire.SSEPrefix...)
	buf = append(buf, data...)
	buf = append(buf, '\n', '\n')
	if _, err := s.w.Write(buf); err != nil {
		return err
	}
	return s.rc.Flush()
}
