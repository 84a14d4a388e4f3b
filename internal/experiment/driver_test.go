package experiment

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestReadStream(t *testing.T) {
	const (
		role    = `data: {"choices":[{"index":0,"delta":{"role":"assistant"},"finish_reason":null}]}` + "\n\n"
		hello   = `data: {"choices":[{"index":0,"delta":{"content":"Hel"},"finish_reason":null}]}` + "\n\n"
		world   = `data: {"choices":[{"index":0,"delta":{"content":"lo."},"finish_reason":null}]}` + "\n\n"
		timings = `data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],` +
			`"usage":{"prompt_tokens":99,"completion_tokens":9,"prompt_tokens_details":{"cached_tokens":90}},` +
			`"timings":{"cache_n":80,"prompt_n":20,"predicted_n":2}}` + "\n\n"
		usage = `data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],` +
			`"usage":{"prompt_tokens":100,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":70}}}` + "\n\n"
		done = "data: [DONE]\n\n"
	)
	for _, tc := range []struct {
		name                        string
		stream                      string
		text                        string
		cacheN, promptN, predictedN int
		firsts                      int    // calls of first()
		wantErr                     string // substring; "" for success
	}{
		// llama.cpp: timings win over usage; the role chunk is not content.
		{"llama.cpp", role + hello + world + timings + done, "Hello.", 80, 20, 2, 1, ""},
		// OpenAI: usage only, cached tokens split out of prompt_tokens.
		{"openai usage", hello + world + usage + done, "Hello.", 70, 30, 2, 1, ""},
		// CRLF framing and a comment line are fine.
		{"crlf", ": keep-alive\r\n" + strings.ReplaceAll(hello+timings+done, "\n", "\r\n"), "Hel", 80, 20, 2, 1, ""},
		// Counts arrived; only [DONE] is missing: accepted.
		{"no done", hello + timings, "Hel", 80, 20, 2, 1, ""},
		// Cut before the counts: the answer is incomplete.
		{"cut", hello + world, "", 0, 0, 0, 1, "stream ended before the answer was complete"},
		// [DONE] without counts: no way to know the cache.
		{"no counts", hello + done, "", 0, 0, 0, 1, "without token counts"},
		// An error event in the stream.
		{"error event", hello + `data: {"error":{"code":500,"message":"slot crashed","type":"server_error"}}` + "\n\n",
			"", 0, 0, 0, 1, "error in stream: slot crashed"},
		// Garbage.
		{"malformed", "data: {nope\n\n", "", 0, 0, 0, 0, "malformed stream chunk"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var a answer
			firsts := 0
			err := a.readStream(strings.NewReader(tc.stream), func() { firsts++ })
			if firsts != tc.firsts {
				t.Errorf("first() called %d times, want %d", firsts, tc.firsts)
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if a.text.String() != tc.text || a.cacheN != tc.cacheN || a.promptN != tc.promptN || a.predictedN != tc.predictedN {
				t.Errorf("got %q cache %d prompt %d predicted %d; want %q %d %d %d", a.text.String(),
					a.cacheN, a.promptN, a.predictedN, tc.text, tc.cacheN, tc.promptN, tc.predictedN)
			}
		})
	}
}

func TestReadJSON(t *testing.T) {
	var a answer
	err := a.readJSON(strings.NewReader(`{"choices":[{"index":0,"message":{"role":"assistant","content":"Hi."},"finish_reason":"stop"}],` +
		`"timings":{"cache_n":5,"prompt_n":6,"predicted_n":7}}`))
	if err != nil || a.text.String() != "Hi." || a.cacheN != 5 || a.promptN != 6 || a.predictedN != 7 || a.streamed {
		t.Errorf("readJSON: %v %q %d %d %d", err, a.text.String(), a.cacheN, a.promptN, a.predictedN)
	}
	if err := new(answer).readJSON(strings.NewReader(`{"choices":[]}`)); err == nil {
		t.Error("an answer without a message was accepted")
	}
}

func TestStatusError(t *testing.T) {
	for _, tc := range []struct {
		status int
		body   string
		want   string
	}{
		// The router's and llama.cpp's JSON error: its message.
		{503, `{"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}`, "HTTP 503: Loading model"},
		// Anything else: the start of the body.
		{502, "Bad Gateway\n", "HTTP 502: Bad Gateway"},
		// Nothing at all.
		{500, "", "HTTP 500"},
		// A long body is cut.
		{500, strings.Repeat("x", 300), "HTTP 500: " + strings.Repeat("x", 200) + "…"},
	} {
		if got := statusError(tc.status, []byte(tc.body)); got != tc.want {
			t.Errorf("statusError(%d, %.20q) = %q, want %q", tc.status, tc.body, got, tc.want)
		}
	}
}

