// Package record defines what an experiment leaves behind: one CSV row per
// request (Request) and one JSON document per run (Run). The live runner
// (llm-ring run) and the simulator (llm-ring sim) write them; the analysis
// (llm-ring analyze) reads them, and nothing else. Times are milliseconds
// since the start of the run (wall time for live runs, virtual time for
// simulated ones).
package record

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
)

// Request is one request of a run: one CSV row.
type Request struct {
	RunID        string  // run identifier, unique within a results folder
	Policy       string  // routing policy of the run
	Seed         int64   // traffic seed
	Conversation string  // conversation id
	Turn         int     // 1-based turn number within the conversation
	Replica      string  // replica that served it ("" if none)
	Reason       string  // route reason code (rotate, hash, home, overflow, ...)
	EstPrompt    int     // router's estimate of the prompt tokens
	CacheN       int     // prompt tokens reused from the replica's cache (timings.cache_n)
	PromptN      int     // prompt tokens processed (timings.prompt_n)
	PredictedN   int     // tokens generated (timings.predicted_n)
	TTFTMS       float64 // time to first token (first streamed byte of content), ms
	LatencyMS    float64 // time from send to the end of the answer, ms
	Status       int     // HTTP status (0 if no answer)
	Error        string  // error text ("" when none)
	StartMS      float64 // send time, ms since run start
	EndMS        float64 // end time, ms since run start
}

// Header is the CSV header, in column order.
var Header = []string{
	"run_id", "policy", "seed", "conversation", "turn", "replica", "reason",
	"est_prompt_tokens", "cache_n", "prompt_n", "predicted_n",
	"ttft_ms", "latency_ms", "status", "error", "start_ms", "end_ms",
}

func ms(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) }

// Fields returns the row's CSV fields, in Header order.
func (r *Request) Fields() []string {
	return []string{
		r.RunID, r.Policy, strconv.FormatInt(r.Seed, 10), r.Conversation,
		strconv.Itoa(r.Turn), r.Replica, r.Reason,
		strconv.Itoa(r.EstPrompt), strconv.Itoa(r.CacheN), strconv.Itoa(r.PromptN),
		strconv.Itoa(r.PredictedN), ms(r.TTFTMS), ms(r.LatencyMS),
		strconv.Itoa(r.Status), r.Error, ms(r.StartMS), ms(r.EndMS),
	}
}

// Writer writes request rows as CSV, header first.
type Writer struct {
	w *csv.Writer
}

// NewWriter writes the header to w and returns a Writer.
func NewWriter(w io.Writer) (*Writer, error) {
	cw := csv.NewWriter(w)
	if err := cw.Write(Header); err != nil {
		return nil, err
	}
	return &Writer{w: cw}, nil
}

// Write appends one row.
func (w *Writer) Write(r *Request) error { return w.w.Write(r.Fields()) }

// Flush flushes buffered rows and reports any write error.
func (w *Writer) Flush() error {
	w.w.Flush()
	return w.w.Error()
}

// ReadRequests reads all rows of a requests CSV written by Writer. Errors name
// the line and the column.
func ReadRequests(r io.Reader) ([]Request, error) {
	cr := csv.NewReader(r)
	cr.ReuseRecord = true
	head, err := cr.Read()
	if err != nil {
		return nil, fmt.Errorf("read header: %w", err)
	}
	if len(head) != len(Header) {
		return nil, fmt.Errorf("header has %d columns, want %d (%v)", len(head), len(Header), Header)
	}
	for i := range Header {
		if head[i] != Header[i] {
			return nil, fmt.Errorf("header column %d is %q, want %q", i+1, head[i], Header[i])
		}
	}
	var out []Request
	for line := 2; ; line++ {
		f, err := cr.Read()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		var rq Request
		p := fieldParser{f: f, line: line}
		rq.RunID = f[0]
		rq.Policy = f[1]
		rq.Seed = p.int64(2)
		rq.Conversation = f[3]
		rq.Turn = p.int(4)
		rq.Replica = f[5]
		rq.Reason = f[6]
		rq.EstPrompt = p.int(7)
		rq.CacheN = p.int(8)
		rq.PromptN = p.int(9)
		rq.PredictedN = p.int(10)
		rq.TTFTMS = p.float(11)
		rq.LatencyMS = p.float(12)
		rq.Status = p.int(13)
		rq.Error = f[14]
		rq.StartMS = p.float(15)
		rq.EndMS = p.float(16)
		if p.err != nil {
			return nil, p.err
		}
		out = append(out, rq)
	}
}

type fieldParser struct {
	f    []string
	line int
	err  error
}

func (p *fieldParser) fail(i int, err error) {
	if p.err == nil {
		p.err = fmt.Errorf("line %d, column %s: %w", p.line, Header[i], err)
	}
}

func (p *fieldParser) int64(i int) int64 {
	v, err := strconv.ParseInt(p.f[i], 10, 64)
	if err != nil {
		p.fail(i, err)
	}
	return v
}

func (p *fieldParser) int(i int) int { return int(p.int64(i)) }

func (p *fieldParser) float(i int) float64 {
	v, err := strconv.ParseFloat(p.f[i], 64)
	if err != nil {
		p.fail(i, err)
	}
	return v
}

// Run describes one run: what was run, and when. It is written as
// <run_id>.json beside <run_id>.csv.
type Run struct {
	RunID    string `json:"run_id"`
	Policy   string `json:"policy"`
	Seed     int64  `json:"seed"`
	Profile  string `json:"profile"`            // profile name
	Mode     string `json:"mode"`               // "live" (embedded replicas), "external" (--router URL) or "sim"
	Replicas int    `json:"replicas"`           // replicas at the start
	Order    int    `json:"order"`              // position of this run in its invocation (0-based)
	Started  string `json:"started,omitempty"`  // wall-clock start, RFC 3339 (live runs)
	Finished string `json:"finished,omitempty"` // wall-clock end, RFC 3339 (live runs)
	// DurationMS is the run's length, ms (wall or virtual).
	DurationMS float64 `json:"duration_ms"`
	// ScaleAtMS is when the extra replica was started (0: no scale-up).
	ScaleAtMS float64 `json:"scale_at_ms"`
	// ScaleReadyMS is when the extra replica became ready and the router
	// picked it up (0: no scale-up, or it never became ready).
	ScaleReadyMS float64 `json:"scale_ready_ms"`
	// ScaleReplica names the extra replica.
	ScaleReplica string `json:"scale_replica,omitempty"`
	// Requests and Errors count the rows of the run's CSV.
	Requests int `json:"requests"`
	Errors   int `json:"errors"`
	// Config holds the router and replica settings used (free-form).
	Config map[string]any `json:"config,omitempty"`
	// Metrics holds the router's final counters (name{labels} → value).
	Metrics map[string]float64 `json:"metrics,omitempty"`
}

// WriteRunFile writes r as indented JSON to path.
func WriteRunFile(path string, r *Run) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// ReadRunFile reads a Run written by WriteRunFile.
func ReadRunFile(path string) (*Run, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r Run
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &r, nil
}
