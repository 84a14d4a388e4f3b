package router

import (
	"errors"
	"github.com/llm-ring/llm-ring/internal/prefix"
	"github.com/llm-ring/llm-ring/internal/wire"
	"net/http"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

var testRules = keyRules{headers: []string{"x-conversation-id"}, bodyField: "user", prefixChars: 32, defaultMax: 128, maxOutput: 4096}

func TestParseKeys(t *testing.T) {
	long := strings.Repeat("shared system prompt ", 40)
	tests := []struct {
		name      string
		kind      apiKind
		header    string
		body      string
		keySource string
		key       string // "" = don't check
		turn      int
		maxTokens int
	}{
		// The header wins over everything.
		{"header", kindChat, "conv-1", `{"user":"u","messages":[{"role":"user","content":"hi"}]}`, "header:x-conversation-id", "conv-1", 1, 128},
		// Then the body's user field.
		{"user field", kindChat, "", `{"user":"alice","messages":[{"role":"user","content":"hi"}],"max_tokens":7}`, "body:user", "alice", 1, 7},
		// Then the conversation start; turn = user messages counted.
		{"prefix", kindChat, "", `{"messages":[{"role":"system","content":"s"},{"role":"user","content":"q1"},{"role":"assistant","content":"a1"},{"role":"user","content":"q2"}]}`, "prefix", "", 2, 128},
		// llama.cpp's n_predict; -1 (unlimited) falls back to the default.
		{"n_predict", kindCompletion, "", `{"prompt":"hello","n_predict":9}`, "prefix", "", 0, 9},
		{"n_predict unlimited", kindCompletion, "", `{"prompt":"hello","n_predict":-1}`, "prefix", "", 0, 128},
		{"max_completion_tokens", kindChat, "", `{"messages":[{"role":"user","content":"x"}],"max_completion_tokens":5}`, "prefix", "", 1, 5},
		// Content parts are read as text.
		{"content parts", kindChat, "", `{"messages":[{"role":"user","content":[{"type":"text","text":"hi"},{"type":"image_url","image_url":{"url":"x"}}]}]}`, "prefix", "", 1, 128},
		// A long shared system prompt is hashed whole with the start of the first user message.
		{"long system", kindChat, "", `{"messages":[{"role":"system","content":"` + long + `"},{"role":"user","content":"q"}]}`, "prefix", "", 1, 128},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			if tt.header != "" {
				h.Set("x-conversation-id", tt.header)
			}
			p, err := parseRequest(tt.kind, h, []byte(tt.body), &testRules, nil)
			if err != nil {
				t.Fatal(err)
			}
			if p.keySource != tt.keySource || (tt.key != "" && p.key != tt.key) || p.turn != tt.turn || p.maxTokens != tt.maxTokens {
				t.Errorf("got key %q (%s) turn %d max %d", p.key, p.keySource, p.turn, p.maxTokens)
			}
		})
	}
}

// TestPrefixKeySeparatesConversations: conversations sharing a long system
// prompt but opening differently get different keys; the same opening with
// more turns keeps its key.
func TestPrefixKeySeparatesConversations(t *testing.T) {
	sys := strings.Repeat("You are a careful assistant. ", 50)
	body := func(first string, more string) string {
		return `{"messages":[{"role":"system","content":"` + sys + `"},{"role":"user","content":"` + first + `"}` + more + `]}`
	}
	a1, _ := parseRequest(kindChat, http.Header{}, []byte(body("How do rings work?", "")), &testRules, nil)
	a2, _ := parseRequest(kindChat, http.Header{}, []byte(body("How do rings work?", `,{"role":"assistant","content":"x"},{"role":"user","content":"more"}`)), &testRules, nil)
	b, _ := parseRequest(kindChat, http.Header{}, []byte(body("What is a KV cache?", "")), &testRules, nil)
	if a1.key != a2.key {
		t.Error("the same conversation changed key between turns")
	}
	if a1.key == b.key {
		t.Error("two conversations sharing a system prompt collapsed onto one key")
	}
}

func TestPrefixRunes(t *testing.T) {
	if got := wire.FirstChars("héllo wörld", 4); got != "héll" {
		t.Errorf("prefix = %q", got)
	}
}

