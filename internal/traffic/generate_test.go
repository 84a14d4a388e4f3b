package traffic

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unsafe"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

func mustLoad(t testing.TB, name string) Profile {
	t.Helper()
	p, err := LoadProfile(os.DirFS("."), name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func mustGenerate(t testing.TB, p Profile, seed int64) []Conversation {
	t.Helper()
	cs, err := Generate(p, seed)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// render writes conversations in a stable, readable text form: the system
// prompts once, then every conversation with its turns. Floats are written
// exactly, so any change in the random draws shows.
func render(p Profile, seed int64, cs []Conversation) []byte {
	g, err := NewGenerator(p, seed)
	if err != nil {
		panic(err)
	}
	systems := g.SystemPrompts()
	index := map[string]int{}
	for i, s := range systems {
		index[s] = i
	}
	var b bytes.Buffer
	turns := 0
	for _, c := range cs {
		turns += len(c.Turns)
	}
	fmt.Fprintf(&b, "# profile %s, seed %d: %d conversations, %d turns\n", p.Name, seed, len(cs), turns)
	for i, s := range systems {
		fmt.Fprintf(&b, "system %d: %s\n", i, s)
	}
	for _, c := range cs {
		fmt.Fprintf(&b, "\n== %s index=%d user=%d system=%d doc=%v turns=%d\n",
			c.ID, c.Index, c.User, index[c.System], c.Doc, len(c.Turns))
		if c.Hot || c.SharedDoc > 0 {
			fmt.Fprintf(&b, "hot=%v shared_doc=%d\n", c.Hot, c.SharedDoc)
		}
		for i, t := range c.Turns {
			fmt.Fprintf(&b, "-- turn %d think_s=%s max_tokens=%d\n%s\n",
				i+1, strconv.FormatFloat(t.ThinkS, 'g', -1, 64), t.MaxTokens, t.User)
		}
	}
	return b.Bytes()
}

// TestGenerateGolden pins the generated text. quick and standard were
// written before the scenario keys existed (issue #11) and must not change:
// a profile without those keys draws exactly what it drew before. agents
// pins a profile that uses them (its first 30 conversations, one per user:
// each conversation has its own stream, so they are those of a full run).
func TestGenerateGolden(t *testing.T) {
	for _, tt := range []struct {
		profile       string
		conversations int // 0: the profile's own
	}{
		{"quick", 0},
		{"standard", 0},
		{"agents", 30},
	} {
		t.Run(tt.profile, func(t *testing.T) {
			p := mustLoad(t, tt.profile)
			if tt.conversations > 0 {
				p.Conversations = tt.conversations
			}
			checkGolden(t, filepath.Join("testdata", tt.profile+"-seed1.golden"), render(p, 1, mustGenerate(t, p, 1)))
		})
	}
}

func checkGolden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -run TestGenerateGolden -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		gl, wl := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
		for i := range min(len(gl), len(wl)) {
			if gl[i] != wl[i] {
				t.Fatalf("generated text differs from %s at line %d:\n got: %s\nwant: %s\n(if intended, refresh with -update)",
					path, i+1, gl[i], wl[i])
			}
		}
		t.Fatalf("generated text differs from %s: %d lines, want %d (if intended, refresh with -update)",
			path, len(gl), len(wl))
	}
}

func TestGenerateDeterminism(t *testing.T) {
	p := mustLoad(t, "quick")
	a := render(p, 1, mustGenerate(t, p, 1))
	if b := render(p, 1, mustGenerate(t, p, 1)); !bytes.Equal(a, b) {
		t.Error("the same seed gave different conversations")
	}
	if b := render(p, 2, mustGenerate(t, p, 2)); bytes.Equal(a, b) {
		t.Error("seeds 1 and 2 gave the same conversations")
	}

	// Each conversation has its own random stream: conversation i is the
	// same in a smaller run, and from the lazy Generator.Conversation.
	full := mustGenerate(t, p, 7)
	small := p
	small.Conversations = p.Concurrency
	part := mustGenerate(t, small, 7)
	g, err := NewGenerator(p, 7)
	if err != nil {
		t.Fatal(err)
	}
	for i := range part {
		if fmt.Sprint(part[i]) != fmt.Sprint(full[i]) {
			t.Fatalf("conversation %d differs between runs of %d and %d conversations", i, len(part), len(full))
		}
	}
	for _, i := range []int{len(full) - 1, 0, 5} {
		if c := g.Conversation(i); fmt.Sprint(c) != fmt.Sprint(full[i]) {
			t.Fatalf("Generator.Conversation(%d) differs from Generate's", i)
		}
	}
}

// TestGenerateShape checks the generated population against the standard
// profile over many seeds.
func TestGenerateShape(t *testing.T) {
	p := mustLoad(t, "standard")
	docs, total := 0, 0
	for seed := int64(1); seed <= 40; seed++ {
		cs := mustGenerate(t, p, seed)
		if len(cs) != p.Conversations {
			t.Fatalf("seed %d: %d conversations, want %d", seed, len(cs), p.Conversations)
		}
		// Conversations with the same system prompt share one string (memory
		// for 100,000 conversations), not copies of it.
		texts, ptrs := map[string]bool{}, map[*byte]bool{}
		for i := range cs {
			texts[cs[i].System] = true
			ptrs[unsafe.StringData(cs[i].System)] = true
		}
		if len(texts) > p.SystemPrompts || len(ptrs) != len(texts) {
			t.Fatalf("seed %d: %d distinct system prompts in %d strings, want at most %d, shared",
				seed, len(texts), len(ptrs), p.SystemPrompts)
		}
		for i := range cs {
			c := &cs[i]
			total++
			if want := fmt.Sprintf("s%d-c%04d", seed, i); c.ID != want || c.Index != i {
				t.Fatalf("conversation %d: ID %q index %d, want %q", i, c.ID, c.Index, want)
			}
			if c.User != i%p.Concurrency {
				t.Fatalf("%s: user %d, want %d (closed loop: index mod concurrency)", c.ID, c.User, i%p.Concurrency)
			}
			if n := len(c.Turns); n < p.TurnsMin || n > p.TurnsMax {
				t.Fatalf("%s: %d turns, want %d..%d", c.ID, n, p.TurnsMin, p.TurnsMax)
			}
			if c.Doc {
				docs++
			}
			if !Fits(p, c, 0, 0) {
				t.Fatalf("%s: first turn does not fit max_context_tokens (%d chars)", c.ID, len(c.Turns[0].User))
			}
			for ti, turn := range c.Turns {
				if turn.MaxTokens != p.MaxTokens {
					t.Fatalf("%s turn %d: max_tokens %d", c.ID, ti, turn.MaxTokens)
				}
				switch {
				case ti == 0 && i < p.Concurrency:
					if want := p.RampS * float64(c.User) / float64(p.Concurrency); turn.ThinkS != want {
						t.Fatalf("%s: start offset %g, want %g (even ramp)", c.ID, turn.ThinkS, want)
					}
				case turn.ThinkS < p.ThinkSMin || turn.ThinkS > p.ThinkSMax:
					t.Fatalf("%s turn %d: think %g outside [%g, %g]", c.ID, ti, turn.ThinkS, p.ThinkSMin, p.ThinkSMax)
				}
				words := len(strings.Fields(turn.User))
				if ti == 0 && c.Doc {
					if words < p.DocWords || words > p.DocWords+80 {
						t.Fatalf("%s: first turn with a document has %d words, want about %d", c.ID, words, p.DocWords)
					}
					continue
				}
				// The question alone may exceed the range; context
				// sentences are added up to the drawn length, never past the max.
				if words > p.UserWordsMax || words < 4 {
					t.Fatalf("%s turn %d: %d words, want at most %d: %q", c.ID, ti, words, p.UserWordsMax, turn.User)
				}
			}
		}
	}
	// 4000 Bernoulli(0.3) draws: standard deviation 0.0072; 0.27..0.33 is > 4 sd.
	if share := float64(docs) / float64(total); share < 0.27 || share > 0.33 {
		t.Errorf("document share %.3f over %d conversations, want about %g", share, total, p.DocShare)
	}
}

func TestSystemPrompts(t *testing.T) {
	for _, n := range []int{1, 4, 50} {
		p := mustLoad(t, "quick")
		p.SystemPrompts = n
		g, err := NewGenerator(p, 3)
		if err != nil {
			t.Fatal(err)
		}
		ss := g.SystemPrompts()
		if len(ss) != n {
			t.Fatalf("%d system prompts, want %d", len(ss), n)
		}
		seen := map[string]bool{}
		for _, s := range ss {
			if seen[s] {
				t.Errorf("system prompt repeated: %q", s)
			}
			seen[s] = true
			if w := len(strings.Fields(s)); w < 30 || w > 120 || len(s) > maxSystemChars {
				t.Errorf("system prompt of %d words, %d chars, want 30..120 words and ≤ %d chars: %q",
					w, len(s), maxSystemChars, s)
			}
		}
	}
}

// TestDocumentCutToFit: with a tight context budget, pasted documents are
// shortened so that the first turn still fits.
func TestDocumentCutToFit(t *testing.T) {
	p := mustLoad(t, "quick")
	p.DocShare, p.DocWords, p.MaxContextTokens = 1, 3000, 1200
	cs := mustGenerate(t, p, 1)
	for i := range cs {
		c := &cs[i]
		if !c.Doc {
			t.Fatalf("%s: no document with doc_share 1", c.ID)
		}
		if !Fits(p, c, 0, 0) {
			t.Fatalf("%s: first turn of %d chars does not fit %d tokens", c.ID, len(c.Turns[0].User), p.MaxContextTokens)
		}
		if w := len(strings.Fields(c.Turns[0].User)); w < 300 {
			t.Fatalf("%s: document cut to %d words, more than needed", c.ID, w)
		}
	}
}

func BenchmarkGenerate(b *testing.B) {
	p := mustLoad(b, "standard")
	for _, n := range []int{1000, 100_000} {
		p.Conversations = n
		b.Run(fmt.Sprintf("conversations=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			var turns int
			for b.Loop() {
				cs, err := Generate(p, 1)
				if err != nil {
					b.Fatal(err)
				}
				turns = 0
				for i := range cs {
					turns += len(cs[i].Turns)
				}
			}
			b.ReportMetric(float64(turns), "requests/op")
		})
	}
}

// BenchmarkConversation is the lazy path of a simulator that generates each
// conversation when its user starts it and drops it when done.
func BenchmarkConversation(b *testing.B) {
	p := mustLoad(b, "standard")
	p.Conversations = 100_000
	g, err := NewGenerator(p, 1)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		c := g.Conversation(i % p.Conversations)
		sink += len(c.Turns)
		i++
	}
}

var sink int
