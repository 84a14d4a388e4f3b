package router

import (
	"net/http"
	"strings"
	"sync"

	"github.com/llm-ring/llm-ring/internal/convo"
	"github.com/llm-ring/llm-ring/internal/prefix"
)

// The fast path of an OpenAI chat request (POST /v1/chat/completions): one
// pass over the body with the scanner (jsonscan.go) reads exactly what
// parseJSON reads — the messages' roles and texts, stream, the output
// length fields, the model, the body's conversation field and whether
// stream_options is there — without a generic tree, and feeds the conversation
// accumulator once the whole body proved valid. A body it does not handle
// (malformed, a member named only up to case like "Stream", a duplicated
// member, a non-ASCII key, a value of an unexpected type, a limit crossed)
// goes to parseJSON, whose answer (a field's 400 included) is then the
// request's: the fast path is a shortcut, never a second reading.
// TestFastParseAgrees and FuzzFastParse hold the two to the same results.

// fastMsg is one message read: its role and its text (wire.ContentText).
type fastMsg struct{ role, text string }

// fastChat is what the fast path reads of a chat body; pooled.
type fastChat struct {
	msgs      []fastMsg
	seen      uint16 // chatMembers read (a second one falls back)
	stream    bool
	max       [3]int // n_predict, max_tokens, max_completion_tokens, when set
	maxSet    [3]bool
	key       string // the body's conversation field, when a string
	model     string // the model asked for, when a string
	streamOpt bool   // a stream_options member is there
	names     *modelNames
}

// chatMembers are the top-level members the fast path reads, by name; the
// order of the three length fields is maxTokens's.
var chatMembers = [...]string{"n_predict", "max_tokens", "max_completion_tokens", "messages", "stream", "stream_options", "model"}

const (
	memberMessages = 3
	memberStream   = 4
	memberOptions  = 5
	memberModel    = 6
	memberBodyKey  = 7 // rules.bodyField
)

var fastChats = sync.Pool{New: func() any { return new(fastChat) }}

func (c *fastChat) reset() {
	clear(c.msgs)
	*c = fastChat{msgs: c.msgs[:0]}
}

// parseChatFast is parseRequest's fast path for kindChat; ok false: use
// parseJSON.
func parseChatFast(h http.Header, body []byte, rules *keyRules, hs *prefix.Hasher) (p parsed, ok bool) {
	if memberIndex(rules.bodyField) >= 0 {
		return p, false // a configured field the fast path reads as something else
	}
	c := fastChats.Get().(*fastChat)
	defer func() { c.reset(); fastChats.Put(c) }()
	c.names = rules.names
	s := reqScanner{b: body}
	if s.peek() != '{' || !s.object(func(k []byte) bool { return c.member(&s, k, rules.bodyField) }) || !s.end() ||
		c.seen&(1<<memberMessages) == 0 || len(c.msgs) == 0 {
		return p, false
	}
	p.stream, p.streamOptsAbsent, p.model = c.stream, !c.streamOpt, c.model
	if p.maxTokens, ok = c.maxTokens(rules.defaultMax, rules.maxOutput); !ok {
		return p, false
	}
	var acc convo.Accumulator
	acc.Reset(rules.prefixChars, hs)
	for _, m := range c.msgs {
		acc.Add(m.role, m.text)
	}
	startKey := p.accumulated(acc.Routing())
	if hs != nil {
		p.blocks = hs.Blocks()
	}
	p.conversationKey(h, rules, c.key, startKey)
	return p, true
}

func memberIndex(key string) int {
	return memberIndexBytes([]byte(key))
}

func memberIndexBytes(key []byte) int {
	for i, m := range chatMembers {
		if string(key) == m {
			return i
		}
	}
	return -1
}

// member reads one top-level member's value.
func (c *fastChat) member(s *reqScanner, key []byte, bodyField string) bool {
	i := memberIndexBytes(key)
	if i < 0 && len(key) > 0 && string(key) == bodyField {
		i = memberBodyKey
	}
	if i < 0 {
		if foldsToMember(key, bodyField) {
			return false
		}
		return s.skip()
	}
	if c.seen&(1<<i) != 0 {
		return false
	}
	c.seen |= 1 << i
	switch i {
	case memberMessages:
		return s.peek() == '[' && s.array(func() bool { return c.message(s) })
	case memberStream:
		return c.readStream(s)
	case memberOptions:
		c.streamOpt = true
		return s.skip()
	case memberBodyKey, memberModel:
		if s.peek() == 'n' {
			return s.literal("null")
		}
		if s.peek() != '"' {
			return false // parseJSON names the field
		}
		var ok bool
		if i == memberModel {
			c.model, ok = s.modelName(c.names)
		} else {
			c.key, ok = s.str()
		}
		return ok
	}
	if s.peek() == 'n' {
		return s.literal("null")
	}
	c.max[i], c.maxSet[i] = 0, true
	var ok bool
	c.max[i], ok = s.integer()
	return ok
}

