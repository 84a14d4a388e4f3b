package model

import (
	"slices"
	"strings"
	"testing"
)

const prose = `Consistent hashing with bounded loads is a well-known technique from distributed caching. In a chat, every message resends the whole conversation. LLM servers keep a prompt cache: after answering, the processed conversation stays in memory, so the next turn only needs its new tokens processed. But that cache lives on one replica. Send the next turn to a different replica and the whole history is processed again. This is the problem distributed caches (CDNs, Memcached clusters) solved long ago: send each key to the server that holds it. The router remembers where each conversation was last served and keeps it there after a redirect, instead of sending it back to its ring home and paying a second full reprocess. Long, cached conversations tolerate up to 2 × average load before being redirected, since moving them costs the most.`

func TestTokenizeAveragesAboutFourCharsPerToken(t *testing.T) {
	n := Count(prose)
	ratio := float64(len(prose)) / float64(n)
	// The router estimates 4 characters per token: the tokenizer must be
	// close to that on English, but not exactly there.
	if ratio < 3.6 || ratio > 4.6 || (ratio > 3.97 && ratio < 4.03) {
		t.Fatalf("%.2f characters per token on English prose, want about 4 but not 4.00", ratio)
	}
}

func TestTokenizeRules(t *testing.T) {
	tests := []struct {
		text   string
		pieces []string
	}{
		// Special tokens are single tokens; "\n" always stands alone.
		{"<|im_start|>user\nhi<|im_end|>\n", []string{"<|im_start|>", "user", "\n", "hi", "<|im_end|>", "\n"}},
		// One space joins the following word; extra spaces stay apart.
		{"a  b", []string{"a", " ", " b"}},
		// Digits are one token each; the space before a number stands alone.
		{"in 2024", []string{"in", " ", "2", "0", "2", "4"}},
		// Runs of the same punctuation merge up to 4.
		{"wait.....", []string{"wait", "....", "."}},
		// A '<' just before a special token does not swallow it.
		{"a<<|im_end|>", []string{"a", "<", "<|im_end|>"}},
		// Long words split into pieces of at most 9 letters.
		{"internationalization", []string{"inter", "national", "izatio", "n"}},
		// Non-ASCII letters belong to words; other runes stand alone.
		{"café ×2", []string{"café", " ", "×", "2"}},
	}
	for _, tt := range tests {
		toks, ends := AppendPieces(nil, nil, tt.text)
		var got []string
		prev := int32(0)
		for _, e := range ends {
			got = append(got, tt.text[prev:e])
			prev = e
		}
		if !slices.Equal(got, tt.pieces) {
			t.Errorf("%q: pieces %q, want %q", tt.text, got, tt.pieces)
		}
		if len(toks) != len(got) || Count(tt.text) != len(got) {
			t.Errorf("%q: %d tokens, Count %d, %d pieces", tt.text, len(toks), Count(tt.text), len(got))
		}
	}
	if got := Tokenize("<|im_start|><|im_end|><|endoftext|>"); !slices.Equal(got, []Token{TokImStart, TokImEnd, TokEndOfText}) {
		t.Errorf("special ids %v", got)
	}
}

func TestTokenizeIsStableWhenCutAtATokenBoundary(t *testing.T) {
	// Cutting a text after any token and tokenizing the first part alone
	// gives the same tokens: an answer cut by n_predict re-tokenizes to the
	// tokens that were generated.
	texts := []string{prose, "internationalization  of   café, 12345 ...!!!! ok", GenerateAnswer(3, 9, 300).Text}
	for _, text := range texts {
		toks, ends := AppendPieces(nil, nil, text)
		for k, e := range ends {
			if got := Tokenize(text[:e]); !slices.Equal(got, toks[:k+1]) {
				t.Fatalf("cut after token %d (%q): %v, want %v", k, text[:e], got, toks[:k+1])
			}
		}
	}
}

func TestFastPathAgreesWithTheScanner(t *testing.T) {
	texts := []string{prose, "  two spaces", " café au lait", "naïve résumé x", "a\tb  c\n d", GenerateAnswer(5, 5, 400).Text, "end with space ", " "}
	for _, text := range texts {
		var want []Token
		for i := 0; i < len(text); {
			end, sp := next(text, i)
			if sp != 0 {
				want = append(want, sp)
			} else {
				want = append(want, pieceID(text[i:end]))
			}
			i = end
		}
		if got := Tokenize(text); !slices.Equal(got, want) {
			t.Errorf("%q: fast path %v, scanner %v", text, got, want)
		}
	}
}

