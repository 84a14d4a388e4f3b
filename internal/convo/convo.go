// Package convo is the conversation accumulator: a conversation's messages
// (roles and texts) in, what routing reads of it out — its size in
// characters, its prompt blocks, the key of its start, its first user
// message and its turn. It is the one place where "messages → routing
// input" is written: the router's OpenAI chat, Anthropic Messages and
// Ollama paths feed it a request's messages, and the simulator, which grows
// a conversation turn by turn, keeps one Accumulator per user and Adds each
// message as it is sent or answered, because every quantity only grows with
// the messages.
//
// It is pure: no clock, no I/O, no goroutines.
package convo

import (
	"strconv"

	"github.com/cespare/xxhash/v2"

	"github.com/llm-ring/llm-ring/internal/prefix"
	"github.com/llm-ring/llm-ring/internal/wire"
)

// Routing is what routing reads of a conversation so far.
type Routing struct {
	// Chars is the conversation's size in characters, each message
	// counted as the router renders it (wire.ChatChars): the token
	// estimate's input.
	Chars int
	// Blocks are the chained hashes of the conversation's full prompt
	// blocks (prefix.Hasher), nil without a Hasher. They alias the
	// Hasher's buffer.
	Blocks []uint64
	// Key is the conversation key: the client's name for the conversation
	// (Accumulator.Name), else the key of its start (wire.PrefixKey).
	Key string
	// FirstUser is the first user message ("" before it).
	FirstUser string
	// Turn counts the user messages.
	Turn int
}

// Accumulator accumulates one conversation's messages. Reset it before
// use; it is not safe for concurrent use.
type Accumulator struct {
	prefixChars int
	hs          *prefix.Hasher
	start       xxhash.Digest // of the start (wire.ConversationStart): system prompts before the first user message, then its first prefixChars runes
	chars, turn int
	firstUser   string
	key         string // the client's name, or the start's key once the first user message closed the start
}

// Reset starts a new conversation whose start keeps the first prefixChars
// characters of its first user message. hs, when not nil, receives every
// message in the canonical rendering (prefix.Hasher.WriteMessage); the
// caller resets it (its block size is its own).
func (a *Accumulator) Reset(prefixChars int, hs *prefix.Hasher) {
	*a = Accumulator{prefixChars: prefixChars, hs: hs}
	a.start.Reset()
}

// Name gives the conversation the client's name for it (a header's or a
// body field's value): Routing's Key is then name, and the start's key is
// never computed. An empty name names nothing (the start keys it).
func (a *Accumulator) Name(name string) { a.key = name }

// Add appends one message. System (and developer) messages before the
// first user message belong to the conversation's start; the first user
// message's first prefixChars characters end it. Other roles (assistant,
// tool) only count toward the size and the blocks.
func (a *Accumulator) Add(role, text string) {
	a.chars += wire.ChatChars(role, text)
	if a.hs != nil {
		a.hs.WriteMessage(role, text)
	}
	switch role {
	case "system", "developer":
		if a.turn == 0 { // wire.ConversationStart, hashed as it goes
			a.start.WriteString(text)
			a.start.Write(zero[:])
		}
	case "user":
		if a.turn == 0 {
			a.start.WriteString(wire.FirstChars(text, a.prefixChars))
			a.firstUser = text
		}
		a.turn++
	}
}

// Routing returns what routing reads of the conversation so far. Once the
// first user message closed the conversation's start, its key is computed
// once: a driver that reads the Routing at every turn allocates it once.
func (a *Accumulator) Routing() Routing {
	key := a.key
	if key == "" {
		key = a.startKey()
		if a.turn > 0 { // the start no longer changes
			a.key = key
		}
	}
	r := Routing{Chars: a.chars, Key: key, FirstUser: a.firstUser, Turn: a.turn}
	if a.hs != nil {
		r.Blocks = a.hs.Blocks()
	}
	return r
}

var zero [1]byte

// startKey is wire.PrefixKey of the start, from its running hash, in one
// allocation (TestRouting and TestKeyMatchesWire hold it to wire's).
func (a *Accumulator) startKey() string {
	var b [32]byte
	k := append(b[:0], "prefix:"...)
	return string(strconv.AppendUint(k, a.start.Sum64(), 16))
}
