package router

import (
	"encoding/json"
	"errors"
	"slices"
	"sync"
)

// The request's model (issue 23): read from the body by the parse
// (parse.go, parse_fast.go; the llama.cpp /completion names none), it
// picks the pool; when a rewrite or an alias changed it, the body sent
// upstream says the new name (setModel).

// errNoObject: a body whose model cannot be set because it is not a JSON
// object (the parse has accepted it, so this does not happen for a
// conversation; a request routed by load is sent as it came).
var errNoObject = errors.New("request body is not a JSON object")

// setModel returns body with its top-level "model" member's value replaced
// by name (a JSON string), or with a "model" member added first when it
// has none. Only the value's bytes change: the rest of the body, member
// order, spacing and numbers included, goes upstream as the client sent
// it. Every top-level "model" member is replaced (a body that repeats it
// is read by its last one by encoding/json and Python's json alike). A
// body the scanner does not follow (a non-ASCII key, nesting deeper than
// it reads) is decoded and encoded again with encoding/json: still the
// same members and values, in sorted order.
func setModel(body []byte, name string) ([]byte, error) {
	val, err := json.Marshal(name)
	if err != nil {
		return nil, err
	}
	spans, open, ok := modelSpans(body)
	if !ok {
		return setModelSlow(body, name)
	}
	if len(spans) == 0 {
		member := append(append([]byte(`"model":`), val...), ',')
		s := reqScanner{b: body, i: open + 1}
		if s.peek() == '}' {
			member = member[:len(member)-1]
		}
		return slices.Insert(slices.Clone(body), open+1, member...), nil
	}
	out := make([]byte, 0, len(body)+len(spans)*len(val))
	last := 0
	for _, sp := range spans {
		out = append(append(out, body[last:sp[0]]...), val...)
		last = sp[1]
	}
	return append(out, body[last:]...), nil
}

// modelSpans scans body: the byte spans of the values of its top-level
// "model" members (a key with escapes decoded, as encoding/json reads it)
// and the offset of its opening brace; ok false when the body is not a
// JSON object the scanner follows.
func modelSpans(body []byte) (spans [][2]int, open int, ok bool) {
	s := reqScanner{b: body}
	if s.peek() != '{' {
		return nil, 0, false
	}
	open = s.i
	ok = s.object(func(key []byte) bool {
		if string(key) != "model" {
			return s.skip()
		}
		s.ws()
		start := s.i
		if !s.skip() {
			return false
		}
		spans = append(spans, [2]int{start, s.i})
		return true
	})
	return spans, open, ok && s.end()
}

// setModelSlow is setModel through encoding/json.
func setModelSlow(body []byte, name string) ([]byte, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil || top == nil {
		return nil, errNoObject
	}
	val, err := json.Marshal(name)
	if err != nil {
		return nil, err
	}
	top["model"] = val
	return json.Marshal(top)
}

// bodyModel reads the top-level "model" string of a body the router does
// not parse (embeddings, rerank, tokenize: the replica judges the body):
// "" when it names none, or is not an object the scanner follows.
func bodyModel(body []byte) string {
	s := reqScanner{b: body}
	if s.peek() != '{' {
		return ""
	}
	var model string
	ok := s.object(func(key []byte) bool {
		if string(key) != "model" || s.peek() != '"' {
			return s.skip()
		}
		var ok bool
		model, ok = s.str()
		return ok
	})
	if !ok || !s.end() {
		return ""
	}
	return model
}

// modelNotFound is the answer to a request for a model no pool serves, in
// the shape of OpenAI's own answer to an unknown model (type
// invalid_request_error, code model_not_found), listing the models served.
type modelNotFound struct {
	Error modelNotFoundDetail `json:"error"`
}

type modelNotFoundDetail struct {
	Message string `json:"message"`
	Type    string `json:"type"`
	Param   string `json:"param"`
	Code    string `json:"code"`
}

// modelNames interns the model names requests give, so that the fast path
// reads a name it has seen without allocating: the first maxModelNames
// distinct names of at most maxModelName bytes are kept (a client naming
// junk only makes later new names allocate, as they did before).
type modelNames struct {
	mu sync.RWMutex
	m  map[string]string
}

const (
	maxModelNames = 256
	maxModelName  = 256
)

func (n *modelNames) intern(b []byte) string {
	if n == nil || len(b) > maxModelName {
		return string(b)
	}
	n.mu.RLock()
	s, ok := n.m[string(b)]
	n.mu.RUnlock()
	if ok {
		return s
	}
	s = string(b)
	n.mu.Lock()
	if n.m == nil {
		n.m = map[string]string{}
	}
	if len(n.m) < maxModelNames {
		n.m[s] = s
	}
	n.mu.Unlock()
	return s
}

// modelName reads a model string: interned when it has no escapes and is
// ASCII, else decoded as str does.
func (s *reqScanner) modelName(n *modelNames) (string, bool) {
	start := s.i
	raw, esc, ok := s.rawString()
	if !ok {
		return "", false
	}
	if !esc && isASCII(raw) {
		return n.intern(raw), true
	}
	s.i = start
	return s.str()
}
