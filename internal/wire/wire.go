// Package wire defines, once, the JSON shapes that cross llm-ring's HTTP
// boundaries: llama.cpp's native /completion, the OpenAI-compatible
// /v1/chat/completions and /v1/completions (as llama.cpp's server speaks
// them), their streamed (SSE) chunks, and the error body.
//
// The router parses requests and answers with these types, the simulated
// replica writes them, and the experiment runner sends them. Fields that
// llm-ring never reads are left out of the request types on purpose: the
// router forwards the client's original bytes, never a re-encoding.
package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// Paths served by the router and the simulated replica.
const (
	PathCompletion      = "/completion"
	PathChatCompletions = "/v1/chat/completions"
	PathCompletions     = "/v1/completions"
	PathMessages        = "/v1/messages" // Anthropic Messages API
	PathModels          = "/v1/models"
	PathEmbeddings      = "/v1/embeddings"
	PathRerank          = "/v1/rerank"
	PathTokenize        = "/tokenize"
	PathDetokenize      = "/detokenize"
)

// Timings is llama.cpp's per-answer timing block. It appears on native
// /completion answers, on OpenAI-compatible answers (as "timings") and on the
// last streamed chunk.
type Timings struct {
	CacheN              int     `json:"cache_n"`
	PromptN             int     `json:"prompt_n"`
	PromptMS            float64 `json:"prompt_ms"`
	PromptPerTokenMS    float64 `json:"prompt_per_token_ms"`
	PromptPerSecond     float64 `json:"prompt_per_second"`
	PredictedN          int     `json:"predicted_n"`
	PredictedMS         float64 `json:"predicted_ms"`
	PredictedPerTokenMS float64 `json:"predicted_per_token_ms"`
	PredictedPerSecond  float64 `json:"predicted_per_second"`
}

// CompletionRequest is llama.cpp's native POST /completion body (the subset
// llm-ring reads). Prompt is a string, an array of token ids, or a mix;
// see PromptText.
type CompletionRequest struct {
	Prompt      json.RawMessage `json:"prompt"`
	NPredict    *int            `json:"n_predict,omitempty"`
	CachePrompt *bool           `json:"cache_prompt,omitempty"`
	Stream      bool            `json:"stream,omitempty"`
	IDSlot      *int            `json:"id_slot,omitempty"`
	Seed        *int64          `json:"seed,omitempty"`
}

// CompletionResponse is llama.cpp's native /completion answer, and also the
// shape of each streamed /completion chunk (Stop false until the last one).
type CompletionResponse struct {
	Index           int      `json:"index"`
	Content         string   `json:"content"`
	Tokens          []int    `json:"tokens"`
	IDSlot          int      `json:"id_slot"`
	Stop            bool     `json:"stop"`
	Model           string   `json:"model,omitempty"`
	TokensPredicted int      `json:"tokens_predicted,omitempty"`
	TokensEvaluated int      `json:"tokens_evaluated,omitempty"`
	StopType        string   `json:"stop_type,omitempty"` // "eos", "limit", "word", "none"
	StoppingWord    string   `json:"stopping_word,omitempty"`
	TokensCached    int      `json:"tokens_cached,omitempty"`
	Truncated       bool     `json:"truncated,omitempty"`
	Timings         *Timings `json:"timings,omitempty"`
}

// ChatMessage is one OpenAI chat message. Content is a string or an array of
// content parts; ContentText flattens both.
type ChatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// StreamOptions is OpenAI's stream_options.
type StreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// ChatRequest is the OpenAI-compatible POST /v1/chat/completions body (the
// subset llm-ring reads). llama.cpp also accepts n_predict here.
type ChatRequest struct {
	Model               string         `json:"model,omitempty"`
	Messages            []ChatMessage  `json:"messages"`
	MaxTokens           *int           `json:"max_tokens,omitempty"`
	MaxCompletionTokens *int           `json:"max_completion_tokens,omitempty"`
	NPredict            *int           `json:"n_predict,omitempty"`
	Stream              bool           `json:"stream,omitempty"`
	StreamOptions       *StreamOptions `json:"stream_options,omitempty"`
	User                string         `json:"user,omitempty"`
	Seed                *int64         `json:"seed,omitempty"`
}

