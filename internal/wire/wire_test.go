package wire

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestPromptText(t *testing.T) {
	tests := []struct {
		raw    string
		text   string
		tokens int
		err    string // "" = no error
	}{
		{`"hello"`, "hello", 0, ""},
		{`["a","b"]`, "a\nb", 0, ""},
		{`[1,2,3]`, "", 3, ""},                              // token ids
		{`["sys",12,13]`, "sys", 2, ""},                     // llama.cpp's mixed prompt
		{``, "", 0, "missing prompt"},                       // absent
		{`null`, "", 0, "missing prompt"},                   // null
		{`{"a":1}`, "", 0, "prompt: must be a string"},      // object
		{`[1.5]`, "", 0, "prompt[0]: token id must be"},     // not an integer
		{`[true]`, "", 0, "prompt[0]: must be a string or"}, // wrong element type
	}
	for _, tt := range tests {
		text, tokens, err := PromptText(json.RawMessage(tt.raw))
		if tt.err != "" {
			if err == nil || !contains(err.Error(), tt.err) {
				t.Errorf("%s: err = %v, want %q", tt.raw, err, tt.err)
			}
			continue
		}
		if err != nil || text != tt.text || tokens != tt.tokens {
			t.Errorf("%s: got %q %d %v", tt.raw, text, tokens, err)
		}
	}
	if _, _, err := PromptText(nil); !errors.Is(err, ErrNoPrompt) {
		t.Errorf("nil prompt: %v", err)
	}
}

func TestContentText(t *testing.T) {
	for _, tt := range []struct{ raw, want string }{
		{`"hi"`, "hi"},
		{`null`, ""},
		{`[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"x"}},{"type":"text","text":"b"}]`, "a\nb"},
	} {
		got, err := ContentText(json.RawMessage(tt.raw))
		if err != nil || got != tt.want {
			t.Errorf("%s: %q %v", tt.raw, got, err)
		}
	}
	for _, bad := range []string{`5`, `{"text":"x"}`, `[1,2]`} {
		if _, err := ContentText(json.RawMessage(bad)); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}

func TestErrorShape(t *testing.T) {
	b, _ := json.Marshal(NewError(413, ErrTypeInvalidRequest, "too big"))
	if string(b) != `{"error":{"code":413,"message":"too big","type":"invalid_request_error"}}` {
		t.Errorf("error body = %s", b)
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
