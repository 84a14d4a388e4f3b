package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
)

// ErrContentShape: an Anthropic Messages content is neither a string nor
// an array of content blocks.
var ErrContentShape = errors.New("must be a string or an array of content blocks")

// contentBlock is the part of an Anthropic Messages content block that
// carries text.
type contentBlock struct {
	Type    string          `json:"type"`
	Text    string          `json:"text"`
	Content json.RawMessage `json:"content"` // tool_result
}

// MessagesContentText flattens an Anthropic Messages content (a system
// prompt or a message's content): a string as is, or an array of blocks
// whose text blocks and tool_result contents are concatenated (images and
// tool_use left out). Absent or null is "". The router reads prompts with
// it, and the simulated replica renders them with it, so both see the same
// text. A malformed content is ErrContentShape.
func MessagesContentText(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return "", nil
	}
	switch raw[0] {
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", ErrContentShape
		}
		return s, nil
	case '[':
		var bs []contentBlock
		if err := json.Unmarshal(raw, &bs); err != nil {
			return "", ErrContentShape
		}
		var b strings.Builder
		for _, bl := range bs {
			switch bl.Type {
			case "text":
				b.WriteString(bl.Text)
			case "tool_result":
				t, err := MessagesContentText(bl.Content)
				if err != nil {
					return "", err
				}
				b.WriteString(t)
			}
		}
		return b.String(), nil
	}
	return "", ErrContentShape
}