func TestParseMetrics(t *testing.T) {
	const text = `# HELP llm_ring_requests_total Proxied requests.
# TYPE llm_ring_requests_total counter
llm_ring_requests_total{policy="bounded",replica="llm-0",reason="home",code="200"} 7
llm_ring_requests_total{policy="bounded",replica="llm-1",reason="overflow",code="200"} 2
# TYPE llm_ring_replicas gauge
llm_ring_replicas 3
# TYPE llm_ring_request_seconds histogram
llm_ring_request_seconds_bucket{policy="bounded",le="1"} 4
llm_ring_request_seconds_bucket{policy="bounded",le="+Inf"} 9
llm_ring_request_seconds_sum{policy="bounded"} 12.5
llm_ring_request_seconds_count{policy="bounded"} 9
# TYPE go_goroutines gauge
go_goroutines 42
`
	got, err := ParseMetrics(strings.NewReader(text), MetricsPrefix)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{
		`llm_ring_requests_total{code="200",policy="bounded",reason="home",replica="llm-0"}`:     7,
		`llm_ring_requests_total{code="200",policy="bounded",reason="overflow",replica="llm-1"}`: 2,
		`llm_ring_replicas`: 3,
		`llm_ring_request_seconds_count{policy="bounded"}`: 9,
		`llm_ring_request_seconds_sum{policy="bounded"}`:   12.5,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ParseMetrics =\n%v\nwant\n%v", got, want)
	}
	if _, err := ParseMetrics(strings.NewReader("llm_ring_x{"), MetricsPrefix); err == nil {
		t.Error("malformed exposition accepted")
	}
}

// An external router's counters span all its runs: a run keeps the
// difference; gauges keep their final value.
func TestMetricsDelta(t *testing.T) {
	before := map[string]sample{"c": {10, true}, "g": {3, false}, "gone": {1, true}}
	after := map[string]sample{"c": {15, true}, "g": {4, false}, "new": {2, true}}
	got := metricsDelta(before, after)
	want := map[string]float64{"c": 5, "g": 4, "new": 2}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("metricsDelta = %v, want %v", got, want)
	}
}

func TestProgressLines(t *testing.T) {
	var b bytes.Buffer
	p := newProgress(&b, false, "bounded seed 1", 20)
	now := p.start
	p.now = func() time.Time { return now }
	for i := range 20 {
		now = now.Add(time.Second)
		p.add(i == 3)
	}
	p.finish("done")
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	// One line per 10 %, then the summary.
	if len(lines) != 11 {
		t.Fatalf("%d lines, want 11:\n%s", len(lines), b.String())
	}
	if want := "[bounded seed 1] 2/20 requests  10%  elapsed 0:02  ETA 0:18  errors 0"; lines[0] != want {
		t.Errorf("first line %q, want %q", lines[0], want)
	}
	if want := "[bounded seed 1] 20/20 requests  100%  elapsed 0:20  ETA 0:00  errors 1"; lines[9] != want {
		t.Errorf("last line %q, want %q", lines[9], want)
	}
	if lines[10] != "[bounded seed 1] done" {
		t.Errorf("summary %q", lines[10])
	}

	// A run that stops early prints where it stopped.
	b.Reset()
	p = newProgress(&b, false, "x", 100)
	p.add(false)
	p.finish("")
	if !strings.HasPrefix(b.String(), "[x] 1/100 requests  1%") {
		t.Errorf("early stop: %q", b.String())
	}

	// On a terminal, the line is redrawn in place.
	b.Reset()
	p = newProgress(&b, true, "t", 2)
	p.add(false)
	p.add(false)
	p.finish("")
	if out := b.String(); !strings.HasPrefix(out, "\r[t] ") || !strings.Contains(out, "\r[t] 2/2 requests  100%") || strings.Count(out, "\n") != 1 {
		t.Errorf("terminal output %q", out)
	}
}

func TestClock(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{0, "0:00"},
		{41 * time.Second, "0:41"},
		{90*time.Second + 600*time.Millisecond, "1:31"}, // rounded
		{time.Hour + 2*time.Minute + 3*time.Second, "1:02:03"},
	} {
		if got := clock(tc.d); got != tc.want {
			t.Errorf("clock(%v) = %q, want %q", tc.d, got, tc.want)
		}
	}
}
