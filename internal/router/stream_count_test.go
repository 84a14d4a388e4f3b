package router

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/llm-ring/llm-ring/internal/engine"
)

// TestCountAgreesWithUsageOf holds the observer's reading of a stream
// event's counts (Count, engine.Filter's Counter for the OpenAI-style and
// llama.cpp streams) to package engine's UsageOf, which the filter used
// before: the same tokens for every event of every engine's recorded
// stream, and for shapes an engine might send.
func TestCountAgreesWithUsageOf(t *testing.T) {
	var datas [][]byte
	files, _ := filepath.Glob("../engine/testdata/*_stream*.txt")
	for _, file := range files {
		if filepath.Base(file) == "anthropic_stream.txt" {
			continue // read by engine.NewFilter, not Count
		}
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for line := range bytes.Lines(b) {
			if d, ok := bytes.CutPrefix(bytes.TrimSpace(line), []byte("data:")); ok {
				datas = append(datas, bytes.TrimSpace(d))
			}
		}
	}
	if len(datas) < 10 {
		t.Fatalf("%d events read from %v", len(datas), files)
	}
	for _, s := range []string{
		`{"choices":[],"usage":{}}`,
		`{"choices":[],"usage":null}`,
		`{"choices":[],"usage":{"input_tokens":5,"output_tokens":2,"cache_read_input_tokens":3}}`,
		`{"choices":[],"usage":{"prompt_tokens":0,"completion_tokens":2}}`,
		`{"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":2,"prompt_tokens_details":null}}`,
		`{"timings":{"cache_n":3,"prompt_n":4,"predicted_n":5},"usage":{"prompt_tokens":100}}`,
		`{"TIMINGS":{"cache_n":3,"prompt_n":4,"predicted_n":5}}`,
		`{"usage":{"prompt_tokens":9,`,
		`{"stop":true,"timings":{"cache_n":1,"prompt_n":2,"predicted_n":3}}`,
	} {
		datas = append(datas, []byte(s))
	}
	for _, d := range datas {
		var o observer
		o.Count(d)
		got := o.counts()
		got.promptMS, got.predictedMS = 0, 0 // UsageOf has no timings' milliseconds
		var want counts
		if u, err := engine.UsageOf(d); err == nil {
			want = usageCounts(u)
		}
		if got != want {
			t.Errorf("%s: Count %+v, UsageOf %+v", d, got, want)
		}
	}
}
