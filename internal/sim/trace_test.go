package sim

import (
	"slices"
	"testing"
	"testing/fstest"

	"github.com/llm-ring/llm-ring/internal/model"
	"github.com/llm-ring/llm-ring/internal/traffic"
	"github.com/llm-ring/llm-ring/profiles"
)

// TestTraceTokensMatchText checks the shortcut of traceSource: for every
// request of every embedded workload, its text is traffic.TraceText and
// its tokens, its blocks' tokens in order, are exactly the tokens of that
// text (so the simulated client's prompt is the one tokenizing would give).
func TestTraceTokensMatchText(t *testing.T) {
	cuts, n := 0, 0
	for _, name := range profiles.WorkloadNames() {
		w, err := traffic.LoadWorkload(fstest.MapFS{}, name)
		if err != nil {
			t.Fatal(err)
		}
		st := traffic.Stages{Rates: []float64{4, 16}, StageS: 10, WarmupS: 2, Poisson: true}
		reqs := w.Requests(traffic.OpenArrivals(st, 3), 3)
		_, src, err := WorkloadRun(w.Name, reqs)
		if err != nil {
			t.Fatal(err)
		}
		s := src().(*traceSource)
		n += len(reqs)
		for i := range reqs {
			text := s.Conversation(i).Turns[0].User
			if want := traffic.TraceText(&reqs[i].TraceRequest); text != want {
				t.Fatalf("%s request %d: text differs from traffic.TraceText", name, i)
			}
			got := s.AppendUserTokens(nil, i, 0)
			if want := model.Tokenize(text); !slices.Equal(got, want) {
				t.Fatalf("%s request %d: %d tokens from the blocks, %d from the text", name, i, len(got), len(want))
			}
			if reqs[i].InputLength%traffic.TraceBlockTokens != 0 {
				cuts++
			}
		}
	}
	if n == 0 || cuts == 0 {
		t.Fatalf("%d requests, %d with a cut last block: the test checks too little", n, cuts)
	}
}