// CompletionsRequest is the OpenAI-compatible POST /v1/completions body.
// Prompt is a string or an array (of strings or token ids).
type CompletionsRequest struct {
	Model         string          `json:"model,omitempty"`
	Prompt        json.RawMessage `json:"prompt"`
	MaxTokens     *int            `json:"max_tokens,omitempty"`
	NPredict      *int            `json:"n_predict,omitempty"`
	Stream        bool            `json:"stream,omitempty"`
	StreamOptions *StreamOptions  `json:"stream_options,omitempty"`
	User          string          `json:"user,omitempty"`
	Seed          *int64          `json:"seed,omitempty"`
}

// PromptTokensDetails is OpenAI's usage.prompt_tokens_details.
type PromptTokensDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

// Usage is OpenAI's usage block.
type Usage struct {
	PromptTokens        int                  `json:"prompt_tokens"`
	CompletionTokens    int                  `json:"completion_tokens"`
	TotalTokens         int                  `json:"total_tokens"`
	PromptTokensDetails *PromptTokensDetails `json:"prompt_tokens_details,omitempty"`
}

// ChatChoice is one choice of a chat answer (Message) or chunk (Delta).
type ChatChoice struct {
	Index        int          `json:"index"`
	Message      *ChatMessage `json:"message,omitempty"`
	Delta        *ChatDelta   `json:"delta,omitempty"`
	FinishReason *string      `json:"finish_reason"`
}

