package router

import (
	"fmt"
	"strings"
	"testing"

	"github.com/llm-ring/llm-ring/internal/replicaset"
	"github.com/llm-ring/llm-ring/internal/wire"
)

// TestSessionHeaders (issue 25): with the shipped configuration a
// conversation is keyed on whichever session header its client sends (the
// first of conversation_key.headers present wins, in any case), and a
// request-scoped id is not a key.
func TestSessionHeaders(t *testing.T) {
	s := stubRouter(t, "consistent", []replicaset.Replica{newFake(t, "a").replica(), newFake(t, "b").replica(), newFake(t, "c").replica()})
	for i, h := range []string{"x-conversation-id", "X-Session-ID", "x-session-token", "session_id", "Session-Id", "X-User-Id"} {
		s.do(t, "POST", wire.PathChatCompletions, chatBody(fmt.Sprint("hi ", i), false), h, fmt.Sprint("session-", i))
		want := fmt.Sprintf(`"key_source":"header:%s"`, strings.ToLower(h))
		if !s.waitLog(t, want) {
			t.Errorf("%s: no %s in the log:\n%s", h, want, s.logText())
		}
	}
	// Two headers: the first in the list wins.
	s.do(t, "POST", wire.PathChatCompletions, chatBody("both", false), "x-session-token", "tok", "x-conversation-id", "conv")
	waitFor(t, "the answer logged", func() bool { return strings.Count(s.logText(), `"msg":"request"`) == 7 })
	if n := strings.Count(s.logText(), `"key_source":"header:x-conversation-id"`); n != 2 {
		t.Errorf("x-conversation-id did not win over x-session-token:\n%s", s.logText())
	}
	s.do(t, "POST", wire.PathChatCompletions, chatBody("request ids are not keys", false), "x-request-id", "req-1")
	if !s.waitLog(t, `"key_source":"prefix"`) {
		t.Errorf("x-request-id was taken as a conversation key:\n%s", s.logText())
	}
}
