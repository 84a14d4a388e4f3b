package router

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"

	"github.com/llm-ring/llm-ring/internal/convo"
	"github.com/llm-ring/llm-ring/internal/prefix"
	"github.com/llm-ring/llm-ring/internal/wire"
)

// apiKind is one of the proxied APIs.
type apiKind uint8

const (
	kindCompletion     apiKind = iota + 1 // llama.cpp POST /completion
	kindChat                              // OpenAI POST /v1/chat/completions
	kindCompletions                       // OpenAI POST /v1/completions
	kindMessages                          // Anthropic POST /v1/messages
	kindByLoad                            // embeddings, rerank, tokenize: placement does not matter
	kindOllamaChat                        // Ollama POST /api/chat
	kindOllamaGenerate                    // Ollama POST /api/generate
)

func kindOf(path string) apiKind {
	switch path {
	case wire.PathCompletion:
		return kindCompletion
	case wire.PathChatCompletions:
		return kindChat
	case wire.PathCompletions:
		return kindCompletions
	case wire.PathMessages:
		return kindMessages
	case pathOllamaChat:
		return kindOllamaChat
	case pathOllamaGenerate:
		return kindOllamaGenerate
	}
	if isByLoad(path) {
		return kindByLoad
	}
	return 0
}

// parsed is what the router reads from a request before routing it.
type parsed struct {
	key       string // conversation key
	keySource string // "header:<name>", "body:<field>" or "prefix"
	turn      int    // x-turn header, else user messages counted (chat), else 0
	chars     int    // prompt length in characters (the token estimate's input)
	tokens    int    // prompt token ids given directly (token-array prompts)
	maxTokens int    // requested output, or the default
	stream    bool
	// model is the body's "model" ("" when absent or null; the llama.cpp
	// /completion names none): it picks the pool (issue 23).
	model string
	// blocks are the prompt's chained block hashes (the prefix index's
	// input), from the hasher parseRequest was given; firstUser is the
	// first user message (chat) or the prompt's start.
	blocks    []uint64
	firstUser string
	// streamOptsAbsent: the fast path read the whole body and saw no
	// stream_options member (prepareStream need not look for one).
	streamOptsAbsent bool
}

// keyRules says how to identify a conversation.
type keyRules struct {
	headers     []string
	canon       []headerName // headers, canonical (keyHeaders); nil: derived per request
	bodyField   string
	prefixChars int
	defaultMax  int
	blockChars  int         // prefix index block size (0: no blocks)
	maxOutput   int         // max_output_tokens
	names       *modelNames // interns the models requests name (nil: none)
}

// httpError is an error with an HTTP status and an OpenAI error type.
type httpError struct {
	status int
	typ    string
	msg    string
}

func (e *httpError) Error() string { return e.msg }

func badRequest(format string, args ...any) *httpError {
	return &httpError{http.StatusBadRequest, wire.ErrTypeInvalidRequest, fmt.Sprintf(format, args...)}
}

// parseRequest reads the body of a proxied request. Errors are 400s that
// name the field.
//
// hs, when not nil, hashes the prompt as the replica will see it into
// blocks (p.blocks aliases its buffer: keep hs until the request ends).
//
// An OpenAI chat goes through the one-pass fast path (parse_fast.go) and,
// when that declines, through parseJSON, as every other API does.
func parseRequest(kind apiKind, h http.Header, body []byte, rules *keyRules, hs *prefix.Hasher) (parsed, error) {
	if kind == kindChat {
		if p, ok := parseChatFast(h, body, rules, hs); ok {
			return p, nil
		}
		if hs != nil {
			hs.Reset(hs.BlockChars()) // parseChatFast writes to it only on success; stay sure
		}
	}
	return parseJSON(kind, h, body, rules, hs)
}

