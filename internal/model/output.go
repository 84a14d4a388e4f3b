package model

import (
	"math"
	"strings"
)

// Output is a generated answer: its text, its tokens, and where each token
// ends in the text. Tokenize(Text) == Tokens, so a client that sends the
// answer back in the next turn's prompt hits the cache token for token.
type Output struct {
	Text   string
	Tokens []Token
	Ends   []int32 // token k is Text[Ends[k-1]:Ends[k]] (Ends[-1] = 0)
}

// Piece returns the text of token k.
func (o *Output) Piece(k int) string {
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

// GenerateAnswer returns the first n tokens of the deterministic answer for
// (seed, key), where key identifies the prompt (see PromptKey). The text is
// sentences of words; the answer stops after exactly n tokens, possibly in
// the middle of a word, as a generation cut by n_predict does.
func GenerateAnswer(seed, key uint64, n int) Output {
	if n <= 0 {
		return Output{}
	}
	var b strings.Builder
	b.Grow(n*5 + 16)
	toks := make([]Token, 0, n+8)
	ends := make([]int32, 0, n+8)
	state := seed ^ splitmix64(key)
	rnd := func() uint64 {
		state += 0x9E3779B97F4A7C15
		return splitmix64(state)
	}
	// emit appends a chunk that starts at a token boundary.
	emit := func(chunk string) {
		off := int32(b.Len())
		b.WriteString(chunk)
		k := len(ends)
		toks, ends = AppendPieces(toks, ends, chunk)
		for ; k < len(ends); k++ {
			ends[k] += off
		}
	}
	first := true
	for len(toks) < n {
		nw := 4 + int(rnd()%12)
		for w := 0; w < nw && len(toks) < n; w++ {
			r := rnd()
			word := words[r%uint64(len(words))]
			if w == 0 {
				word = strings.ToUpper(word[:1]) + word[1:]
			}
			if !first {
				word = " " + word
			}
			first = false
			if (r>>32)%23 == 0 {
				emit(word)
				emit(" " + itoa(int((r>>40)%2000)))
				continue
			}
			emit(word)
			if w+1 < nw && (r>>20)%9 == 0 {
				emit(",")
			}
		}
		if (rnd() % 10) == 0 {
			emit("?")
		} else {
			emit(".")
		}
		if rnd()%4 == 0 {
			emit("\n")
			emit("\n")
			first = true
		}
	}
	text := b.String()
	toks, ends = toks[:n], ends[:n]
	return Output{Text: text[:ends[n-1]], Tokens: toks, Ends: ends}
}

func itoa(v int) string {
	if v == 0 {
		return "0"
	}
	var buf [20]byte
	i := len(buf)
	for v > 0 {
		i--
		buf[i] = byte('0' + v%10)
		v /= 10
	}
	return string(buf[i:])
}
