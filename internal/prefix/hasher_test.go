package prefix_test

import (
	"encoding/binary"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/cespare/xxhash/v2"

	"github.com/llm-ring/llm-ring/internal/model"
	"github.com/llm-ring/llm-ring/internal/prefix"
)

// blocksOf hashes s in one piece.
func blocksOf(blockChars int, s string) []uint64 {
	h := prefix.NewHasher(blockChars)
	h.WriteString(s)
	return slices.Clone(h.Blocks())
}

// chain is the definition, written out independently of the Hasher:
// h_i = xxhash64(le64(h_{i-1}) ‖ block_i), h_{-1} = Seed, full blocks only.
func chain(blockChars int, s string) []uint64 {
	var out []uint64
	prev := prefix.Seed
	for i := 0; i+blockChars <= len(s); i += blockChars {
		var d xxhash.Digest
		d.Reset()
		var le [8]byte
		binary.LittleEndian.PutUint64(le[:], prev)
		d.Write(le[:])
		d.WriteString(s[i : i+blockChars])
		prev = d.Sum64()
		out = append(out, prev)
	}
	return out
}

func TestHasherFollowsTheDefinition(t *testing.T) {
	for _, tc := range []struct {
		blockChars int
		text       string
		blocks     int
	}{
		{4, "abcdefghij", 2},               // "abcd", "efgh"; "ij" is a partial block, not hashed
		{4, "abc", 0},                      // shorter than a block: nothing
		{4, "", 0},                         // empty prompt
		{1, "héllo", 6},                    // bytes, not runes: é is two bytes
		{64, strings.Repeat("x", 640), 10}, // exact multiple
	} {
		got := blocksOf(tc.blockChars, tc.text)
		if len(got) != tc.blocks {
			t.Errorf("%q at %d: %d blocks, want %d", tc.text, tc.blockChars, len(got), tc.blocks)
		}
		if want := chain(tc.blockChars, tc.text); !slices.Equal(got, want) {
			t.Errorf("%q at %d: blocks %x, want %x", tc.text, tc.blockChars, got, want)
		}
	}
}

// randomText mixes ASCII and multi-byte characters.
func randomText(r *rand.Rand, n int) string {
	alphabet := []string{"a", "b", " ", "\n", "é", "日本", "🙂", "<|im_start|>"}
	var b strings.Builder
	for b.Len() < n {
		b.WriteString(alphabet[r.IntN(len(alphabet))])
	}
	return b.String()
}

func TestHasherAnySplitGivesTheSameBlocks(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 1))
	for _, blockChars := range []int{1, 3, 64, 256} {
		for range 20 {
			text := randomText(r, r.IntN(2000))
			want := blocksOf(blockChars, text)
			h := prefix.NewHasher(blockChars)
			// Random cut points, including inside multi-byte characters.
			for rest := text; len(rest) > 0; {
				k := min(len(rest), r.IntN(300))
				h.WriteString(rest[:k])
				rest = rest[k:]
			}
			if !slices.Equal(h.Blocks(), want) {
				t.Fatalf("block %d: a split of a %d-byte text gives other blocks", blockChars, len(text))
			}
			if h.Chars() != len(text) {
				t.Fatalf("Chars %d, want %d", h.Chars(), len(text))
			}
		}
	}
}

func TestHasherDifferentTextsDifferentChains(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 2))
	base := randomText(r, 4096)
	a := blocksOf(64, base)
	// Change one byte in block 10: blocks 0..9 stay, every block from 10 on
	// differs (the chain carries the change forward).
	b := []byte(base)
	b[10*64+5] ^= 1
	c := blocksOf(64, string(b))
	if !slices.Equal(a[:10], c[:10]) {
		t.Error("a change in block 10 changed an earlier block")
	}
	for i := 10; i < len(a); i++ {
		if a[i] == c[i] {
			t.Errorf("block %d is equal after a change in block 10", i)
		}
	}
	// Equal blocks at different positions hash differently.
	same := blocksOf(4, "abcdabcd")
	if same[0] == same[1] {
		t.Error(`"abcd" at block 0 and block 1 hash alike`)
	}
	// All distinct across many random texts (no collisions in practice).
	seen := map[uint64]bool{}
	for range 200 {
		for _, x := range blocksOf(16, randomText(r, 400)) {
			seen[x] = true
		}
	}
	if len(seen) < 200*20 {
		t.Errorf("only %d distinct hashes from 200 random texts", len(seen))
	}
}