// parseJSON is parseRequest over encoding/json: a map of the top-level
// members, then each field read from it.
func parseJSON(kind apiKind, h http.Header, body []byte, rules *keyRules, hs *prefix.Hasher) (parsed, error) {
	var p parsed
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil {
		if len(bytes.TrimSpace(body)) == 0 {
			return p, badRequest("request body is empty; expected a JSON object")
		}
		if bytes.HasPrefix(bytes.TrimSpace(body), []byte("{")) {
			return p, badRequest("malformed JSON body: %v", err)
		}
		if !json.Valid(body) {
			return p, badRequest("request body is not JSON")
		}
		return p, badRequest("request body must be a JSON object")
	}
	if top == nil {
		return p, badRequest("request body must be a JSON object, not null")
	}
	if err := p.parseOutput(kind, top, rules); err != nil {
		return p, err
	}
	if kind != kindCompletion {
		var err error
		if p.model, err = optString(top, "model"); err != nil {
			return p, err
		}
	}
	var startKey string // the key of the conversation's start
	var err error
	switch kind {
	case kindChat, kindOllamaChat:
		startKey, err = p.parseMessages(top, rules.prefixChars, hs)
	case kindOllamaGenerate:
		startKey, err = p.parseOllamaGenerate(top, rules.prefixChars, hs)
	case kindMessages:
		startKey, err = p.parseAnthropic(body, rules.prefixChars, hs)
	default:
		startKey, err = p.parsePrompt(top, rules.prefixChars, hs)
	}
	if err != nil {
		return p, err
	}
	if hs != nil {
		p.blocks = hs.Blocks()
	}

	var bodyKey string
	if rules.bodyField != "" && headerKey(h, rules) == "" {
		if raw, ok := top[rules.bodyField]; ok && !isNull(raw) {
			if err := json.Unmarshal(raw, &bodyKey); err != nil {
				return p, badRequest("%s: must be a string", rules.bodyField)
			}
		}
	}
	p.conversationKey(h, rules, bodyKey, startKey)
	return p, nil
}

// headerName is a conversation header: its canonical key (the header map's
// own, so a lookup is one map read, not a canonicalization of the
// configured spelling per request) and the key source it is logged as.
type headerName struct{ key, source string }

// keyHeaders is names as headerNames.
func keyHeaders(names []string) []headerName {
	out := make([]headerName, len(names))
	for i, n := range names {
		out[i] = headerName{textproto.CanonicalMIMEHeaderKey(n), "header:" + strings.ToLower(n)}
	}
	return out
}

// headerNames is the conversation headers (rules built without keyHeaders,
// in tests, derive them here).
func (rules *keyRules) headerNames() []headerName {
	if rules.canon != nil {
		return rules.canon
	}
	return keyHeaders(rules.headers)
}

// firstHeader is the value of the first of names h carries non-blank, and its name.
func firstHeader(h http.Header, names []headerName) (string, *headerName) {
	for i := range names {
		if v := h[names[i].key]; len(v) > 0 {
			if t := strings.TrimSpace(v[0]); t != "" {
				return t, &names[i]
			}
		}
	}
	return "", nil
}

// headerKey is the first configured conversation header's value ("" if none).
func headerKey(h http.Header, rules *keyRules) string {
	v, _ := firstHeader(h, rules.headerNames())
	return v
}

// conversationKey sets the conversation key: configured headers, then the
// body field (bodyKey, its value), then the start; and the x-turn header.
func (p *parsed) conversationKey(h http.Header, rules *keyRules, bodyKey, startKey string) {
	if v, name := firstHeader(h, rules.headerNames()); name != nil {
		p.key, p.keySource = v, name.source
	}
	if p.key == "" && bodyKey != "" {
		p.key, p.keySource = bodyKey, "body:"+rules.bodyField
	}
	if p.key == "" {
		p.key = startKey
		p.keySource = "prefix"
	}
	if v := h["X-Turn"]; len(v) > 0 {
		if n, err := strconv.Atoi(strings.TrimSpace(v[0])); err == nil && n >= 0 {
			p.turn = n
		}
	}
}

// parseOutput reads whether the answer streams and how long it may be
// (Ollama: streamed unless "stream": false, options.num_predict).
func (p *parsed) parseOutput(kind apiKind, top map[string]json.RawMessage, rules *keyRules) error {
	var err error
	if kind == kindOllamaChat || kind == kindOllamaGenerate {
		if p.stream, err = ollamaStream(top); err != nil {
			return err
		}
		p.maxTokens, err = ollamaMaxTokens(top, rules.defaultMax, rules.maxOutput)
		return err
	}
	if p.stream, err = optBool(top, "stream"); err != nil {
		return err
	}
	p.maxTokens, err = maxTokens(kind, top, rules.defaultMax, rules.maxOutput)
	return err
}

