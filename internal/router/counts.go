package router

import (
	"bytes"
	"errors"
	"math"
	"strconv"
)

// This file reads an answer's token counts: llama.cpp's "timings" (native
// and OpenAI-compatible answers and stream chunks), OpenAI's "usage" and
// native /completion's "stop". It is the one parser of these fields in the
// router (streams and whole bodies alike), a single pass over the bytes
// that allocates nothing: the answer is walked member by member, every
// value it does not need skipped (and checked: malformed JSON gives no
// counts, as a decoder would), so the cost is one scan of the answer.
// Keys match case-insensitively, as encoding/json matches them; a key
// written with escapes ("\u0074imings") is not recognized (no engine writes
// one).

// answerFields are the members of an answer the router reads.
type answerFields struct {
	timings, usage bool // present (not null)
	stop           bool
	cacheN         int
	promptN        int
	predictedN     int
	promptMS       float64
	predictedMS    float64
	promptTokens   int
	completion     int
	details        bool // usage.prompt_tokens_details present
	cachedTokens   int
}

// counts is what the fields say: timings win over usage, as before.
func (a *answerFields) counts() (counts, bool) {
	switch {
	case a.timings:
		return counts{known: true, cacheN: a.cacheN, promptN: a.promptN, predictedN: a.predictedN,
			promptMS: a.promptMS, predictedMS: a.predictedMS}, true
	case a.usage:
		cached := 0
		if a.details {
			cached = a.cachedTokens
		}
		return counts{known: true, cacheN: cached, promptN: max(0, a.promptTokens-cached), predictedN: a.completion,
			cachedUnknown: !a.details}, true
	}
	return counts{}, false
}

// is reports whether key is name, case folded as encoding/json folds it.
func is(key []byte, name string) bool {
	return len(key) >= len(name) && len(key) <= 3*len(name) && bytes.EqualFold(key, []byte(name))
}

var errSyntax = errors.New("malformed JSON")

// scanner walks JSON bytes.
type scanner struct {
	b []byte
	i int
}

// parseAnswer reads an answer (or one SSE event's data) into a.
func parseAnswer(data []byte, a *answerFields) error {
	s := scanner{b: data}
	err := s.object(func(key []byte) error {
		switch {
		case is(key, "timings"):
			a.timings = !s.null()
			return s.object(func(k []byte) error { return s.timingsField(k, a) })
		case is(key, "usage"):
			a.usage = !s.null()
			return s.object(func(k []byte) error { return s.usageField(k, a) })
		case is(key, "stop"):
			return s.boolean(&a.stop)
		}
		return s.skip()
	})
	if err == nil && s.ws() < len(s.b) {
		return errSyntax
	}
	return err
}

func (s *scanner) timingsField(k []byte, a *answerFields) error {
	switch {
	case is(k, "cache_n"):
		return s.integer(&a.cacheN)
	case is(k, "prompt_n"):
		return s.integer(&a.promptN)
	case is(k, "predicted_n"):
		return s.integer(&a.predictedN)
	case is(k, "prompt_ms"):
		return s.float(&a.promptMS)
	case is(k, "predicted_ms"):
		return s.float(&a.predictedMS)
	}
	return s.skip()
}

func (s *scanner) usageField(k []byte, a *answerFields) error {
	switch {
	case is(k, "prompt_tokens"):
		return s.integer(&a.promptTokens)
	case is(k, "completion_tokens"):
		return s.integer(&a.completion)
	case is(k, "prompt_tokens_details"):
		a.details = !s.null()
		return s.object(func(k []byte) error {
			if is(k, "cached_tokens") {
				return s.integer(&a.cachedTokens)
			}
			return s.skip()
		})
	}
	return s.skip()
}

// ws skips white space and returns the position of the next byte.
func (s *scanner) ws() int {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return s.i
		}
	}
	return s.i
}

// null consumes a null (then the caller's object call sees nothing to do)
// and reports whether it was one.
func (s *scanner) null() bool {
	s.ws()
	return s.i+4 <= len(s.b) && string(s.b[s.i:s.i+4]) == "null"
}

// object reads an object (or null), calling member with each key, the
// scanner at the member's value, which member must consume.
func (s *scanner) object(member func(key []byte) error) error {
	if s.null() {
		s.i += 4
		return nil
	}
	if s.ws() >= len(s.b) || s.b[s.i] != '{' {
		return errSyntax
	}
	s.i++
	if s.ws() < len(s.b) && s.b[s.i] == '}' {
		s.i++
		return nil
	}
	for {
		key, err := s.str()
		if err != nil {
			return err
		}
		if s.ws() >= len(s.b) || s.b[s.i] != ':' {
			return errSyntax
		}
		s.i++
		if err := member(key); err != nil {
			return err
		}
		if s.ws() >= len(s.b) {
			return errSyntax
		}
		switch s.b[s.i] {
		case ',':
			s.i++
		case '}':
			s.i++
			return nil
		default:
			return errSyntax
		}
	}
}

