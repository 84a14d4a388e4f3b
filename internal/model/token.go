package model

import (
	"unicode"
	"unicode/utf8"
)

// Token is a token id, in Qwen2.5's id space: ordinary pieces hash into
// [0, NumOrdinary), the ChatML special tokens have Qwen2.5's own ids.
type Token int32

// Special tokens, with Qwen2.5's ids. They are recognised anywhere in a text
// (llama.cpp's server tokenizes prompts with parse_special on).
const (
	TokEndOfText Token = 151643 // <|endoftext|>
	TokImStart   Token = 151644 // <|im_start|>
	TokImEnd     Token = 151645 // <|im_end|>

	// NumOrdinary is the number of ordinary token ids: pieces hash into
	// [0, NumOrdinary).
	NumOrdinary = 151643
	// VocabSize is Qwen2.5's (padded) vocabulary size: valid token ids are
	// in [0, VocabSize).
	VocabSize = 151936
)

// The texts of the special tokens.
const (
	ImStart   = "<|im_start|>"
	ImEnd     = "<|im_end|>"
	EndOfText = "<|endoftext|>"
)

// Character classes of the scanner.
const (
	clsOther   uint8 = iota // ASCII punctuation and controls: one token per run of the same char (≤ 4)
	clsLetter               // ASCII letter
	clsDigit                // one token per digit, as Qwen2.5 does
	clsSpace                // space, tab, CR, VT, FF
	clsNewline              // '\n': always a token of its own
	clsHigh                 // first byte of a multi-byte UTF-8 rune
)

var asciiClass = func() (t [256]uint8) {
	for c := 0; c < 256; c++ {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
			t[c] = clsLetter
		case c >= '0' && c <= '9':
			t[c] = clsDigit
		case c == ' ', c == '\t', c == '\r', c == '\v', c == '\f':
			t[c] = clsSpace
		case c == '\n':
			t[c] = clsNewline
		case c >= 0x80:
			t[c] = clsHigh
		default:
			t[c] = clsOther
		}
	}
	return t
}()

// pieceLen is the most letters (bytes) one word piece takes: from 4 to 9,
// chosen by the piece's first two letters. Short frequent words stay whole;
// longer words split into pieces of a few letters. It depends only on letters
// inside the piece, which is what makes tokenization stable when a text is
// cut at a token boundary (see Tokenize).
func pieceLen(c0, c1 byte) int {
	h := (uint32(c0)*0x9E37 ^ uint32(c1)*0x85EB) * 0x2C1B3C6D
	return 4 + int((h>>27)%6)
}

// next scans the token that starts at text[i]: it returns the end of the
// token and, for a special token, its id (0 otherwise). i < len(text).
//
// The rules, in the spirit of a byte-level BPE with a pre-tokenizer:
//   - <|im_start|>, <|im_end|> and <|endoftext|> are single tokens;
//   - every '\n' is a token;
//   - a word (run of letters) splits into pieces of at most pieceLen
//     letters; one space just before a word belongs to its first piece;
//   - other runs of spaces are one token; each digit is a token;
//   - punctuation: a run of the same char, up to 4, is one token;
//   - other non-ASCII runes are one token each.
//
// A token's extent depends only on its own bytes and the byte right after
// it, so Tokenize(a+b) == Tokenize(a)+Tokenize(b) whenever a ends at a
// token boundary that does not need look-ahead: after '\n', after a special
// token, or before a special token.
func next(text string, i int) (end int, special Token) {
	n := len(text)
	c := text[i]
	switch asciiClass[c] {
	case clsLetter:
		return wordPiece(text, i, i), 0
	case clsNewline, clsDigit:
		return i + 1, 0
	case clsSpace:
		j := i + 1
		for j < n && asciiClass[text[j]] == clsSpace {
			j++
		}
		if j < n && isLetterAt(text, j) {
			if j-1 > i {
				return j - 1, 0 // the spaces before the one that joins the word
			}
			return wordPiece(text, i, j), 0
		}
		return j, 0
	case clsHigh:
		if isLetterAt(text, i) {
			return wordPiece(text, i, i), 0
		}
		_, size := utf8.DecodeRuneInString(text[i:])
		return i + size, 0
	default:
		if c == '<' && i+1 < n && text[i+1] == '|' {
			if tok, l := specialAt(text[i:]); l > 0 {
				return i + l, tok
			}
		}
		j := i + 1
		for j < n && j-i < 4 && text[j] == c {
			if c == '<' {
				if _, l := specialAt(text[j:]); l > 0 {
					break // "<" + "<|im_end|>": the special token stays whole
				}
			}
			j++
		}
		return j, 0
	}
}

