package traffic

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/llm-ring/llm-ring/internal/model"
)

func TestParseTraceFile(t *testing.T) {
	reqs, err := LoadTrace(os.DirFS("testdata"), "trace-small.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprint(reqs)
	want := "[{1 0 700 20 [0 1]} {2 0 1100 5 [0 1 2]} {3 1500 300 12 [3]} {4 2250 1024 1 [0 4]} {5 4000 513 7 [3 5]}]"
	if got != want {
		t.Errorf("parsed\n %s\nwant\n %s", got, want)
	}
}

// Every kind of bad line is refused with its line number and key.
func TestParseTraceErrors(t *testing.T) {
	good := `{"timestamp": 0, "input_length": 600, "output_length": 10, "hash_ids": [0, 1]}`
	tests := []struct {
		name   string
		line2  string // the second line; the first is good
		errHas string
	}{
		{"a good line", `{"timestamp": 5, "input_length": 512, "output_length": 1, "hash_ids": [0]}`, ""},
		{"not JSON", `{"timestamp": 5,`, "line 2: invalid JSON"},
		{"not an object", `[1, 2]`, "line 2: must be a JSON object"},
		{"empty line", ``, "line 2: empty line"},
		{"missing key", `{"timestamp": 5, "input_length": 512, "output_length": 1}`, "line 2: hash_ids: missing"},
		{"unknown key", `{"timestamp": 5, "input_length": 512, "output_length": 1, "hash_ids": [0], "session_id": "a"}`, "line 2: session_id: unknown key"},
		{"string timestamp", `{"timestamp": "5", "input_length": 512, "output_length": 1, "hash_ids": [0]}`, "line 2: timestamp: must be a number"},
		{"fractional length", `{"timestamp": 5, "input_length": 51.5, "output_length": 1, "hash_ids": [0]}`, "line 2: input_length: must be an integer"},
		{"negative timestamp", `{"timestamp": -1, "input_length": 512, "output_length": 1, "hash_ids": [0]}`, "line 2: timestamp: must be between 0"},
		{"no output", `{"timestamp": 5, "input_length": 512, "output_length": 0, "hash_ids": [0]}`, "line 2: output_length: must be between 1"},
		{"hash ids not a list", `{"timestamp": 5, "input_length": 512, "output_length": 1, "hash_ids": 7}`, "line 2: hash_ids: must be a list of integers"},
		{"negative hash id", `{"timestamp": 5, "input_length": 512, "output_length": 1, "hash_ids": [-3]}`, "line 2: hash_ids[0]: must not be negative"},
		{"too few blocks", `{"timestamp": 5, "input_length": 513, "output_length": 1, "hash_ids": [0]}`, "line 2: hash_ids: 1 blocks for input_length 513, want 2"},
		{"too many blocks", `{"timestamp": 5, "input_length": 100, "output_length": 1, "hash_ids": [0, 1]}`, "line 2: hash_ids: 2 blocks for input_length 100, want 1"},
		{"out of time order", `{"timestamp": 0, "input_length": 512, "output_length": 1, "hash_ids": [0]}` + "\n" +
			`{"timestamp": -0, "input_length": 512, "output_length": 1, "hash_ids": [0]}`, ""},
		{"time goes back", `{"timestamp": 10, "input_length": 512, "output_length": 1, "hash_ids": [0]}` + "\n" +
			`{"timestamp": 9, "input_length": 512, "output_length": 1, "hash_ids": [0]}`, "line 3: timestamp: 9 is before the previous line's 10"},
		{"two values on a line", `{"timestamp": 5, "input_length": 512, "output_length": 1, "hash_ids": [0]} {}`, "line 2: more than one JSON value"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseTrace(strings.NewReader(good + "\n" + tt.line2 + "\n"))
			switch {
			case tt.errHas == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tt.errHas != "" && (err == nil || !strings.Contains(err.Error(), tt.errHas)):
				t.Fatalf("error %v, want one containing %q", err, tt.errHas)
			}
		})
	}
	if _, err := ParseTrace(strings.NewReader("")); err == nil || !strings.Contains(err.Error(), "empty trace") {
		t.Errorf("empty trace: error %v", err)
	}
	if _, err := LoadTrace(os.DirFS(t.TempDir()), "none.jsonl"); err == nil || !strings.Contains(err.Error(), "trace:") {
		t.Errorf("missing file: error %v", err)
	}
}