// str reads a string and returns its raw bytes (escapes left as they are:
// the keys the router looks for have none).
func (s *scanner) str() ([]byte, error) {
	if s.ws() >= len(s.b) || s.b[s.i] != '"' {
		return nil, errSyntax
	}
	start := s.i + 1
	for i := start; i < len(s.b); i++ {
		switch c := s.b[i]; {
		case c == '\\':
			i++
		case c == '"':
			s.i = i + 1
			return s.b[start:i], nil
		case c < 0x20:
			return nil, errSyntax
		}
	}
	return nil, errSyntax
}

// skip consumes one value of any kind.
func (s *scanner) skip() error {
	if s.ws() >= len(s.b) {
		return errSyntax
	}
	switch c := s.b[s.i]; {
	case c == '"':
		_, err := s.str()
		return err
	case c == '{':
		return s.object(func([]byte) error { return s.skip() })
	case c == '[':
		return s.array()
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	}
	_, _, err := s.number()
	return err
}

func (s *scanner) array() error {
	s.i++ // '['
	if s.ws() < len(s.b) && s.b[s.i] == ']' {
		s.i++
		return nil
	}
	for {
		if err := s.skip(); err != nil {
			return err
		}
		if s.ws() >= len(s.b) {
			return errSyntax
		}
		switch s.b[s.i] {
		case ',':
			s.i++
		case ']':
			s.i++
			return nil
		default:
			return errSyntax
		}
	}
}

func (s *scanner) literal(lit string) error {
	if s.i+len(lit) > len(s.b) || string(s.b[s.i:s.i+len(lit)]) != lit {
		return errSyntax
	}
	s.i += len(lit)
	return nil
}

func (s *scanner) boolean(v *bool) error {
	s.ws()
	switch {
	case s.literal("true") == nil:
		*v = true
	case s.literal("false") == nil:
		*v = false
	case s.literal("null") == nil:
	default:
		return errSyntax
	}
	return nil
}

// number reads a JSON number: its span, and whether it is an integer
// (no fraction, no exponent).
func (s *scanner) number() (span []byte, integer bool, err error) {
	start, i := s.i, s.i
	if i < len(s.b) && s.b[i] == '-' {
		i++
	}
	digits := func() int {
		n := 0
		for i < len(s.b) && s.b[i] >= '0' && s.b[i] <= '9' {
			i++
			n++
		}
		return n
	}
	if digits() == 0 {
		return nil, false, errSyntax
	}
	integer = true
	if i < len(s.b) && s.b[i] == '.' {
		i++
		if digits() == 0 {
			return nil, false, errSyntax
		}
		integer = false
	}
	if i < len(s.b) && (s.b[i] == 'e' || s.b[i] == 'E') {
		i++
		if i < len(s.b) && (s.b[i] == '+' || s.b[i] == '-') {
			i++
		}
		if digits() == 0 {
			return nil, false, errSyntax
		}
		integer = false
	}
	s.i = i
	return s.b[start:i], integer, nil
}

// integer reads an integer member (null leaves v as it is), as
// encoding/json does for an int: a fraction, an exponent or an overflow
// is an error.
func (s *scanner) integer(v *int) error {
	if s.null() {
		s.i += 4
		return nil
	}
	span, isInt, err := s.number()
	if err != nil || !isInt {
		return errSyntax
	}
	neg := span[0] == '-'
	if neg {
		span = span[1:]
	}
	n := 0
	for _, c := range span {
		if n > (math.MaxInt-9)/10 {
			return errSyntax
		}
		n = n*10 + int(c-'0')
	}
	if neg {
		n = -n
	}
	*v = n
	return nil
}

// pow10 are the powers of ten a float64 holds exactly.
var pow10 = [...]float64{1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
	1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22}

// float reads a number member (null leaves v as it is). A plain decimal
// of at most 15 digits (what engines write: 1.234, 5391.5) is converted
// exactly without allocating (an exact mantissa divided by an exact power
// of ten is correctly rounded); anything else goes through strconv.
func (s *scanner) float(v *float64) error {
	if s.null() {
		s.i += 4
		return nil
	}
	span, _, err := s.number()
	if err != nil {
		return err
	}
	var m int64
	digits, frac, dot, plain := 0, 0, false, true
	for _, c := range span {
		switch {
		case c == '-':
		case c == '.':
			dot = true
		case c >= '0' && c <= '9':
			m = m*10 + int64(c-'0')
			digits++
			if dot {
				frac++
			}
		default:
			plain = false
		}
	}
	if plain && digits <= 15 {
		f := float64(m) / pow10[frac]
		if span[0] == '-' {
			f = -f
		}
		*v = f
		return nil
	}
	f, err := strconv.ParseFloat(string(span), 64)
	if err != nil {
		return errSyntax
	}
	*v = f
	return nil
}
