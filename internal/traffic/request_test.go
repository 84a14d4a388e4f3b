package traffic

import (
	"net/http"
	"strings"
	"testing"

	"github.com/llm-ring/llm-ring/internal/wire"
)

func testConversation() *Conversation {
	return &Conversation{
		ID:     "s1-c0003",
		System: "Be brief.",
		Turns:  []Turn{{User: "Hi?"}, {User: "And then?"}, {User: "Thanks."}},
	}
}

func TestMessages(t *testing.T) {
	c := testConversation()
	tests := []struct {
		turn    int
		answers []string
		want    string // role:content, joined by " | "
	}{
		// The first turn: system prompt and the first question only.
		{0, nil, "system:Be brief. | user:Hi?"},
		// The third turn resends everything, with the replica's real answers.
		{2, []string{"Hello.", "Then this."}, "system:Be brief. | user:Hi? | assistant:Hello. | user:And then? | assistant:Then this. | user:Thanks."},
		// Extra answers (a driver passing its whole slice) are ignored.
		{1, []string{"Hello.", "unused"}, "system:Be brief. | user:Hi? | assistant:Hello. | user:And then?"},
	}
	for _, tt := range tests {
		var parts []string
		for _, m := range Messages(c, tt.turn, tt.answers) {
			text, err := wire.ContentText(m.Content)
			if err != nil {
				t.Fatal(err)
			}
			parts = append(parts, m.Role+":"+text)
		}
		if got := strings.Join(parts, " | "); got != tt.want {
			t.Errorf("Messages(turn %d):\n got %s\nwant %s", tt.turn, got, tt.want)
		}
	}
}

func TestMessagesDriverBugsPanic(t *testing.T) {
	c := testConversation()
	for _, tt := range []struct {
		turn    int
		answers []string
	}{
		{1, nil},                     // a previous answer is missing
		{3, []string{"a", "b", "c"}}, // no such turn
		{-1, nil},                    // no such turn
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Messages(turn %d, %d answers) did not panic", tt.turn, len(tt.answers))
				}
			}()
			Messages(c, tt.turn, tt.answers)
		}()
	}
}

func TestChatBody(t *testing.T) {
	msgs := Messages(testConversation(), 0, nil)
	tests := []struct {
		stream bool
		want   string
	}{
		// Not streamed: model, messages, max_tokens.
		{false, `{"model":"m","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi?"}],"max_tokens":64}`},
		// Streamed: also asks for the usage block on the last chunk.
		{true, `{"model":"m","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi?"}],"max_tokens":64,"stream":true,"stream_options":{"include_usage":true}}`},
	}
	for _, tt := range tests {
		b, err := ChatBody("m", msgs, 64, tt.stream)
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != tt.want {
			t.Errorf("ChatBody(stream=%v):\n got %s\nwant %s", tt.stream, b, tt.want)
		}
	}
}

func TestSetHeaders(t *testing.T) {
	h := http.Header{}
	SetHeaders(h, testConversation(), 0)
	if got := h.Get("X-Conversation-Id"); got != "s1-c0003" {
		t.Errorf("%s = %q", HeaderConversation, got)
	}
	if got := h.Get(HeaderTurn); got != "1" {
		t.Errorf("%s = %q, want 1 (1-based)", HeaderTurn, got)
	}
}

func TestEstimateTokens(t *testing.T) {
	for _, tt := range []struct {
		s    string
		want int
	}{
		{"", 0},       // nothing
		{"ab", 1},     // a partial token counts as one
		{"abc", 1},    // exactly CharsPerTokenEstimate
		{"abcd", 2},   // rounds up
		{"abcdef", 2}, // two full tokens
	} {
		if got := EstimateTokens(tt.s); got != tt.want {
			t.Errorf("EstimateTokens(%q) = %d, want %d", tt.s, got, tt.want)
		}
	}
}

func TestFitsContext(t *testing.T) {
	p := Profile{MaxTokens: 100, MaxContextTokens: 1000}
	next := strings.Repeat("x", 30) // 10 estimated tokens
	tests := []struct {
		prev int
		want bool
	}{
		{0, true}, // empty history
		{1000 - 100 - MessageOverheadTokens - 10, true}, // exactly the budget
		{1000 - 100 - MessageOverheadTokens - 9, false}, // one token over
		{1000 - 100, false},                             // history alone leaves only the answer's room
	}
	for _, tt := range tests {
		if got := FitsContext(p, tt.prev, next); got != tt.want {
			t.Errorf("FitsContext(prev=%d) = %v, want %v", tt.prev, got, tt.want)
		}
	}
}

func TestFitsFirstTurnEstimatesSystem(t *testing.T) {
	c := &Conversation{System: strings.Repeat("s", 300), Turns: []Turn{{User: strings.Repeat("u", 30)}}}
	need := MessageOverheadTokens + 100 + MessageOverheadTokens + 10 + 50 // system, user, answer
	if !Fits(Profile{MaxTokens: 50, MaxContextTokens: need}, c, 0, 99999) {
		t.Error("turn 0 should fit exactly (prevTotalTokens is ignored for turn 0)")
	}
	if Fits(Profile{MaxTokens: 50, MaxContextTokens: need - 1}, c, 0, 0) {
		t.Error("turn 0 should not fit one token below")
	}
}
