package experiment

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/llm-ring/llm-ring/internal/traffic"
)

// Issue #11: a trace is replayed open loop, each request at its timestamp,
// once, with max_tokens = output_length and the replica seeing the
// trace's input length (plus the chat template's framing).
func TestTraceReplay(t *testing.T) {
	reqs, err := traffic.LoadTrace(os.DirFS(filepath.Join("..", "traffic", "testdata")), "trace-small.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	spec := embeddedSpec(t, "consistent")
	spec.Profile = traffic.Profile{}
	spec.Trace, spec.TraceName, spec.TraceSpeedup = reqs, "trace-small.jsonl", 2
	results, err := Run(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	f, rows := readRun(t, results[0])
	if f.Profile != "trace:trace-small.jsonl" || f.ExpectedRequests != len(reqs) || f.Errors != 0 {
		t.Fatalf("run: profile %q, expected %d, errors %d", f.Profile, f.ExpectedRequests, f.Errors)
	}
	if h, _ := f.Config["headers"].(bool); h {
		t.Error("a trace is sent without a conversation header")
	}
	byID := map[string]traffic.TraceRequest{}
	for _, r := range reqs {
		byID["trace-l"+strconv.Itoa(r.Line)] = r
	}
	if len(rows) != len(reqs) {
		t.Fatalf("%d rows, want %d", len(rows), len(reqs))
	}
	for _, r := range rows {
		req, ok := byID[r.Conversation]
		if !ok || r.Turn != 1 {
			t.Fatalf("row %s turn %d: not a trace line", r.Conversation, r.Turn)
		}
		delete(byID, r.Conversation)
		// Sent at its timestamp / 2 (model ms), never before.
		if at := float64(req.TimestampMS) / 2; r.StartMS < at {
			t.Errorf("%s sent at %.0f ms, before its time %.0f ms", r.Conversation, r.StartMS, at)
		}
		if r.PredictedN > req.OutputLength {
			t.Errorf("%s: %d answer tokens, max_tokens was %d", r.Conversation, r.PredictedN, req.OutputLength)
		}
		// The replica counts the text's tokens plus the template's
		// framing (a default system prompt and the role markers).
		if n := r.PromptN + r.CacheN; n < req.InputLength || n > req.InputLength+40 {
			t.Errorf("%s: prompt of %d tokens, want input_length %d plus the framing", r.Conversation, n, req.InputLength)
		}
	}
}