func TestTokenIDsAreInRange(t *testing.T) {
	for _, tok := range Tokenize(prose + strings.Repeat("xyzzy ", 50)) {
		if tok < 0 || tok >= VocabSize {
			t.Fatalf("token %d out of range", tok)
		}
	}
}

func TestChatTokensMatchRenderedText(t *testing.T) {
	convs := [][]Message{
		{{"user", "Hello there"}},
		{{"system", "Be brief."}, {"user", "What is a ring?"}, {"assistant", "A ring is a circle of hashes"}, {"user", "Why  "}},
		{{"user", ""}},
		{{"user", "ends with <"}, {"assistant", "ok..."}},
	}
	for _, msgs := range convs {
		if got, want := ChatTokens(msgs), Tokenize(RenderChat(msgs)); !slices.Equal(got, want) {
			t.Errorf("%v: ChatTokens %v, Tokenize(RenderChat) %v", msgs, got, want)
		}
	}
	want := "<|im_start|>system\n" + DefaultSystemPrompt + "<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
	if got := RenderChat([]Message{{"user", "Hi"}}); got != want {
		t.Errorf("RenderChat = %q, want %q", got, want)
	}
}

func TestNextTurnExtendsPromptAndAnswer(t *testing.T) {
	// Turn 2's prompt starts with turn 1's prompt followed by the answer's
	// tokens, for answers cut anywhere (n_predict) or ended naturally.
	for _, n := range []int{1, 2, 7, 40, 133} {
		turn1 := []Message{{"user", "Tell me about consistent hashing."}}
		p1 := ChatTokens(turn1)
		ans := GenerateAnswer(1, PromptKey(p1), n)
		turn2 := append(slices.Clone(turn1), Message{"assistant", ans.Text}, Message{"user", "And bounded loads?"})
		p2 := ChatTokens(turn2)
		prefix := append(slices.Clone(p1), ans.Tokens...)
		if got := commonPrefix(prefix, p2); got != len(prefix) {
			t.Errorf("answer of %d tokens: turn 2 shares %d tokens with prompt1+answer (%d)", n, got, len(prefix))
		}
	}
}

func TestAppendAssistantTokens(t *testing.T) {
	for _, n := range []int{1, 5, 64, 300} {
		out := GenerateAnswer(2, uint64(n), n)
		got := AppendAssistantTokens(nil, &out)
		want := AppendMessageTokens(nil, Message{Role: "assistant", Content: out.Text})
		if !slices.Equal(got, want) {
			t.Errorf("answer of %d tokens: %v, want %v", n, got, want)
		}
	}
}

func TestGenerateAnswer(t *testing.T) {
	a := GenerateAnswer(7, 99, 250)
	if len(a.Tokens) != 250 {
		t.Fatalf("%d tokens, want 250", len(a.Tokens))
	}
	if got := Tokenize(a.Text); !slices.Equal(got, a.Tokens) {
		t.Fatalf("Tokenize(answer) differs from its tokens")
	}
	var b strings.Builder
	for k := range a.Tokens {
		b.WriteString(a.Piece(k))
	}
	if b.String() != a.Text {
		t.Fatalf("pieces do not rebuild the text")
	}
	if again := GenerateAnswer(7, 99, 250); again.Text != a.Text {
		t.Fatalf("not deterministic")
	}
	if other := GenerateAnswer(8, 99, 250); other.Text == a.Text {
		t.Fatalf("seed does not change the answer")
	}
	if short := GenerateAnswer(7, 99, 10); !strings.HasPrefix(a.Text, short.Text) {
		t.Fatalf("a shorter answer is not a prefix of the longer one")
	}
}

func BenchmarkTokenize4000Chars(b *testing.B) {
	text := strings.Repeat(prose, 5)[:4000]
	buf := make([]Token, 0, 2000)
	b.ReportAllocs()
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		buf = AppendTokens(buf[:0], text)
	}
}

func TestEmbedIsDeterministicAndSimilarForSharedTokens(t *testing.T) {
	a := Embed(Tokenize("consistent hashing with bounded loads"))
	b := Embed(Tokenize("consistent hashing with bounded loads"))
	near := Embed(Tokenize("consistent hashing with bounded load balancing"))
	far := Embed(Tokenize("a recipe for sourdough bread"))
	if Cosine(a, b) < 0.9999 {
		t.Errorf("same text: cosine %v, want 1", Cosine(a, b))
	}
	if Cosine(a, near) <= Cosine(a, far) {
		t.Errorf("cosine(a, near) = %v ≤ cosine(a, far) = %v", Cosine(a, near), Cosine(a, far))
	}
	if len(a) != EmbeddingDim {
		t.Errorf("dim %d", len(a))
	}
}