func specialAt(s string) (Token, int) {
	switch {
	case len(s) >= len(ImStart) && s[:len(ImStart)] == ImStart:
		return TokImStart, len(ImStart)
	case len(s) >= len(ImEnd) && s[:len(ImEnd)] == ImEnd:
		return TokImEnd, len(ImEnd)
	case len(s) >= len(EndOfText) && s[:len(EndOfText)] == EndOfText:
		return TokEndOfText, len(EndOfText)
	}
	return 0, 0
}

// isLetterAt reports whether a letter starts at text[i].
func isLetterAt(text string, i int) bool {
	c := text[i]
	if c < utf8.RuneSelf {
		return asciiClass[c] == clsLetter
	}
	r, _ := utf8.DecodeRuneInString(text[i:])
	return unicode.IsLetter(r)
}

// wordPiece returns the end of the word piece that starts at start, whose
// letters start at ws (start or start+1 with a leading space).
func wordPiece(text string, start, ws int) int {
	n := len(text)
	c0 := text[ws]
	var c1 byte
	if ws+1 < n {
		c1 = text[ws+1]
	}
	limit := ws + pieceLen(c0, c1)
	j := ws
	for j < n {
		c := text[j]
		if c < utf8.RuneSelf {
			if asciiClass[c] != clsLetter || j >= limit {
				break
			}
			j++
			continue
		}
		r, size := utf8.DecodeRuneInString(text[j:])
		if !unicode.IsLetter(r) || (j >= limit && j > ws) {
			break
		}
		j += size
	}
	return j
}

// pieceID maps a piece's bytes to an ordinary token id.
func pieceID(p string) Token {
	h := uint64(len(p)) * 0x9E3779B97F4A7C15
	for len(p) >= 8 {
		v := uint64(p[0]) | uint64(p[1])<<8 | uint64(p[2])<<16 | uint64(p[3])<<24 |
			uint64(p[4])<<32 | uint64(p[5])<<40 | uint64(p[6])<<48 | uint64(p[7])<<56
		h = (h ^ v) * 0xBF58476D1CE4E5B9
		h ^= h >> 31
		p = p[8:]
	}
	var v uint64
	for k := 0; k < len(p); k++ {
		v |= uint64(p[k]) << (8 * k)
	}
	h = (h ^ v) * 0x94D049BB133111EB
	h ^= h >> 29
	h *= 0xBF58476D1CE4E5B9
	h ^= h >> 32
	return Token(h % NumOrdinary)
}

// Tokenize returns the tokens of text. It is deterministic and stable at the
// boundaries ChatML creates: the tokens of a rendered conversation are the
// concatenation of the tokens of its rendered messages (see RenderChat).
func Tokenize(text string) []Token {
	return AppendTokens(make([]Token, 0, len(text)/3+4), text)
}

// AppendTokens appends the tokens of text to dst and returns the result.
func AppendTokens(dst []Token, text string) []Token {
	for i := 0; i < len(text); {
		end, sp := fastNext(text, i)
		if sp != 0 {
			dst = append(dst, sp)
		} else {
			dst = append(dst, pieceID(text[i:end]))
		}
		i = end
	}
	return dst
}

// fastNext is next with a fast path for the common case: an ASCII word
// piece, with or without one leading space.
func fastNext(text string, i int) (int, Token) {
	n := len(text)
	ws := i
	if text[i] == ' ' && i+1 < n {
		ws = i + 1
	}
	if asciiClass[text[ws]] != clsLetter {
		return next(text, i)
	}
	var c1 byte
	if ws+1 < n {
		c1 = text[ws+1]
	}
	limit := min(ws+pieceLen(text[ws], c1), n)
	j := ws + 1
	for j < limit && asciiClass[text[j]] == clsLetter {
		j++
	}
	if j < limit && text[j] >= utf8.RuneSelf {
		return next(text, i) // the word may go on with non-ASCII letters
	}
	return j, 0
}

// Count returns len(Tokenize(text)) without allocating.
func Count(text string) int {
	n := 0
	for i := 0; i < len(text); n++ {
		i, _ = fastNext(text, i)
	}
	return n
}

// AppendPieces appends the tokens of text to dst and the end offset (in
// text) of each token to ends: token k is text[ends[k-1]:ends[k]].
func AppendPieces(dst []Token, ends []int32, text string) ([]Token, []int32) {
	for i := 0; i < len(text); {
		end, sp := fastNext(text, i)
		if sp != 0 {
			dst = append(dst, sp)
		} else {
			dst = append(dst, pieceID(text[i:end]))
		}
		ends = append(ends, int32(end))
		i = end
	}
	return dst, ends
}