// FuzzParseRequest: no input makes the parser panic, and every rejection is
// a 400 with a message.
func FuzzParseRequest(f *testing.F) {
	f.Add(uint8(2), `{"messages":[{"role":"user","content":"hi"}],"max_tokens":8,"stream":true}`, "")
	f.Add(uint8(1), `{"prompt":[1,2,3],"n_predict":4}`, "c1")
	f.Add(uint8(3), `{"prompt":["a","b"],"user":"u"}`, "")
	f.Add(uint8(2), `{"messages":[{"role":"user","content":[{"type":"text","text":"x"}]}]}`, "")
	f.Add(uint8(2), `{"messages":null}`, "")
	f.Fuzz(func(t *testing.T, k uint8, body, header string) {
		kind := apiKind(k%3 + 1)
		h := http.Header{}
		if utf8.ValidString(header) && !strings.ContainsAny(header, "\r\n") {
			h.Set("x-conversation-id", header)
		}
		p, err := parseRequest(kind, h, []byte(body), &testRules, nil)
		if err != nil {
			var he *httpError
			if !errors.As(err, &he) || he.status != 400 || he.msg == "" {
				t.Fatalf("rejection is not a 400 with a message: %#v", err)
			}
			return
		}
		if p.key == "" || p.keySource == "" || p.maxTokens < 0 || p.chars < 0 {
			t.Fatalf("accepted with bad fields: %+v", p)
		}
	})
}

// TestPromptBlocks: the router hashes the prompt as the replica sees it, so
// a conversation's next turn extends its blocks, and two conversations
// sharing a long system prompt share its blocks (the prefix index's input).
func TestPromptBlocks(t *testing.T) {
	sys := strings.Repeat("You are a careful assistant. ", 40) // 1,160 characters
	chat := func(msgs string) string {
		return `{"messages":[{"role":"system","content":"` + sys + `"}` + msgs + `]}`
	}
	blocks := func(body string) []uint64 {
		var hs prefix.Hasher
		hs.Reset(64)
		p, err := parseRequest(kindChat, http.Header{}, []byte(body), &testRules, &hs)
		if err != nil {
			t.Fatal(err)
		}
		return slices.Clone(p.blocks)
	}
	turn1 := blocks(chat(`,{"role":"user","content":"first question"}`))
	turn2 := blocks(chat(`,{"role":"user","content":"first question"},{"role":"assistant","content":"an answer"},{"role":"user","content":"next"}`))
	other := blocks(chat(`,{"role":"user","content":"something else entirely"}`))
	if len(turn1) < 18 || len(turn2) < len(turn1) || !slices.Equal(turn2[:len(turn1)], turn1) {
		t.Fatalf("turn 2's blocks (%d) do not extend turn 1's (%d)", len(turn2), len(turn1))
	}
	shared := 0
	for shared < min(len(turn1), len(other)) && turn1[shared] == other[shared] {
		shared++
	}
	if shared < 17 || shared == len(other) {
		t.Fatalf("another conversation with the same system prompt shares %d of %d blocks, want the system prompt's (≥ 17) and not all", shared, len(other))
	}
}

// TestConversationHeadersCanonical: a conversation header configured in
// any spelling is found in the request's (canonical) header map, and is
// logged in lower case, with the names prepared once (keyHeaders) or per
// request.
func TestConversationHeadersCanonical(t *testing.T) {
	h := http.Header{}
	h.Set("X-Session-Id", "  s1 ")
	h.Set("X-Turn", " 3")
	for _, canon := range []bool{false, true} {
		rules := keyRules{headers: []string{"x-conversation-id", "X-SESSION-id"}}
		if canon {
			rules.canon = keyHeaders(rules.headers)
		}
		var p parsed
		p.conversationKey(h, &rules, "", "start")
		if p.key != "s1" || p.keySource != "header:x-session-id" || p.turn != 3 {
			t.Errorf("canon %t: key %q from %q, turn %d; want s1 from header:x-session-id, turn 3", canon, p.key, p.keySource, p.turn)
		}
		if got := headerKey(h, &rules); got != "s1" {
			t.Errorf("canon %t: headerKey %q", canon, got)
		}
	}
}