// foldsToMember reports whether key names a read member up to case:
// encoding/json's struct decoding (PrepareStream's) would read it.
func foldsToMember(key []byte, bodyField string) bool {
	for _, m := range chatMembers {
		if foldEq(key, m) {
			return true
		}
	}
	return bodyField != "" && foldEq(key, bodyField)
}

// foldEq is strings.EqualFold for an ASCII key, without converting it.
func foldEq(key []byte, name string) bool {
	if len(key) != len(name) {
		return false
	}
	for i := range key {
		a, b := key[i], name[i]
		if 'A' <= a && a <= 'Z' {
			a += 'a' - 'A'
		}
		if 'A' <= b && b <= 'Z' {
			b += 'a' - 'A'
		}
		if a != b {
			return false
		}
	}
	return true
}

func (c *fastChat) readStream(s *reqScanner) bool {
	switch s.peek() {
	case 't':
		c.stream = true
		return s.literal("true")
	case 'f':
		return s.literal("false")
	case 'n':
		return s.literal("null")
	}
	return false
}

// maxTokens is maxTokens (parse.go) over the fields read; ok false where
// that gives an error.
func (c *fastChat) maxTokens(def, limit int) (int, bool) {
	for i := range c.max {
		if !c.maxSet[i] {
			continue
		}
		n := c.max[i]
		if n < -1 || n > limit {
			return 0, false
		}
		if n >= 0 {
			return n, true
		}
	}
	return def, true
}

// message reads one {role, content} object (wire.ChatMessage).
func (c *fastChat) message(s *reqScanner) bool {
	if s.peek() != '{' {
		return false // null or another type: parseJSON names it
	}
	var m fastMsg
	var seen uint8
	ok := s.object(func(key []byte) bool {
		switch string(key) {
		case "role":
			if seen&1 != 0 || s.peek() != '"' {
				return false
			}
			seen |= 1
			var ok bool
			m.role, ok = s.role()
			return ok
		case "content":
			if seen&2 != 0 {
				return false
			}
			seen |= 2
			var ok bool
			m.text, ok = c.content(s)
			return ok
		}
		if foldEq(key, "role") || foldEq(key, "content") {
			return false
		}
		return s.skip()
	})
	if !ok || m.role == "" {
		return false
	}
	c.msgs = append(c.msgs, m)
	return true
}

// commonRoles are returned without allocating.
var commonRoles = [...]string{"system", "user", "assistant", "developer", "tool"}

// role reads a role string.
func (s *reqScanner) role() (string, bool) {
	start := s.i
	raw, esc, ok := s.rawString()
	if !ok {
		return "", false
	}
	if !esc {
		for _, r := range commonRoles {
			if string(raw) == r {
				return r, true
			}
		}
	}
	s.i = start
	return s.str()
}

// content reads a message content as wire.ContentText flattens it: a
// string, null, or an array of parts whose text parts are joined by "\n".
func (c *fastChat) content(s *reqScanner) (string, bool) {
	switch s.peek() {
	case '"':
		return s.str()
	case 'n':
		return "", s.literal("null")
	case '[':
	default:
		return "", false
	}
	var parts strings.Builder
	var first string
	n := 0
	ok := s.array(func() bool {
		text, isText, ok := s.part()
		if !ok || !isText {
			return ok
		}
		switch n++; n {
		case 1:
			first = text
		case 2:
			parts.WriteString(first)
			fallthrough
		default:
			parts.WriteByte('\n')
			parts.WriteString(text)
		}
		return true
	})
	if !ok {
		return "", false
	}
	if n < 2 {
		return first, true
	}
	return parts.String(), true
}

// part reads one content part: its text, and whether its type is "text".
func (s *reqScanner) part() (text string, isText, ok bool) {
	if s.peek() == 'n' {
		return "", false, s.literal("null")
	}
	if s.peek() != '{' {
		return "", false, false
	}
	var typ string
	var seen uint8
	ok = s.object(func(key []byte) bool {
		var bit uint8
		switch string(key) {
		case "type":
			bit = 1
		case "text":
			bit = 2
		default:
			if foldEq(key, "type") || foldEq(key, "text") {
				return false
			}
			return s.skip()
		}
		if seen&bit != 0 {
			return false
		}
		seen |= bit
		if s.peek() == 'n' {
			return s.literal("null")
		}
		if s.peek() != '"' {
			return false
		}
		var v string
		var ok bool
		if v, ok = s.str(); bit == 1 {
			typ = v
		} else {
			text = v
		}
		return ok
	})
	return text, typ == "text", ok
}
