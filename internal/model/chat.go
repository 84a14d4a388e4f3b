package model

import (
	"errors"
	"fmt"
	"strings"

	"github.com/llm-ring/llm-ring/internal/wire"
)

// DefaultSystemPrompt is the system message Qwen2.5's chat template adds when
// a conversation does not start with one.
const DefaultSystemPrompt = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."

// Message is one chat message, its content already flattened to text.
type Message struct {
	Role    string
	Content string
}

// MessagesFromWire flattens OpenAI chat messages. Errors name the message.
func MessagesFromWire(msgs []wire.ChatMessage) ([]Message, error) {
	if len(msgs) == 0 {
		return nil, errors.New("messages: must be a non-empty array")
	}
	out := make([]Message, len(msgs))
	for i, m := range msgs {
		if m.Role == "" {
			return nil, fmt.Errorf("messages[%d].role: must be a non-empty string", i)
		}
		text, err := wire.ContentText(m.Content)
		if err != nil {
			return nil, fmt.Errorf("messages[%d].%w", i, err)
		}
		out[i] = Message{Role: m.Role, Content: text}
	}
	return out, nil
}

// The ChatML template of Qwen2.5, as llama.cpp applies it:
//
//	<|im_start|>system\n{system}<|im_end|>\n      (DefaultSystemPrompt if none)
//	<|im_start|>{role}\n{content}<|im_end|>\n     (each message)
//	<|im_start|>assistant\n                       (the generation prompt)
//
// Every rendered message starts with a special token and ends with '\n', so
// the tokens of a conversation are the tokens of its messages one after the
// other (Tokenize is stable at those boundaries): a turn's prompt extends the
// previous turn's prompt plus its answer token for token, which is what lets
// a replica's prompt cache hit.

// RenderChat renders msgs with the ChatML template, generation prompt included.
func RenderChat(msgs []Message) string {
	var b strings.Builder
	n := len(ImStart) + len("assistant\n")
	for _, m := range msgs {
		n += len(ImStart) + len(m.Role) + 1 + len(m.Content) + len(ImEnd) + 1
	}
	if needsDefaultSystem(msgs) {
		n += len(ImStart) + len("system\n") + len(DefaultSystemPrompt) + len(ImEnd) + 1
	}
	b.Grow(n)
	if needsDefaultSystem(msgs) {
		writeMessage(&b, "system", DefaultSystemPrompt)
	}
	for _, m := range msgs {
		writeMessage(&b, m.Role, m.Content)
	}
	b.WriteString(ImStart)
	b.WriteString("assistant\n")
	return b.String()
}

// RenderWire renders OpenAI chat messages (see RenderChat).
func RenderWire(msgs []wire.ChatMessage) (string, error) {
	ms, err := MessagesFromWire(msgs)
	if err != nil {
		return "", err
	}
	return RenderChat(ms), nil
}

func needsDefaultSystem(msgs []Message) bool {
	return len(msgs) == 0 || msgs[0].Role != "system"
}

func writeMessage(b *strings.Builder, role, content string) {
	b.WriteString(ImStart)
	b.WriteString(role)
	b.WriteByte('\n')
	b.WriteString(content)
	b.WriteString(ImEnd)
	b.WriteByte('\n')
}

// ChatTokens returns Tokenize(RenderChat(msgs)).
func ChatTokens(msgs []Message) []Token {
	dst := make([]Token, 0, 64)
	if needsDefaultSystem(msgs) {
		dst = AppendMessageTokens(dst, Message{Role: "system", Content: DefaultSystemPrompt})
	}
	for _, m := range msgs {
		dst = AppendMessageTokens(dst, m)
	}
	return AppendGenerationPrompt(dst)
}

// AppendMessageTokens appends the tokens of one rendered message. A caller
// that keeps a conversation's tokens can append each new message instead of
// re-tokenizing the whole history: ChatTokens is exactly
// [default system message] + each message + AppendGenerationPrompt.
func AppendMessageTokens(dst []Token, m Message) []Token {
	dst = AppendMessageHead(dst, m.Role)
	dst = AppendTokens(dst, m.Content)
	return AppendMessageEnd(dst)
}

// AppendMessageHead appends the tokens that open a message of role
// ("<|im_start|>role\n"), and AppendMessageEnd those that close it: a caller
// that has a message's content tokens already (content == Tokenize(text))
// appends head, content, end, the tokens of AppendMessageTokens.
func AppendMessageHead(dst []Token, role string) []Token {
	dst = append(dst, TokImStart)
	dst = AppendTokens(dst, role)
	return append(dst, tokNewline)
}

// AppendMessageEnd appends the tokens that close a message; see
// AppendMessageHead.
func AppendMessageEnd(dst []Token) []Token { return append(dst, TokImEnd, tokNewline) }

// AppendAssistantTokens appends the tokens of an assistant message whose
// content is out.Text, an answer of GenerateAnswer (or a Result): the same
// tokens as AppendMessageTokens(dst, Message{"assistant", out.Text}),
// without tokenizing the answer again.
func AppendAssistantTokens(dst []Token, out *Output) []Token {
	dst = AppendGenerationPrompt(dst)
	dst = append(dst, out.Tokens...)
	return append(dst, TokImEnd, tokNewline)
}

// assistantHeader is the tokens of "<|im_start|>assistant\n".
var assistantHeader = Tokenize(ImStart + "assistant\n")

// NeedsDefaultSystem reports whether RenderChat adds DefaultSystemPrompt
// before msgs (their first message is not a system message).
func NeedsDefaultSystem(msgs []Message) bool { return needsDefaultSystem(msgs) }

// AppendGenerationPrompt appends the tokens of "<|im_start|>assistant\n".
func AppendGenerationPrompt(dst []Token) []Token {
	return append(dst, assistantHeader...)
}
