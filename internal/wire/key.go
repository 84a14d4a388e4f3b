package wire

import (
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/cespare/xxhash/v2"
)

// A conversation the client does not name (no header, no body field) is
// keyed by its start: its system prompts, then the first PrefixChars
// characters of its first user message. Every turn of a chat resends that
// start unchanged, so every turn gets the same key; the router and the
// simulator both key this way.

// ConversationStart appends one part of a conversation's start to b: a
// system (or developer) message whole, or the first user message's first
// prefixChars characters (runes).
func ConversationStart(b *strings.Builder, role, text string, prefixChars int) {
	if role == "user" {
		b.WriteString(FirstChars(text, prefixChars))
		return
	}
	b.WriteString(text)
	b.WriteByte(0)
}

// PrefixKey is the conversation key of a conversation's start.
func PrefixKey(start string) string {
	return "prefix:" + strconv.FormatUint(xxhash.Sum64String(start), 16)
}

// FirstChars returns the first n characters (runes) of s.
func FirstChars(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := 0
	for c := 0; c < n && i < len(s); c++ {
		_, size := utf8.DecodeRuneInString(s[i:])
		i += size
	}
	return s[:i]
}