// ChatDelta is the incremental message of a streamed chat chunk.
type ChatDelta struct {
	Role    string  `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
	// NullContent writes "content": null when Content is nil: the first
	// chunk of llama.cpp's, vLLM's and OpenAI's streams carries the role
	// with a null content.
	NullContent bool `json:"-"`
}

// MarshalJSON writes the delta, with "content": null when NullContent is
// set and Content is nil.
func (d ChatDelta) MarshalJSON() ([]byte, error) {
	type plain ChatDelta
	if !d.NullContent || d.Content != nil {
		return json.Marshal(plain(d))
	}
	return json.Marshal(struct {
		Role    string  `json:"role,omitempty"`
		Content *string `json:"content"`
	}{d.Role, nil})
}

// ChatResponse is an OpenAI chat answer ("chat.completion") or a streamed
// chunk ("chat.completion.chunk"). llama.cpp adds Timings.
type ChatResponse struct {
	ID                string       `json:"id"`
	Object            string       `json:"object"`
	Created           int64        `json:"created"`
	Model             string       `json:"model"`
	SystemFingerprint string       `json:"system_fingerprint,omitempty"`
	Choices           []ChatChoice `json:"choices"`
	Usage             *Usage       `json:"usage,omitempty"`
	Timings           *Timings     `json:"timings,omitempty"`
}

// CompletionsChoice is one choice of a /v1/completions answer or chunk.
type CompletionsChoice struct {
	Index        int     `json:"index"`
	Text         string  `json:"text"`
	LogProbs     any     `json:"logprobs"`
	FinishReason *string `json:"finish_reason"`
}

// CompletionsResponse is an OpenAI /v1/completions answer ("text_completion")
// or streamed chunk. llama.cpp adds Timings.
type CompletionsResponse struct {
	ID                string              `json:"id"`
	Object            string              `json:"object"`
	Created           int64               `json:"created"`
	Model             string              `json:"model"`
	SystemFingerprint string              `json:"system_fingerprint,omitempty"`
	Choices           []CompletionsChoice `json:"choices"`
	Usage             *Usage              `json:"usage,omitempty"`
	Timings           *Timings            `json:"timings,omitempty"`
}

// ErrorBody is the error answer of the router and the simulated replica:
// {"error": {"code": 400, "message": "...", "type": "invalid_request_error"}}.
// The shape is OpenAI's; like llama.cpp, code carries the HTTP status.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is the inside of ErrorBody.
type ErrorDetail struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Type    string `json:"type"`
}

// Error types, as OpenAI and llama.cpp name them.
const (
	ErrTypeInvalidRequest = "invalid_request_error" // 400, 404, 413
	ErrTypeNotFound       = "not_found_error"       // 404
	ErrTypeUnavailable    = "unavailable_error"     // 503
	ErrTypeServer         = "server_error"          // 500, 502, 504
	ErrTypeExceedsContext = "exceed_context_size_error"
	ErrTypeAuthentication = "authentication_error" // 401
	ErrTypeNotSupported   = "not_supported_error"  // 501
)

// ErrTextNoReplica is the message of the 503 a request gets when no replica
// can take it: the router's answer (internal/router) and the simulator's
// failed row (internal/sim) both write it, from here.
const ErrTextNoReplica = "no ready replica to serve the request"

// NewError returns an ErrorBody for an HTTP status and message.
func NewError(status int, typ, msg string) ErrorBody {
	return ErrorBody{Error: ErrorDetail{Code: status, Message: msg, Type: typ}}
}

// ErrNoPrompt is returned by PromptText for a missing or null prompt.
var ErrNoPrompt = errors.New("missing prompt")

// PromptText interprets a prompt field: a string gives itself; an array of
// strings gives them joined by "\n"; an array of token ids (or a mix, as
// llama.cpp allows) gives the strings joined, and tokens counts the ids.
// Any other JSON type is an error naming the field.
func PromptText(raw json.RawMessage) (text string, tokens int, err error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return "", 0, ErrNoPrompt
	}
	switch raw[0] {
	case '"':
		if err := json.Unmarshal(raw, &text); err != nil {
			return "", 0, fmt.Errorf("prompt: %w", err)
		}
		return text, 0, nil
	case '[':
		var items []json.RawMessage
		if err := json.Unmarshal(raw, &items); err != nil {
			return "", 0, fmt.Errorf("prompt: %w", err)
		}
		var b strings.Builder
		for i, it := range items {
			it = bytes.TrimSpace(it)
			switch {
			case len(it) > 0 && it[0] == '"':
				var s string
				if err := json.Unmarshal(it, &s); err != nil {
					return "", 0, fmt.Errorf("prompt[%d]: %w", i, err)
				}
				if b.Len() > 0 {
					b.WriteByte('\n')
				}
				b.WriteString(s)
			case len(it) > 0 && (it[0] == '-' || (it[0] >= '0' && it[0] <= '9')):
				var id int64
				if err := json.Unmarshal(it, &id); err != nil {
					return "", 0, fmt.Errorf("prompt[%d]: token id must be an integer", i)
				}
				tokens++
			default:
				return "", 0, fmt.Errorf("prompt[%d]: must be a string or a token id", i)
			}
		}
		return b.String(), tokens, nil
	default:
		return "", 0, errors.New("prompt: must be a string or an array of strings or token ids")
	}
}

// ContentText flattens a chat message content: a string gives itself; an
// array of parts gives the "text" of each text part joined by "\n"; null
// gives "". Any other JSON type is an error.
func ContentText(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return "", nil
	}
	switch raw[0] {
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", err
		}
		return s, nil
	case '[':
		var parts []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		if err := json.Unmarshal(raw, &parts); err != nil {
			return "", errors.New("content: must be a string or an array of content parts")
		}
		var b strings.Builder
		for _, p := range parts {
			if p.Type != "text" {
				continue
			}
			if b.Len() > 0 {
				b.WriteByte('\n')
			}
			b.WriteString(p.Text)
		}
		return b.String(), nil
	default:
		return "", errors.New("content: must be a string or an array of content parts")
	}
}

// chatOverheadChars approximates the characters a chat template adds per
// message (role markers and separators, as in ChatML's
// "<|im_start|>role\n…<|im_end|>\n").
const chatOverheadChars = 24

// ChatChars is the size, in characters, the router counts for one chat
// message: its text, its role and the template's framing. The router's
// token estimate of a chat request is Σ ChatChars / chars_per_token (for
// the part not answered before); the simulator counts the same way.
func ChatChars(role, content string) int { return len(content) + len(role) + chatOverheadChars }

// TextContent encodes s as a chat message content.
func TextContent(s string) json.RawMessage {
	b, _ := json.Marshal(s)
	return b
}

// Ptr returns a pointer to v, for the optional fields above.
func Ptr[T any](v T) *T { return &v }

// Finish reasons of OpenAI answers.
const (
	FinishStop   = "stop"
	FinishLength = "length"
)

// SSE framing: every event is "data: <json>\n\n"; OpenAI-compatible streams
// end with DataDone.
const (
	SSEPrefix = "data: "
	DataDone  = "[DONE]"
)

// Model is one entry of an OpenAI model list (GET /v1/models).
type Model struct {
	ID      string `json:"id"`
	Object  string `json:"object"` // "model"
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

// ModelList is OpenAI's GET /v1/models answer: {"object": "list", "data": [...]}.
type ModelList struct {
	Object string  `json:"object"`
	Data   []Model `json:"data"`
}
