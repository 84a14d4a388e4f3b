package model

import (
	"errors"
	"fmt"
	"time"

	"github.com/llm-ring/llm-ring/internal/wire"
)

// ID identifies a request within one Server (IDs start at 1).
type ID uint64

// Request is one completion request, already tokenized.
type Request struct {
	// Tokens is the prompt. Submit keeps the slice: the caller must not
	// change it afterwards.
	Tokens []Token
	// NPredict is the most tokens to generate (llama.cpp n_predict);
	// negative means no limit other than the answer's natural end and the
	// slot's context.
	NPredict int
	// NoCache is llama.cpp's cache_prompt=false: nothing is reused (the slot
	// still keeps the new state afterwards).
	NoCache bool
	// Seed selects the answer together with the prompt; 0 means Config.Seed.
	Seed uint64
	// TokenEvents asks for an EventToken per generated token, carrying the
	// token and its text (for streaming). Without it a request produces only
	// EventFirstToken and EventDone, and steps in which nothing else changes
	// are computed in one go.
	TokenEvents bool
	// Adapter is the LoRA adapter the request runs with ("": the base
	// model). On a paged engine with Config.MaxLoras > 0 it needs one of
	// the adapter slots (see Config.MaxLoras); on every paged engine its
	// KV blocks are its own (a prefix cached under another adapter or the
	// base model is not reused, as in vLLM and SGLang). The llama.cpp
	// model ignores it (llama.cpp loads every --lora adapter at start).
	Adapter string
}

// StopType says why a generation stopped, with llama.cpp's names.
type StopType string

// Stop types.
const (
	StopEOS   StopType = "eos"   // the answer ended by itself
	StopLimit StopType = "limit" // n_predict or the slot's context cut it
)

// EventKind is the kind of an Event.
type EventKind uint8

// Event kinds.
const (
	// EventFirstToken: the prompt is processed and the first token sampled.
	EventFirstToken EventKind = iota + 1
	// EventToken: one more token (only for Request.TokenEvents, from the
	// second token on).
	EventToken
	// EventDone: the request is finished; Event.Result holds the answer.
	EventDone
)

func (k EventKind) String() string {
	switch k {
	case EventFirstToken:
		return "first-token"
	case EventToken:
		return "token"
	case EventDone:
		return "done"
	}
	return fmt.Sprintf("EventKind(%d)", uint8(k))
}

// Event is something observable that happened to a request.
type Event struct {
	Kind    EventKind
	Replica int // index of the server in its Group (0 for a Replica)
	ID      ID
	At      time.Duration // model time
	// N is the number of tokens generated so far (1 for EventFirstToken).
	N int
	// Token and Piece are the token produced and its text, for
	// EventFirstToken and EventToken of requests with TokenEvents.
	Token Token
	Piece string
	// CacheN, on EventFirstToken, is the number of prompt tokens reused
	// from a cache (the Result's CacheN, known once the prompt is in).
	CacheN int
	// Result is set on EventDone.
	Result *Result
}

// Result is a finished request: llama.cpp's numbers for it, and its answer.
type Result struct {
	ID   ID
	Slot int
	// PromptTokens is the prompt length (tokens_evaluated); CacheN of them
	// were reused from a cache and PromptN processed: CacheN + PromptN ==
	// PromptTokens.
	PromptTokens int
	CacheN       int
	PromptN      int
	// PredictedN is the number of generated tokens (== len(Output.Tokens)).
	PredictedN int
	Output     Output
	Stop       StopType
	// ContextFull is set when the slot's context ended the generation.
	ContextFull bool
	// Cancelled is set for a request released by Cancel; Output then holds
	// the tokens generated until then.
	Cancelled bool
	// AdapterLoad is set when the request's admission (or a re-admission
	// after preemption) loaded its LoRA adapter into a slot: the request
	// paid Config.AdapterLoad (paged engines with MaxLoras > 0).
	AdapterLoad bool
	// Model times: submitted, given a slot, prompt processed (first token),
	// finished.
	Submitted, Started, PromptDone, Done time.Duration
}

// PromptTime is llama.cpp's prompt_ms as a duration: from the moment the
// request got its slot to the end of its prompt processing.
func (r *Result) PromptTime() time.Duration { return r.PromptDone - r.Started }

// PredictedTime is llama.cpp's predicted_ms as a duration: from the first
// token to the last.
func (r *Result) PredictedTime() time.Duration { return r.Done - r.PromptDone }

// Timings returns llama.cpp's timings block for the result.
func (r *Result) Timings() wire.Timings {
	t := wire.Timings{CacheN: r.CacheN, PromptN: r.PromptN, PredictedN: r.PredictedN}
	t.PromptMS = ms(r.PromptTime())
	if r.PromptN > 0 {
		t.PromptPerTokenMS = t.PromptMS / float64(r.PromptN)
	}
	if t.PromptMS > 0 {
		t.PromptPerSecond = 1e3 * float64(r.PromptN) / t.PromptMS
	}
	t.PredictedMS = ms(r.PredictedTime())
	if r.PredictedN > 0 {
		t.PredictedPerTokenMS = t.PredictedMS / float64(r.PredictedN)
	}
	if t.PredictedMS > 0 {
		t.PredictedPerSecond = 1e3 * float64(r.PredictedN) / t.PredictedMS
	}
	return t
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Errors of Submit.
var (
	// ErrEmptyPrompt: the prompt has no tokens.
	ErrEmptyPrompt = errors.New("the prompt is empty")
	// ErrBadMember: a Group member index out of range.
	ErrBadMember = errors.New("no such replica in the group")
)

// ContextError is returned by Submit for a prompt that does not fit a slot's
// context; its message is llama.cpp's.
type ContextError struct {
	NPromptTokens int // prompt length
	NCtx          int // the slot's context
}

func (e *ContextError) Error() string {
	return fmt.Sprintf("request (%d tokens) exceeds the available context size (%d tokens), try increasing it",
		e.NPromptTokens, e.NCtx)
}

// TokenError is returned by Submit for a token id outside the vocabulary.
type TokenError struct {
	Index int
	Token Token
}

func (e *TokenError) Error() string {
	return fmt.Sprintf("invalid token id %d at prompt position %d (vocabulary has %d tokens)", e.Token, e.Index, VocabSize)
}