func TestBlockText(t *testing.T) {
	for _, id := range []int64{0, 1, 2, 46, 1 << 40} {
		a := BlockText(id)
		if a != BlockText(id) {
			t.Fatalf("block %d: two different texts", id)
		}
		if n := model.Count(a); n != TraceBlockTokens {
			t.Errorf("block %d: %d tokens, want %d", id, n, TraceBlockTokens)
		}
		if !strings.HasSuffix(a, "\n") {
			t.Errorf("block %d does not end with a newline", id)
		}
		if id > 0 && a == BlockText(id-1) {
			t.Errorf("blocks %d and %d have the same text", id, id-1)
		}
	}
	// Blocks concatenate without merging tokens.
	if n := model.Count(BlockText(3) + BlockText(9) + BlockText(3)); n != 3*TraceBlockTokens {
		t.Errorf("three blocks: %d tokens, want %d", n, 3*TraceBlockTokens)
	}
}

func TestTraceText(t *testing.T) {
	reqs, err := LoadTrace(os.DirFS("testdata"), "trace-small.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	texts := make([]string, len(reqs))
	for i := range reqs {
		texts[i] = TraceText(&reqs[i])
		if n := model.Count(texts[i]); n != reqs[i].InputLength {
			t.Errorf("line %d: %d tokens, want input_length %d", reqs[i].Line, n, reqs[i].InputLength)
		}
	}
	// Equal ids, equal text: lines 1 and 2 share blocks 0 and 1, so the
	// 700 tokens of line 1 are a prefix of line 2; line 4 shares block 0.
	if !strings.HasPrefix(texts[1], texts[0]) {
		t.Error("line 2 does not start with line 1's text (shared blocks 0, 1)")
	}
	if !strings.HasPrefix(texts[3], BlockText(0)) || !strings.HasPrefix(texts[1], BlockText(0)+BlockText(1)) {
		t.Error("requests do not start with their blocks' texts")
	}
	if strings.HasPrefix(texts[3], BlockText(0)+BlockText(1)[:40]) {
		t.Error("line 4 (blocks 0, 4) continues with block 1's text")
	}
	// A 1-token block cut (line 5: 513 tokens = block 3 + 1 token of block 5).
	if !strings.HasPrefix(texts[4], BlockText(3)) || model.Count(strings.TrimPrefix(texts[4], BlockText(3))) != 1 {
		t.Error("line 5: want block 3 then one token of block 5")
	}
	msgs := TraceMessages(texts[2])
	if len(msgs) != 1 || msgs[0].Role != "user" {
		t.Errorf("TraceMessages: %+v, want one user message", msgs)
	}
}

// The parser reads a real-sized line: a request of 100,000 tokens.
func TestParseTraceLongLine(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"timestamp": 0, "input_length": 100000, "output_length": 10, "hash_ids": [`)
	for i := range 196 {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprint(&b, 1000000+i)
	}
	b.WriteString("]}")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "long.jsonl"), []byte(b.String()), 0o644); err != nil { // no final newline
		t.Fatal(err)
	}
	reqs, err := LoadTrace(os.DirFS(dir), "long.jsonl")
	if err != nil || len(reqs) != 1 || len(reqs[0].HashIDs) != 196 {
		t.Fatalf("got %d requests, err %v", len(reqs), err)
	}
}

func BenchmarkTraceText(b *testing.B) {
	req := TraceRequest{InputLength: 8000, OutputLength: 100}
	for i := range 16 {
		req.HashIDs = append(req.HashIDs, int64(i))
	}
	b.ReportAllocs()
	for b.Loop() {
		sink += len(TraceText(&req))
	}
}
