package wire

import (
	"errors"
	"testing"
)

func TestMessagesContentText(t *testing.T) {
	for _, tt := range []struct {
		raw, want string
		err       bool
	}{
		{``, "", false},             // absent
		{`null`, "", false},         // null
		{`"hello"`, "hello", false}, // a string as is
		{`[{"type":"text","text":"a"},{"type":"image","source":{}},{"type":"text","text":"b"}]`, "ab", false}, // images left out
		{`[{"type":"tool_result","content":[{"type":"text","text":"42"}]}]`, "42", false},                     // tool results flattened
		{`[{"type":"tool_result","content":"done"}]`, "done", false},                                          // a string tool result
		{`42`, "", true},     // neither string nor array
		{`[1, 2]`, "", true}, // not blocks
		{`[{"type":"tool_result","content":7}]`, "", true}, // a malformed nested content
	} {
		got, err := MessagesContentText([]byte(tt.raw))
		if got != tt.want || (err != nil) != tt.err || err != nil && !errors.Is(err, ErrContentShape) {
			t.Errorf("%s: %q, %v; want %q, error %v", tt.raw, got, err, tt.want, tt.err)
		}
	}
}