// parseMessages reads a chat request's messages into the conversation
// accumulator: the characters of the whole conversation, its blocks, its
// turn and the key of its start (system prompts + the first prefixChars
// characters of the first user message).
func (p *parsed) parseMessages(top map[string]json.RawMessage, prefixChars int, hs *prefix.Hasher) (string, error) {
	raw, ok := top["messages"]
	if !ok || isNull(raw) {
		return "", badRequest("messages: missing")
	}
	var msgs []wire.ChatMessage
	if err := json.Unmarshal(raw, &msgs); err != nil {
		return "", badRequest("messages: must be an array of {role, content} objects")
	}
	if len(msgs) == 0 {
		return "", badRequest("messages: must not be empty")
	}
	var acc convo.Accumulator
	acc.Reset(prefixChars, hs)
	for i, m := range msgs {
		if m.Role == "" {
			return "", badRequest("messages[%d].role: missing", i)
		}
		text, err := wire.ContentText(m.Content)
		if err != nil {
			return "", badRequest("messages[%d].%v", i, err)
		}
		acc.Add(m.Role, text)
	}
	return p.accumulated(acc.Routing()), nil
}

// accumulated takes what the conversation accumulator read and returns the
// key of the conversation's start.
func (p *parsed) accumulated(r convo.Routing) string {
	p.chars, p.firstUser, p.turn = r.Chars, r.FirstUser, r.Turn
	return r.Key
}

// parsePrompt reads a /completion or /v1/completions prompt.
func (p *parsed) parsePrompt(top map[string]json.RawMessage, prefixChars int, hs *prefix.Hasher) (string, error) {
	text, tokens, err := wire.PromptText(top["prompt"])
	if err != nil {
		return "", badRequest("%v", err)
	}
	p.chars, p.tokens = len(text), tokens
	if tokens == 0 { // a token-array prompt has no text to index
		p.firstUser = text
		if hs != nil {
			hs.WriteString(text)
		}
	}
	if tokens > 0 {
		// A token-array prompt starts with its first ids: key on those.
		return wire.PrefixKey(string(top["prompt"][:min(len(top["prompt"]), prefixChars)])), nil
	}
	return wire.PrefixKey(wire.FirstChars(text, prefixChars)), nil
}

// maxTokens reads the requested output length: max_tokens,
// max_completion_tokens (chat) or n_predict (llama.cpp); a missing or
// unlimited (-1) value gives def. A value above limit (max_output_tokens)
// is an error naming the field: it would make its replica look full.
func maxTokens(kind apiKind, top map[string]json.RawMessage, def, limit int) (int, error) {
	fields := []string{"n_predict", "max_tokens", "max_completion_tokens"}
	for _, f := range fields {
		raw, ok := top[f]
		if !ok || isNull(raw) {
			continue
		}
		var n int
		if err := json.Unmarshal(raw, &n); err != nil {
			return 0, badRequest("%s: must be an integer", f)
		}
		if n < -1 {
			return 0, badRequest("%s: must be ≥ -1, got %d", f, n)
		}
		if n > limit {
			return 0, badRequest("%s: must be ≤ max_output_tokens (%d), got %d", f, limit, n)
		}
		if n >= 0 {
			return n, nil
		}
	}
	return def, nil
}

func optBool(top map[string]json.RawMessage, name string) (bool, error) {
	raw, ok := top[name]
	if !ok || isNull(raw) {
		return false, nil
	}
	var b bool
	if err := json.Unmarshal(raw, &b); err != nil {
		return false, badRequest("%s: must be true or false", name)
	}
	return b, nil
}

// optString reads a string member; absent or null is "".
func optString(top map[string]json.RawMessage, name string) (string, error) {
	raw, ok := top[name]
	if !ok || isNull(raw) {
		return "", nil
	}
	var v string
	if err := json.Unmarshal(raw, &v); err != nil {
		return "", badRequest("%s: must be a string", name)
	}
	return v, nil
}

func isNull(raw json.RawMessage) bool { return bytes.Equal(bytes.TrimSpace(raw), []byte("null")) }
