package router

import (
	"strings"
	"testing"

	"github.com/llm-ring/llm-ring/internal/policy"
)

// TestTraceText: the pooled rendering of a trace (issue 21) is the text
// clip(d.Format(), 4096) gave, short or cut (here in the middle of a
// character, as clip cuts), also when the pooled buffer held a longer
// trace before.
func TestTraceText(t *testing.T) {
	long := func(_ *policy.Decision, b []byte) []byte { return append(b, strings.Repeat("\n  é", 1500)...) }
	names := []string{"llm-0", "llm-1", "llm-2"}
	ds := []policy.Decision{
		{Replica: 2, Reason: "home", Trace: policy.Trace{Policy: "long", Names: names, Explain: long}},
		{Replica: 1, Reason: "home", Trace: policy.Trace{Policy: "consistent", Names: names}},
		{Replica: 7, Reason: "home", Trace: policy.Trace{Policy: "long", Head: "long (mode)", Names: names, Explain: long}},
		{Replica: 0, Reason: "home", Trace: policy.Trace{Policy: "consistent", Names: names}},
	}
	for i, d := range ds {
		want := clip(d.Format(), 4096)
		if got := traceText(&d); got != want {
			t.Fatalf("%d: traceText:\n got %q\nwant %q", i, got, want)
		}
		if got := clipText([]byte(d.Format()), 4096); got != want {
			t.Fatalf("%d: clipText:\n got %q\nwant %q", i, got, want)
		}
	}
	if n := len(traceText(&ds[0])); n != 4096+len("…") {
		t.Fatalf("the long trace is %d bytes, want it cut to 4096 and the mark", n)
	}
}
