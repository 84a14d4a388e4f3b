package model

import (
	"math"
	"strings"
)

// Output is a generated answer: its text and its tokens.
// Tokenize(Text) == Tokens, so a client that sends the answer back in the
// next turn's prompt hits the cache token for token.
type Output struct {
	Text   string
	Tokens []Token
	// Ends, once computed by Piece, holds where each token ends in Text:
	// token k is Text[Ends[k-1]:Ends[k]] (with Ends[-1] = 0).
	Ends []int32
}

// Piece returns the text of token k. The first call computes Ends.
func (o *Output) Piece(k int) string {
	if len(o.Ends) != len(o.Tokens) {
		o.Ends = make([]int32, 0, len(o.Tokens))
		for i := 0; i < len(o.Text); {
			i, _ = fastNext(o.Text, i)
			o.Ends = append(o.Ends, int32(i))
		}
	}
	start := int32(0)
	if k > 0 {
		start = o.Ends[k-1]
	}
	return o.Text[start:o.Ends[k]]
}

// words is the vocabulary of the generated answers: common English words
// and some longer ones, so that answers tokenize like prose (long words
// split into pieces).
var words = [...]string{
	"the", "of", "and", "to", "a", "in", "is", "it", "that", "for", "you", "was", "with", "on",
	"as", "are", "be", "this", "have", "from", "or", "one", "had", "by", "but", "not", "what",
	"all", "were", "we", "when", "your", "can", "said", "there", "use", "an", "each", "which",
	"she", "do", "how", "their", "if", "will", "up", "other", "about", "out", "many", "then",
	"them", "these", "so", "some", "her", "would", "make", "like", "him", "into", "time", "has",
	"look", "two", "more", "write", "go", "see", "number", "no", "way", "could", "people", "my",
	"than", "first", "water", "been", "call", "who", "its", "now", "find", "long", "down", "day",
	"did", "get", "come", "made", "may", "part", "system", "replica", "request", "answer",
	"context", "memory", "cache", "routing", "conversation", "important", "consider",
	"performance", "throughput", "configuration", "example", "different", "because", "through",
	"question", "following", "information", "process", "between", "however", "especially",
	"understanding", "approximately", "implementation", "recommendation", "should", "model",
	"simple", "result", "value", "change", "server", "network", "latency", "balance",
}

// splitmix64 is the output function of SplitMix64: a cheap, well-mixed hash.
func splitmix64(x uint64) uint64 {
	x += 0x9E3779B97F4A7C15
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9
	x = (x ^ (x >> 27)) * 0x94D049BB133111EB
	return x ^ (x >> 31)
}

// answer is what a request will answer, decided alike by both engines:
// its length (the natural one, cut by n_predict and by the context left),
// why it stops, whether the context ran out, and the text.
type answer struct {
	target int
	stop   StopType
	full   bool
	out    Output
}

// planAnswer decides rq's answer; key is its prompt's key, left the context
// tokens left after its prompt.
func planAnswer(cfg *Config, rq *Request, key uint64, left int) answer {
	seed := rq.Seed
	if seed == 0 {
		seed = cfg.Seed
	}
	a := answer{target: answerLength(seed, key, cfg.AnswerMin, cfg.AnswerMax), stop: StopEOS}
	if rq.NPredict >= 0 && rq.NPredict < a.target {
		a.target, a.stop = rq.NPredict, StopLimit
	}
	if a.target > left {
		a.target, a.stop, a.full = left, StopLimit, true
	}
	a.out = GenerateAnswer(seed, key, a.target)
	return a
}

// answerLength is the natural length of the answer to a prompt: log-uniform
// in [lo, hi] tokens, chosen by (seed, key).
func answerLength(seed, key uint64, lo, hi int) int {
	if hi <= lo {
		return lo
	}
	u := float64(splitmix64(seed^splitmix64(key^0xA5A5A5A5))>>11) / (1 << 53)
	l := math.Exp(math.Log(float64(lo)) + u*(math.Log(float64(hi))-math.Log(float64(lo))))
	n := int(l + 0.5)
	return min(max(n, lo), hi)
}

// wordForm is a word as it appears in an answer, pre-tokenized.
type wordForm struct {
	text string
	toks []Token
	ends []int32 // relative to the start of text
}

func newWordForm(text string) wordForm {
	toks, ends := AppendPieces(nil, nil, text)
	return wordForm{text, toks, ends}
}

