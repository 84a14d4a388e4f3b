package traffic

import (
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/llm-ring/llm-ring/internal/wire"
)

// Headers the generator sends so the router can identify a conversation
// without guessing. Runs "without headers" leave them out and rely on the
// router's own detection (body field, prompt prefix).
const (
	HeaderConversation = "x-conversation-id" // Conversation.ID
	HeaderTurn         = "x-turn"            // 1-based turn number, as record.Request.Turn
)

// HeaderSetter is what SetHeaders writes to (an http.Header is one; the
// traffic package stays free of net/http).
type HeaderSetter interface{ Set(key, value string) }

// SetHeaders sets HeaderConversation and HeaderTurn for turn t (0-based) of c.
func SetHeaders(h HeaderSetter, c *Conversation, t int) {
	h.Set(HeaderConversation, c.ID)
	h.Set(HeaderTurn, strconv.Itoa(t+1))
}

// Messages returns the chat messages of turn t (0-based) of c: the system
// prompt, then for each earlier turn the user's text and the replica's real
// answer from answers, then the user's text of turn t. answers must hold at
// least t answers (extra ones are ignored); Messages panics otherwise, as
// that is a driver bug.
func Messages(c *Conversation, t int, answers []string) []wire.ChatMessage {
	if t < 0 || t >= len(c.Turns) {
		panic(fmt.Sprintf("traffic.Messages: turn %d out of range [0, %d) for %s", t, len(c.Turns), c.ID))
	}
	if len(answers) < t {
		panic(fmt.Sprintf("traffic.Messages: turn %d of %s needs %d previous answers, got %d", t, c.ID, t, len(answers)))
	}
	msgs := make([]wire.ChatMessage, 0, 2+2*t)
	msgs = append(msgs, wire.ChatMessage{Role: "system", Content: wire.TextContent(c.System)})
	for i := range t {
		msgs = append(msgs,
			wire.ChatMessage{Role: "user", Content: wire.TextContent(c.Turns[i].User)},
			wire.ChatMessage{Role: "assistant", Content: wire.TextContent(answers[i])})
	}
	return append(msgs, wire.ChatMessage{Role: "user", Content: wire.TextContent(c.Turns[t].User)})
}

// ChatRequest returns the OpenAI chat request of one turn. A streamed
// request asks for the usage block (stream_options.include_usage). The
// caller may set more fields (User, Seed) before encoding it.
func ChatRequest(model string, msgs []wire.ChatMessage, maxTokens int, stream bool) wire.ChatRequest {
	req := wire.ChatRequest{
		Model:     model,
		Messages:  msgs,
		MaxTokens: wire.Ptr(maxTokens),
		Stream:    stream,
	}
	if stream {
		req.StreamOptions = &wire.StreamOptions{IncludeUsage: true}
	}
	return req
}

// ChatBody returns the JSON body of ChatRequest(model, msgs, maxTokens, stream).
func ChatBody(model string, msgs []wire.ChatMessage, maxTokens int, stream bool) ([]byte, error) {
	return json.Marshal(ChatRequest(model, msgs, maxTokens, stream))
}

// Token estimates. The generator never sees the replica's tokenizer, so it
// estimates text it has not sent yet conservatively: CharsPerTokenEstimate
// characters per token, fewer than English text really takes (about 4 with
// llama.cpp's Qwen2.5 and this corpus), so estimates run high; and
// MessageOverheadTokens for a message's chat-template framing (ChatML takes
// about 5 per message plus 3 for the assistant prompt).
const (
	CharsPerTokenEstimate = 3
	MessageOverheadTokens = 16
)

// EstimateTokens is the conservative token estimate of s.
func EstimateTokens(s string) int { return tokensForChars(len(s)) }

func tokensForChars(n int) int { return (n + CharsPerTokenEstimate - 1) / CharsPerTokenEstimate }

// FitsContext reports whether a next turn with user text next fits the
// profile's context budget:
//
//	prevTotalTokens + MessageOverheadTokens + EstimateTokens(next) + max_tokens ≤ max_context_tokens
//
// prevTotalTokens is the real size of the previous turn as the replica
// counted it: its prompt tokens (cache_n + prompt_n, or usage.prompt_tokens)
// plus its answer tokens (predicted_n, or usage.completion_tokens); the next
// prompt is that, plus the new message. The answer's room (max_tokens) is
// reserved in full.
func FitsContext(p Profile, prevTotalTokens int, next string) bool {
	return prevTotalTokens+MessageOverheadTokens+EstimateTokens(next)+p.MaxTokens <= p.MaxContextTokens
}

// Fits reports whether turn t of c may be sent. For t > 0 it is
// FitsContext with the replica's real token count of turn t-1
// (prevTotalTokens); for t == 0 the system prompt is estimated and
// prevTotalTokens is ignored. Generate sizes pasted documents so that turn 0
// fits; a driver stops a conversation at its first turn that does not.
func Fits(p Profile, c *Conversation, t int, prevTotalTokens int) bool {
	if t == 0 {
		prevTotalTokens = MessageOverheadTokens + EstimateTokens(c.System)
	}
	return FitsContext(p, prevTotalTokens, c.Turns[t].User)
}
