package traffic

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"

	"github.com/llm-ring/llm-ring/internal/model"
	"github.com/llm-ring/llm-ring/internal/wire"
)

// TraceBlockTokens is the size of a trace's hash block: in the Mooncake
// (FAST'25) traces each hash id stands for 512 tokens of prompt.
const TraceBlockTokens = 512

// TraceRequest is one line of a trace in the Mooncake format
// (kvcache-ai/Mooncake, FAST25-release/traces/*.jsonl):
//
//	{"timestamp": 3000, "input_length": 2012, "output_length": 354, "hash_ids": [0, 427, 428, 429]}
type TraceRequest struct {
	// Line is the 1-based line of the request in its file.
	Line int
	// TimestampMS is the arrival time, in ms since the trace's start.
	TimestampMS int64
	// InputLength and OutputLength are the prompt's and the answer's tokens.
	InputLength  int
	OutputLength int
	// HashIDs are the prompt's 512-token blocks: equal ids, equal content.
	HashIDs []int64
}

// traceLine is a line as written; pointers tell a missing key from a zero.
type traceLine struct {
	Timestamp    json.RawMessage `json:"timestamp"`
	InputLength  json.RawMessage `json:"input_length"`
	OutputLength json.RawMessage `json:"output_length"`
	HashIDs      *[]int64        `json:"hash_ids"`
}

// Limits of a trace line, against typing mistakes and memory exhaustion.
const (
	maxTraceInput  = 1 << 22 // tokens
	maxTraceOutput = 1 << 20
)

// ParseTrace reads a JSONL trace in the Mooncake format: one request per
// line, the four keys timestamp (ms, an integer ≥ 0, non-decreasing),
// input_length (≥ 1), output_length (≥ 1) and hash_ids (ids ≥ 0, one per
// 512-token block: ceil(input_length / 512) of them), and no other key.
// Every error names its line and key.
func ParseTrace(r io.Reader) ([]TraceRequest, error) {
	br := bufio.NewReaderSize(r, 1<<16)
	var out []TraceRequest
	var prev int64
	for line := 1; ; line++ {
		b, err := br.ReadBytes('\n')
		if len(b) == 0 && err == io.EOF {
			break
		}
		if err != nil && err != io.EOF {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		b = bytes.TrimRight(b, "\r\n")
		req, perr := parseTraceLine(b)
		if perr != nil {
			return nil, fmt.Errorf("line %d: %w", line, perr)
		}
		if req.TimestampMS < prev {
			return nil, fmt.Errorf("line %d: timestamp: %d is before the previous line's %d (a trace is in time order)", line, req.TimestampMS, prev)
		}
		prev = req.TimestampMS
		req.Line = line
		out = append(out, req)
		if err == io.EOF {
			break
		}
	}
	if len(out) == 0 {
		return nil, errors.New("empty trace: no request")
	}
	return out, nil
}

func parseTraceLine(b []byte) (TraceRequest, error) {
	if len(bytes.TrimSpace(b)) == 0 {
		return TraceRequest{}, errors.New("empty line (one JSON object per line)")
	}
	var l traceLine
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&l); err != nil {
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &te) && te.Field != "":
			return TraceRequest{}, fmt.Errorf("%s: must be a list of integers, not %s", te.Field, te.Value)
		case errors.As(err, &te):
			return TraceRequest{}, fmt.Errorf("must be a JSON object, not %s", te.Value)
		}
		msg := err.Error()
		if k, ok := bytes.CutPrefix([]byte(msg), []byte("json: unknown field ")); ok {
			return TraceRequest{}, fmt.Errorf("%s: unknown key (want timestamp, input_length, output_length, hash_ids)", bytes.Trim(k, `"`))
		}
		return TraceRequest{}, fmt.Errorf("invalid JSON: %v", err)
	}
	if dec.More() {
		return TraceRequest{}, errors.New("more than one JSON value on the line")
	}
	var req TraceRequest
	var errs []error
	integer := func(key string, raw json.RawMessage, lo, hi int64) int64 {
		if raw == nil {
			errs = append(errs, fmt.Errorf("%s: missing", key))
			return 0
		}
		var n json.Number
		if raw[0] == '"' || raw[0] == 'n' || json.Unmarshal(raw, &n) != nil {
			errs = append(errs, fmt.Errorf("%s: must be a number, not %s", key, raw))
			return 0
		}
		v, err := n.Int64()
		if err != nil {
			// Accept an integral float (1500.0), as JSON writers may emit.
			f, ferr := n.Float64()
			if ferr != nil || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
				errs = append(errs, fmt.Errorf("%s: must be an integer, got %s", key, n))
				return 0
			}
			v = int64(f)
		}
		if v < lo || v > hi {
			errs = append(errs, fmt.Errorf("%s: must be between %d and %d, got %d", key, lo, hi, v))
		}
		return v
	}
	req.TimestampMS = integer("timestamp", l.Timestamp, 0, math.MaxInt64/int64(1e6))
	req.InputLength = int(integer("input_length", l.InputLength, 1, maxTraceInput))
	req.OutputLength = int(integer("output_length", l.OutputLength, 1, maxTraceOutput))
	if l.HashIDs == nil {
		errs = append(errs, errors.New("hash_ids: missing"))
	} else {
		req.HashIDs = *l.HashIDs
		for i, id := range req.HashIDs {
			if id < 0 {
				errs = append(errs, fmt.Errorf("hash_ids[%d]: must not be negative, got %d", i, id))
				break
			}
		}
		if len(errs) == 0 {
			if want := (req.InputLength + TraceBlockTokens - 1) / TraceBlockTokens; len(req.HashIDs) != want {
				errs = append(errs, fmt.Errorf("hash_ids: %d blocks for input_length %d, want %d (one per %d tokens)",
					len(req.HashIDs), req.InputLength, want, TraceBlockTokens))
			}
		}
	}
	return req, errors.Join(errs...)
}

