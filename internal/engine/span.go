package engine

import (
	"bytes"
	"encoding/json"
)

// fastMemberSpan is memberSpan for valid JSON: one walk over the top-level
// members, skipping each value by its brackets and strings, no tokens
// built. A key with escapes is decoded to compare it.
func fastMemberSpan(obj []byte, key string) (start, end int, ok bool) {
	i := skipWS(obj, 0)
	if i >= len(obj) || obj[i] != '{' {
		return 0, 0, false
	}
	i = skipWS(obj, i+1)
	for i < len(obj) && obj[i] == '"' {
		ks := i
		i = skipString(obj, i)
		k := obj[ks+1 : i-1]
		i = skipWS(obj, i)
		if i >= len(obj) || obj[i] != ':' {
			return 0, 0, false
		}
		vs := skipWS(obj, i+1)
		ve := skipValue(obj, vs)
		if ve <= vs {
			return 0, 0, false
		}
		if keyIs(k, obj[ks:ks+len(k)+2], key) {
			start, end, ok = vs, ve, true
		}
		i = skipWS(obj, ve)
		if i < len(obj) && obj[i] == ',' {
			i = skipWS(obj, i+1)
		}
	}
	return start, end, ok
}

// keyIs reports whether a key (raw: its bytes between the quotes; quoted:
// with them) decodes to name.
func keyIs(raw, quoted []byte, name string) bool {
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw) == name
	}
	var k string
	return json.Unmarshal(quoted, &k) == nil && k == name
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index after the string starting at b[i] ('"').
func skipString(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return len(b)
}

// skipValue returns the index after the value starting at b[i].
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return i
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for ; i < len(b); i++ {
			switch b[i] {
			case '"':
				i = skipString(b, i) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
		}
		return len(b)
	}
	for ; i < len(b); i++ { // a number or a literal
		switch b[i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return i
		}
	}
	return i
}