// forms holds, for each word, its three forms: " word" (inside a sentence),
// " Word" (a sentence after another) and "Word" (the first of a
// paragraph). Built once; read-only.
var forms = func() (f [len(words)][3]wordForm) {
	for i, w := range words {
		capital := strings.ToUpper(w[:1]) + w[1:]
		f[i] = [3]wordForm{newWordForm(" " + w), newWordForm(" " + capital), newWordForm(capital)}
	}
	return f
}()

var (
	tokComma    = pieceID(",")
	tokPeriod   = pieceID(".")
	tokQuestion = pieceID("?")
	tokNewline  = pieceID("\n")
	tokSpace    = pieceID(" ")
	tokDigits   = func() (d [10]Token) {
		for i := range d {
			d[i] = pieceID(string(rune('0' + i)))
		}
		return d
	}()
)

// answerWriter accumulates an answer's text and tokens. When the answer
// is long enough, cut records where its n-th token ends.
type answerWriter struct {
	b    strings.Builder
	toks []Token
	n    int
	cut  int
}

// form appends a pre-tokenized chunk.
func (w *answerWriter) form(f *wordForm) {
	if k := w.n - len(w.toks); k > 0 && k <= len(f.toks) {
		w.cut = w.b.Len() + int(f.ends[k-1])
	}
	w.b.WriteString(f.text)
	w.toks = append(w.toks, f.toks...)
}

// number appends " <v>": a space token, then one token per digit.
func (w *answerWriter) number(v int) {
	w.one(" ", tokSpace)
	var buf [8]byte
	i := len(buf)
	for {
		i--
		buf[i] = byte('0' + v%10)
		v /= 10
		if v == 0 {
			break
		}
	}
	for _, c := range buf[i:] {
		w.one(string(rune(c)), tokDigits[c-'0'])
	}
}

// one appends a one-token chunk.
func (w *answerWriter) one(text string, tok Token) {
	w.b.WriteString(text)
	w.toks = append(w.toks, tok)
	if len(w.toks) == w.n {
		w.cut = w.b.Len()
	}
}

// GenerateAnswer returns the first n tokens of the deterministic answer for
// (seed, key), where key identifies the prompt (see PromptKey). The text is
// sentences of words; the answer stops after exactly n tokens, possibly in
// the middle of a word, as a generation cut by n_predict does.
//
// Every chunk appended (a word with its leading space, a punctuation mark,
// a newline, a number) starts at a token boundary of the whole text, so the
// tokens are Tokenize(Text).
func GenerateAnswer(seed, key uint64, n int) Output {
	if n <= 0 {
		return Output{}
	}
	w := answerWriter{n: n}
	w.b.Grow(n*5 + 16)
	w.toks = make([]Token, 0, n+8)
	state := seed ^ splitmix64(key)
	rnd := func() uint64 {
		state += 0x9E3779B97F4A7C15
		return splitmix64(state)
	}
	paragraph := true
	for len(w.toks) < n {
		nw := 4 + int(rnd()%12)
		for i := 0; i < nw && len(w.toks) < n; i++ {
			r := rnd()
			form := 0 // " word"
			switch {
			case i == 0 && paragraph:
				form = 2 // "Word"
			case i == 0:
				form = 1 // " Word"
			}
			paragraph = false
			w.form(&forms[r%uint64(len(words))][form])
			switch {
			case (r>>32)%23 == 0:
				w.number(int((r >> 40) % 2000))
			case i+1 < nw && (r>>20)%9 == 0:
				w.one(",", tokComma)
			}
		}
		if rnd()%10 == 0 {
			w.one("?", tokQuestion)
		} else {
			w.one(".", tokPeriod)
		}
		if rnd()%4 == 0 {
			w.one("\n", tokNewline)
			w.one("\n", tokNewline)
			paragraph = true
		}
	}
	return Output{Text: w.b.String()[:w.cut], Tokens: w.toks[:n]}
}

// prefix is the answer's first n tokens and their text (a cancelled
// request's partial answer).
func (o *Output) prefix(n int) Output {
	end := 0
	if n > 0 {
		o.Piece(n - 1) // computes o.Ends
		end = int(o.Ends[n-1])
	}
	return Output{Text: o.Text[:end], Tokens: o.Tokens[:n], Ends: o.Ends[:n]}
}
