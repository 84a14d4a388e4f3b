package record

import (
	"bytes"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	rows := []Request{
		{RunID: "s1-bounded-live", Policy: "bounded", Seed: 1, Conversation: "s1-c0001", Turn: 1, Replica: "llm-0",
			Reason: "home", EstPrompt: 100, CacheN: 0, PromptN: 98, PredictedN: 64, TTFTMS: 1234.5, LatencyMS: 2345.25,
			Status: 200, StartMS: 10, EndMS: 2355.25},
		{RunID: "s1-bounded-live", Policy: "bounded", Seed: 1, Conversation: "s1-c0001", Turn: 2, Status: 502,
			Error: "replica llm-0 failed: EOF, \"quoted\"", StartMS: 3000, EndMS: 3001},
	}
	var buf bytes.Buffer
	w, err := NewWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	for i := range rows {
		if err := w.Write(&rows[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	got, err := ReadRequests(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, rows) {
		t.Errorf("round trip:\n%+v\nwant\n%+v", got, rows)
	}
}

func TestReadErrorsNameLineAndColumn(t *testing.T) {
	head := strings.Join(Header, ",") + "\n"
	for _, tt := range []struct{ csv, want string }{
		{"a,b\n", "header has 2 columns"},
		{strings.Replace(head, "turn", "round", 1), `"round", want "turn"`},
		{head + "r,p,1,c,two,llm-0,home,1,0,1,1,1,1,200,,0,1\n", "line 2, column turn"},
		{head + "r,p,1,c,1,llm-0,home,1,0,1,1,1,x,200,,0,1\n", "line 2, column latency_ms"},
	} {
		if _, err := ReadRequests(strings.NewReader(tt.csv)); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("err = %v, want %q", err, tt.want)
		}
	}
}

func TestRunFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s1-llm-aware-sim.json")
	in := &Run{RunID: "s1-llm-aware-sim", Policy: "llm-aware", Seed: 1, Mode: "sim", Replicas: 3, ScaleAtMS: 5000,
		ScaleReadyMS: 25000, Requests: 2, Metrics: map[string]float64{`llm_ring_failovers_total`: 0}}
	if err := WriteRunFile(path, in); err != nil {
		t.Fatal(err)
	}
	out, err := ReadRunFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in, out) {
		t.Errorf("run file round trip: %+v", out)
	}
}
