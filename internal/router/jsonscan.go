package router

import (
	"encoding/binary"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// reqScanner is a one-pass reader of a JSON document for the request fast
// path (parse_fast.go): it validates what it passes over as encoding/json
// does and decodes only the strings and numbers asked for, without building
// a tree. Every method returns false where the input is not what the fast
// path handles (malformed, or merely unusual); the caller then gives the
// body to the encoding/json parser, which says what is wrong.
type reqScanner struct {
	b     []byte
	i     int
	depth int
}

// maxScanDepth bounds the nesting the scanner follows (encoding/json's own
// limit is 10,000; deeper bodies go to it).
const maxScanDepth = 512

func (s *reqScanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// peek returns the next byte after white space (0 at the end).
func (s *reqScanner) peek() byte {
	s.ws()
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

// eat consumes c after white space.
func (s *reqScanner) eat(c byte) bool {
	if s.peek() != c {
		return false
	}
	s.i++
	return true
}

// end reports whether only white space is left.
func (s *reqScanner) end() bool { s.ws(); return s.i == len(s.b) }

// skip passes over one value.
func (s *reqScanner) skip() bool {
	switch s.peek() {
	case '{':
		return s.object(func([]byte) bool { return s.skip() })
	case '[':
		return s.array(func() bool { return s.skip() })
	case '"':
		_, _, ok := s.rawString()
		return ok
	case 't':
		return s.literal("true")
	case 'f':
		return s.literal("false")
	case 'n':
		return s.literal("null")
	}
	_, ok := s.number()
	return ok
}

func (s *reqScanner) literal(lit string) bool {
	if string(s.b[s.i:min(len(s.b), s.i+len(lit))]) != lit {
		return false
	}
	s.i += len(lit)
	return true
}

// object reads an object, calling member for each key with the scanner
// at its value; member must consume the value.
func (s *reqScanner) object(member func(key []byte) bool) bool {
	if !s.eat('{') || s.depth >= maxScanDepth {
		return false
	}
	s.depth++
	defer func() { s.depth-- }()
	if s.eat('}') {
		return true
	}
	for {
		if s.peek() != '"' {
			return false
		}
		key, ok := s.key()
		if !ok || !s.eat(':') || !member(key) {
			return false
		}
		if s.eat('}') {
			return true
		}
		if !s.eat(',') {
			return false
		}
	}
}

// array reads an array, calling elem with the scanner at each element.
func (s *reqScanner) array(elem func() bool) bool {
	if !s.eat('[') || s.depth >= maxScanDepth {
		return false
	}
	s.depth++
	defer func() { s.depth-- }()
	if s.eat(']') {
		return true
	}
	for {
		if !elem() {
			return false
		}
		if s.eat(']') {
			return true
		}
		if !s.eat(',') {
			return false
		}
	}
}

// key reads an object key (its bytes alias the body unless it has
// escapes). A key that is not plain ASCII fails: struct decoding in
// encoding/json folds keys with Unicode rules (K, ſ, İ…), which the fast
// path does not follow.
func (s *reqScanner) key() ([]byte, bool) {
	raw, esc, ok := s.rawString()
	if !ok {
		return nil, false
	}
	if esc {
		raw = []byte(unquote(raw))
	}
	return raw, isASCII(raw)
}

// rawString reads a string: its bytes between the quotes and whether it
// holds escapes. It checks the syntax as encoding/json does (escapes,
// control characters).
func (s *reqScanner) rawString() (raw []byte, escaped, ok bool) {
	if !s.eat('"') {
		return nil, false, false
	}
	start := s.i
	for s.i < len(s.b) {
		s.i += plainRun(s.b[s.i:])
		if s.i >= len(s.b) {
			break
		}
		c := s.b[s.i]
		switch {
		case c == '"':
			raw = s.b[start:s.i]
			s.i++
			return raw, escaped, true
		case c == '\\':
			escaped = true
			if s.i+1 >= len(s.b) {
				return nil, false, false
			}
			switch s.b[s.i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.i += 2
			case 'u':
				if getu4(s.b[s.i:]) < 0 {
					return nil, false, false
				}
				s.i += 6
			default:
				return nil, false, false
			}
		case c < 0x20:
			return nil, false, false
		default:
			s.i++
		}
	}
	return nil, false, false
}

// str reads a string value and decodes it as encoding/json would.
func (s *reqScanner) str() (string, bool) {
	raw, esc, ok := s.rawString()
	if !ok {
		return "", false
	}
	if !esc && isASCII(raw) {
		return string(raw), true
	}
	return unquote(raw), true
}

// number reads a number, returning its text.
func (s *reqScanner) number() ([]byte, bool) {
	s.ws()
	b, i := s.b, s.i
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		i = digits(b, i)
	default:
		return nil, false
	}
	if i < len(b) && b[i] == '.' {
		if j := digits(b, i+1); j > i+1 {
			i = j
		} else {
			return nil, false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := digits(b, i)
		if j == i {
			return nil, false
		}
		i = j
	}
	num := b[s.i:i]
	s.i = i
	return num, true
}

func digits(b []byte, i int) int {
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	return i
}

// integer reads a number that is a plain integer of at most 18 digits
// (others go to encoding/json, which says whether they fit an int).
func (s *reqScanner) integer() (int, bool) {
	num, ok := s.number()
	if !ok {
		return 0, false
	}
	neg := num[0] == '-'
	if neg {
		num = num[1:]
	}
	if len(num) > 18 {
		return 0, false
	}
	n := 0
	for _, c := range num {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	if neg {
		n = -n
	}
	return n, true
}

func isASCII(b []byte) bool {
	for ; len(b) >= 8; b = b[8:] { // 8 at a time: no high bit set
		if binary.LittleEndian.Uint64(b)&swarHigh != 0 {
			return false
		}
	}
	for _, c := range b {
		if c >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

const swarOnes, swarHigh = 0x0101010101010101, 0x8080808080808080

// plainRun is how many bytes at b's start, in whole words of 8, hold no
// quote, backslash or control byte: the run of a string's contents
// rawString may pass over without looking at each byte. (A word where
// one of the tests below fires is left to the byte loop, which decides.)
func plainRun(b []byte) int {
	i := 0
	for ; i+8 <= len(b); i += 8 {
		if specialBytes(binary.LittleEndian.Uint64(b[i:])) != 0 {
			break
		}
	}
	return i
}

// specialBytes is non-zero when one of the 8 bytes of x is a quote, a
// backslash or a control byte (below 0x20): a zero byte in x^'"…' or
// x^'\\…', or a byte below 0x20 in x, sets its high bit. (It may also fire
// on a byte at or above 0x80; callers leave such a word to their byte loop.)
func specialBytes(x uint64) uint64 {
	q, bs := x^(swarOnes*'"'), x^(swarOnes*'\\')
	return ((q-swarOnes)&^q | (bs-swarOnes)&^bs | (x-swarOnes*0x20)&^x) & swarHigh
}

// getu4 decodes \uXXXX at the start of b, or returns -1.
func getu4(b []byte) rune {
	if len(b) < 6 || b[0] != '\\' || b[1] != 'u' {
		return -1
	}
	var r rune
	for _, c := range b[2:6] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return -1
		}
		r = r*16 + rune(c)
	}
	return r
}

// unquote decodes a string's syntax-checked bytes as encoding/json does:
// escapes resolved, an unpaired surrogate and every byte of invalid UTF-8
// replaced by U+FFFD.
func unquote(raw []byte) string {
	var b strings.Builder
	b.Grow(len(raw))
	for i := 0; i < len(raw); {
		c := raw[i]
		switch {
		case c == '\\':
			i = unescape(&b, raw, i)
		case c < utf8.RuneSelf:
			b.WriteByte(c)
			i++
		default:
			r, size := utf8.DecodeRune(raw[i:])
			if r == utf8.RuneError && size == 1 {
				b.WriteRune(unicode.ReplacementChar)
			} else {
				b.Write(raw[i : i+size])
			}
			i += size
		}
	}
	return b.String()
}

// unescape writes the escape at raw[i] and returns the index after it.
func unescape(b *strings.Builder, raw []byte, i int) int {
	switch raw[i+1] {
	case 'b':
		b.WriteByte('\b')
	case 'f':
		b.WriteByte('\f')
	case 'n':
		b.WriteByte('\n')
	case 'r':
		b.WriteByte('\r')
	case 't':
		b.WriteByte('\t')
	case 'u':
		rr := getu4(raw[i:])
		i += 6
		if utf16.IsSurrogate(rr) {
			if dec := utf16.DecodeRune(rr, getu4(raw[i:])); dec != unicode.ReplacementChar {
				b.WriteRune(dec)
				return i + 6
			}
			rr = unicode.ReplacementChar
		}
		b.WriteRune(rr)
		return i
	default: // '"', '\\', '/'
		b.WriteByte(raw[i+1])
	}
	return i + 2
}
