package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/llm-ring/llm-ring/internal/wire"
)

// Message is one rendered message of an Anthropic Messages request: its
// role and its text (text blocks and tool results concatenated).
type Message struct {
	Role, Text string
}

// MessagesRequest is what the router needs of an Anthropic Messages
// request (POST /v1/messages) to route it.
type MessagesRequest struct {
	Model string
	// System is the system prompt's text ("" if none).
	System   string
	Messages []Message
	// MaxTokens is max_tokens (0 if absent; Anthropic requires it,
	// llama.cpp defaults it to 4096).
	MaxTokens int
	Stream    bool
}

// ConversationKey is the text that identifies the conversation: the
// system prompt and the first user message, as for an OpenAI chat.
func (r *MessagesRequest) ConversationKey() string {
	for _, m := range r.Messages {
		if m.Role == "user" {
			return r.System + "\x00" + m.Text
		}
	}
	return r.System
}

// ParseMessages reads an Anthropic Messages request. Errors name the field.
func ParseMessages(body []byte) (*MessagesRequest, error) {
	var in struct {
		Model    string          `json:"model"`
		System   json.RawMessage `json:"system"`
		Messages []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
		MaxTokens *int `json:"max_tokens"`
		Stream    bool `json:"stream"`
	}
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, err
	}
	if len(in.Messages) == 0 {
		return nil, errors.New("messages: must be a non-empty array")
	}
	out := &MessagesRequest{Model: in.Model, Stream: in.Stream, Messages: make([]Message, len(in.Messages))}
	if in.MaxTokens != nil {
		out.MaxTokens = *in.MaxTokens
	}
	var err error
	if out.System, err = wire.MessagesContentText(in.System); err != nil {
		return nil, fmt.Errorf("system: %w", err)
	}
	for i, m := range in.Messages {
		if m.Role == "" {
			return nil, fmt.Errorf("messages[%d].role: must be a non-empty string", i)
		}
		text, err := wire.MessagesContentText(m.Content)
		if err != nil {
			return nil, fmt.Errorf("messages[%d].content: %w", i, err)
		}
		out.Messages[i] = Message{Role: m.Role, Text: text}
	}
	return out, nil
}

// MergeModels joins several replicas' GET /v1/models answers (OpenAI list
// shape) into one: the union of the models by id, sorted by id; for an id
// several replicas serve, the first list's entry is kept whole. Fields other
// than "data" (such as llama.cpp's "models") are dropped.
func MergeModels(lists ...[]byte) ([]byte, error) {
	seen := map[string]json.RawMessage{}
	for i, l := range lists {
		var in struct {
			Data []json.RawMessage `json:"data"`
		}
		if err := json.Unmarshal(l, &in); err != nil {
			return nil, fmt.Errorf("model list %d: %w", i, err)
		}
		for j, m := range in.Data {
			var id struct {
				ID string `json:"id"`
			}
			if err := json.Unmarshal(m, &id); err != nil || id.ID == "" {
				return nil, fmt.Errorf("model list %d: data[%d]: must be an object with an id", i, j)
			}
			if _, ok := seen[id.ID]; !ok {
				seen[id.ID] = m
			}
		}
	}
	ids := make([]string, 0, len(seen))
	for id := range seen {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	data := make([]json.RawMessage, len(ids))
	for i, id := range ids {
		data[i] = seen[id]
	}
	return json.Marshal(struct {
		Object string            `json:"object"`
		Data   []json.RawMessage `json:"data"`
	}{"list", data})
}
