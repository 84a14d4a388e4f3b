package engine

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
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

type block struct {
	Type    string          `json:"type"`
	Text    string          `json:"text"`
	Content json.RawMessage `json:"content"`
}

// blocksText flattens a content: a string, or an array of blocks (text
// blocks and tool_result contents concatenated; images and tool_use left
// out).
func blocksText(raw json.RawMessage, field string) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return "", nil
	}
	switch raw[0] {
	case '"':
		var s string
		err := json.Unmarshal(raw, &s)
		return s, err
	case '[':
		var bs []block
		if err := json.Unmarshal(raw, &bs); err != nil {
			return "", fmt.Errorf("%s: must be a string or an array of content blocks", field)
		}
		var b strings.Builder
		for _, bl := range bs {
			switch bl.Type {
			case "text":
				b.WriteString(bl.Text)
			case "tool_result":
				t, err := blocksText(bl.Content, field+".content")
				if err != nil {
					return "", err
				}
				b.WriteString(t)
			}
		}
		return b.String(), nil
	}
	return "", fmt.Errorf("%s: must be a string or an array of content blocks", field)
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
	if out.System, err = blocksText(in.System, "system"); err != nil {
		return nil, err
	}
	for i, m := range in.Messages {
		if m.Role == "" {
			return nil, fmt.Errorf("messages[%d].role: must be a non-empty string", i)
		}
		text, err := blocksText(m.Content, fmt.Sprintf("messages[%d].content", i))
		if err != nil {
			return nil, err
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