func TestWriteMessageIsChatML(t *testing.T) {
	msgs := []model.Message{
		{Role: "system", Content: "You are a careful assistant. " + strings.Repeat("Rules. ", 40)},
		{Role: "user", Content: "What is a KV cache?"},
		{Role: "assistant", Content: "It stores attention keys and values. " + strings.Repeat("More. ", 30)},
		{Role: "user", Content: "And prefix caching?"},
	}
	h := prefix.NewHasher(7)
	for _, m := range msgs {
		h.WriteMessage(m.Role, m.Content)
	}
	// The messages plus the generation prompt are exactly what the simulated
	// replica renders (a conversation that starts with a system message).
	h.WriteString(model.ImStart + "assistant\n")
	rendered := model.RenderChat(msgs)
	if want := blocksOf(7, rendered); !slices.Equal(h.Blocks(), want) {
		t.Error("WriteMessage differs from model.RenderChat")
	}
	if h.Chars() != len(rendered) {
		t.Errorf("Chars %d, want %d", h.Chars(), len(rendered))
	}
}

func TestWriteMessageDelimitsRoleAndContent(t *testing.T) {
	one := func(role, content string) []uint64 {
		h := prefix.NewHasher(1)
		h.WriteMessage(role, content)
		return slices.Clone(h.Blocks())
	}
	a, b := one("ab", "c"), one("a", "bc")
	if a[len(a)-1] == b[len(b)-1] {
		t.Error(`("ab","c") and ("a","bc") render alike`)
	}
}

func TestConversationContinuesIncrementally(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 3))
	conv := prefix.NewHasher(64) // kept for the whole conversation
	var history []model.Message
	var prev []uint64
	for turn := range 6 {
		for _, m := range []model.Message{
			{Role: "user", Content: randomText(r, 50+r.IntN(500))},
			{Role: "assistant", Content: randomText(r, r.IntN(900))},
		} {
			conv.WriteMessage(m.Role, m.Content)
			history = append(history, m)
		}
		// Turn k+1 starts with turn k.
		if !slices.Equal(conv.Blocks()[:len(prev)], prev) {
			t.Fatalf("turn %d does not extend turn %d", turn, turn-1)
		}
		// Continuing equals hashing the whole history again.
		fresh := prefix.NewHasher(64)
		for _, m := range history {
			fresh.WriteMessage(m.Role, m.Content)
		}
		if !slices.Equal(conv.Blocks(), fresh.Blocks()) || conv.Chars() != fresh.Chars() {
			t.Fatalf("turn %d: incremental and from-scratch hashing differ", turn)
		}
		prev = slices.Clone(conv.Blocks())
	}
}

func TestCopyFromBranchesWithoutTouchingTheSource(t *testing.T) {
	conv := prefix.NewHasher(8)
	conv.WriteMessage("system", "be brief, be right")
	before := slices.Clone(conv.Blocks())
	var req prefix.Hasher
	req.CopyFrom(conv)
	req.WriteMessage("user", "a question that is long enough for blocks")
	if !slices.Equal(conv.Blocks(), before) {
		t.Error("writing to the copy changed the source")
	}
	want := prefix.NewHasher(8)
	want.WriteMessage("system", "be brief, be right")
	want.WriteMessage("user", "a question that is long enough for blocks")
	if !slices.Equal(req.Blocks(), want.Blocks()) || req.Chars() != want.Chars() {
		t.Error("the copy continued differently from a fresh Hasher")
	}
}

func TestResetKeepsNothingOfThePreviousPrompt(t *testing.T) {
	h := prefix.NewHasher(4)
	h.WriteString("abcdefg") // one block plus a pending "efg"
	h.Reset(4)
	h.WriteString("wxyz")
	if !slices.Equal(h.Blocks(), chain(4, "wxyz")) || h.Chars() != 4 {
		t.Error("Reset kept state of the previous prompt")
	}
}

func TestResetRejectsAnEmptyBlock(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("Reset(0) did not panic")
		}
	}()
	var h prefix.Hasher
	h.Reset(0)
}

func TestHasherAllocatesNothingOnceGrown(t *testing.T) {
	text := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 400)
	h := prefix.NewHasher(64)
	h.WriteString(text) // grow the output buffer
	allocs := testing.AllocsPerRun(100, func() {
		h.Reset(64)
		h.WriteMessage("system", text[:3000])
		h.WriteMessage("user", text[3000:])
	})
	if allocs != 0 {
		t.Errorf("%v allocations per prompt, want 0", allocs)
	}
}
