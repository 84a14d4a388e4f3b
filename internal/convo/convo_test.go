package convo

import (
	"slices"
	"strings"
	"testing"

	"github.com/llm-ring/llm-ring/internal/prefix"
	"github.com/llm-ring/llm-ring/internal/wire"
)

type msg struct{ role, text string }

func routing(prefixChars, blockChars int, msgs ...msg) Routing {
	var hs prefix.Hasher
	hs.Reset(blockChars)
	var a Accumulator
	a.Reset(prefixChars, &hs)
	for _, m := range msgs {
		a.Add(m.role, m.text)
	}
	r := a.Routing()
	r.Blocks = slices.Clone(r.Blocks)
	return r
}

func TestRouting(t *testing.T) {
	long := strings.Repeat("How do prefix caches work? ", 20)
	r := routing(16, 64, msg{"system", "Be brief."}, msg{"developer", "No lists."}, msg{"user", long},
		msg{"assistant", "They keep KV."}, msg{"system", "late system"}, msg{"user", "And eviction?"}, msg{"tool", "{}"})
	wantStart := "Be brief.\x00No lists.\x00" + long[:16]
	if r.Key != wire.PrefixKey(wantStart) {
		t.Errorf("key %s, want the key of %q", r.Key, wantStart)
	}
	chars := 0
	for _, m := range []msg{{"system", "Be brief."}, {"developer", "No lists."}, {"user", long}, {"assistant", "They keep KV."},
		{"system", "late system"}, {"user", "And eviction?"}, {"tool", "{}"}} {
		chars += wire.ChatChars(m.role, m.text)
	}
	if r.Chars != chars || r.Turn != 2 || r.FirstUser != long || len(r.Blocks) == 0 {
		t.Errorf("routing %+v: want %d chars, turn 2, the first user message, blocks", r, chars)
	}
}

// TestGrowing: a conversation fed turn by turn reads at every step as the
// same conversation fed at once (a driver keeping one Accumulator per
// conversation, as the simulator would, gets what the router computes from
// a request), and later turns keep the start's key.
func TestGrowing(t *testing.T) {
	msgs := []msg{{"system", "S"}, {"user", "first question"}, {"assistant", "answer"}, {"user", "second"}, {"assistant", "more"}, {"user", "third"}}
	var hs prefix.Hasher
	hs.Reset(8)
	var a Accumulator
	a.Reset(4, &hs)
	for i, m := range msgs {
		a.Add(m.role, m.text)
		got, want := a.Routing(), routing(4, 8, msgs[:i+1]...)
		if got.Chars != want.Chars || got.Key != want.Key || got.Turn != want.Turn || got.FirstUser != want.FirstUser || !slices.Equal(got.Blocks, want.Blocks) {
			t.Fatalf("after %d messages: %+v, want %+v", i+1, got, want)
		}
		if i >= 1 && got.Key != routing(4, 8, msgs[:2]...).Key {
			t.Errorf("after %d messages the key changed", i+1)
		}
	}
	// Anthropic's shape: a system prompt and messages give the chat's key.
	if routing(4, 8, msg{"system", "S"}, msg{"user", "first question"}).Key != routing(4, 8, msgs[:2]...).Key {
		t.Error("same start, different keys")
	}
	// No Hasher: no blocks; Reset forgets everything.
	a.Reset(4, nil)
	a.Add("user", "hi")
	if r := a.Routing(); r.Blocks != nil || r.Turn != 1 || r.Key != wire.PrefixKey("hi") {
		t.Errorf("after Reset: %+v", r)
	}
}

// TestKeyMatchesWire: the accumulator's running hash of the start gives
// wire.PrefixKey of the start wire.ConversationStart builds, multi-byte
// characters, late system prompts and an empty conversation included.
func TestKeyMatchesWire(t *testing.T) {
	convs := [][]msg{
		nil,
		{{"user", "héllo wörld ünïcode 😀 prompt"}},
		{{"system", "s"}, {"developer", ""}, {"user", "ab"}, {"system", "late"}, {"user", "second"}},
		{{"assistant", "first"}, {"tool", "x"}, {"system", "sys"}},
	}
	for _, msgs := range convs {
		for _, pc := range []int{0, 1, 5, 64} {
			var a Accumulator
			a.Reset(pc, nil)
			var start strings.Builder
			users := 0
			for _, m := range msgs {
				a.Add(m.role, m.text)
				if users == 0 && (m.role == "system" || m.role == "developer" || m.role == "user") {
					wire.ConversationStart(&start, m.role, m.text, pc)
				}
				if m.role == "user" {
					users++
				}
			}
			if got, want := a.Routing().Key, wire.PrefixKey(start.String()); got != want {
				t.Errorf("%v, prefix %d: key %s, want %s", msgs, pc, got, want)
			}
		}
	}
}

// TestKeyOnce: once the first user message closed the start, reading the
// Routing at every turn (as the simulator does) allocates nothing more,
// and the key read is still the start's.
func TestKeyOnce(t *testing.T) {
	var a Accumulator
	a.Reset(4, nil)
	a.Add("system", "S")
	a.Add("user", "first question")
	want := a.Routing().Key
	n := testing.AllocsPerRun(100, func() {
		a.Add("assistant", "answer")
		a.Add("user", "next")
		if a.Routing().Key != want {
			t.Fatal("the key changed after the start closed")
		}
	})
	if n != 0 {
		t.Errorf("Routing after the start: %v allocations per turn, want 0", n)
	}
}

// TestName: a named conversation's key is its name from the first message
// on, with no allocation for the start's key; an empty name names nothing.
func TestName(t *testing.T) {
	var a Accumulator
	a.Reset(4, nil)
	a.Name("conv-7")
	n := testing.AllocsPerRun(100, func() {
		a.Add("user", "hello")
		if r := a.Routing(); r.Key != "conv-7" {
			t.Fatalf("key %q, want the name", r.Key)
		}
	})
	if n != 0 {
		t.Errorf("a named conversation's Routing: %v allocations, want 0", n)
	}
	a.Reset(4, nil)
	a.Name("")
	a.Add("user", "hello")
	if r := a.Routing(); r.Key != wire.PrefixKey("hell") {
		t.Errorf("empty name: key %q, want the start's", r.Key)
	}
}