// LoadTrace reads and parses the trace file name from fsys (the caller
// chooses the files: os.DirFS for the host's); errors name the file.
func LoadTrace(fsys fs.FS, name string) ([]TraceRequest, error) {
	f, err := fsys.Open(name)
	if err != nil {
		return nil, fmt.Errorf("trace: %w", err)
	}
	defer f.Close()
	reqs, err := ParseTrace(f)
	if err != nil {
		return nil, fmt.Errorf("trace %s: %w", name, err)
	}
	return reqs, nil
}

// BlockText returns the text of hash block id: deterministic (a pure
// function of id) and exactly TraceBlockTokens tokens long for the
// replicas' tokenizer (model.Count), ending with a newline so that blocks
// concatenate without their tokens merging: the text of blocks a, b is
// BlockText(a) + BlockText(b), of 2 × 512 tokens.
func BlockText(id int64) string {
	r := featureStream(0, kindTraceBlock, uint64(id))
	w := writer{r: r, d: &domains[r.IntN(len(domains))]}
	// Sentences until the block holds enough tokens, then cut at a token
	// boundary and close with the newline (a token of its own).
	target := TraceBlockTokens - 1
	n := 0
	for n < target+8 {
		mark := len(w.b)
		if mark > 0 {
			w.b = append(w.b, ' ')
		}
		w.sentence(docSentences[w.r.IntN(len(docSentences))])
		n += model.Count(string(w.b[mark:]))
	}
	text := cutTokens(string(w.b), target)
	return text + "\n"
}

// cutTokens returns the first n tokens of s (all of s if it has fewer).
func cutTokens(s string, n int) string {
	if n <= 0 {
		return ""
	}
	_, ends := model.AppendPieces(nil, nil, s)
	if n >= len(ends) {
		return s
	}
	return s[:ends[n-1]]
}

// TraceText returns the prompt text of a trace request: its blocks' texts
// (BlockText) in order, the last cut so that the whole holds exactly
// InputLength tokens. Requests sharing a prefix of hash ids share that
// prefix of text.
func TraceText(req *TraceRequest) string { return TraceTextCached(req, nil) }

// TraceTextCached is TraceText with the blocks' texts kept in cache (nil:
// no cache), for a driver that synthesises many requests sharing blocks.
func TraceTextCached(req *TraceRequest, cache map[int64]string) string {
	var b []byte
	left := req.InputLength
	for _, id := range req.HashIDs {
		if left <= 0 {
			break
		}
		t, ok := cache[id]
		if !ok {
			t = BlockText(id)
			if cache != nil {
				cache[id] = t
			}
		}
		if left < TraceBlockTokens {
			t = cutTokens(t, left)
		}
		b = append(b, t...)
		left -= TraceBlockTokens
	}
	return string(b)
}

// TraceMessages are the chat messages of a trace request: its text as one
// user message (the chat template adds its own framing around it).
func TraceMessages(text string) []wire.ChatMessage {
	return []wire.ChatMessage{{Role: "user", Content: wire.TextContent(text)}}
}
