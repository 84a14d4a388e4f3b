package router

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	rtmetrics "runtime/metrics"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/llm-ring/llm-ring/internal/replicaset"
	"github.com/llm-ring/llm-ring/internal/wire"
)

// The handler path in process: the router's ServeHTTP with a canned
// upstream (a RoundTripper, no sockets) and a reused response writer, so
// that what is counted is the router's own work per request: parse, route,
// proxy, observe the answer, release, metrics and the JSON log line (to
// io.Discard, encoded all the same).

const cannedAnswer = `{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],` +
	`"usage":{"prompt_tokens":260,"completion_tokens":8,"total_tokens":268,"prompt_tokens_details":{"cached_tokens":200}},` +
	`"timings":{"cache_n":200,"prompt_n":60,"predicted_n":8,"prompt_ms":1.5,"predicted_ms":4.0}}`

const cannedStream = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a \"}}]}\n\n" +
	"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"b \"}}]}\n\n" +
	"data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}],\"timings\":{\"cache_n\":200,\"prompt_n\":60,\"predicted_n\":8,\"prompt_ms\":1.5,\"predicted_ms\":4.0}}\n\n" +
	"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":260,\"completion_tokens\":8,\"total_tokens\":268,\"prompt_tokens_details\":{\"cached_tokens\":200}}}\n\n" +
	"data: [DONE]\n\n"

// cannedUpstream answers every request at once from memory.
type cannedUpstream struct{}

func (cannedUpstream) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		io.Copy(io.Discard, req.Body)
		req.Body.Close()
	}
	body, ct := cannedAnswer, "application/json"
	if strings.HasSuffix(req.Header.Get("x-bench-stream"), "1") {
		body, ct = cannedStream, "text/event-stream"
	}
	h := http.Header{"Content-Type": {ct}}
	length := int64(len(body))
	if ct == "text/event-stream" {
		length = -1
	}
	return &http.Response{StatusCode: 200, Status: "200 OK", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: h, Body: io.NopCloser(strings.NewReader(body)), ContentLength: length, Request: req}, nil
}

// Synchronous: the canned answer holds nothing of the request (the
// flight is recycled as behind the replicas' own client).
func (cannedUpstream) Synchronous(*http.Request) bool { return true }

// discardWriter is a reusable http.ResponseWriter (and Flusher).
type discardWriter struct {
	h      http.Header
	status int
	n      int
}

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) WriteHeader(s int)           { w.status = s }
func (w *discardWriter) Write(p []byte) (int, error) { w.n += len(p); return len(p), nil }
func (w *discardWriter) Flush()                      {}
func (w *discardWriter) reset() {
	clear(w.h)
	w.status, w.n = 0, 0
}

// handlerRig is a router over three canned replicas and one prepared request.
type handlerRig struct {
	rt   *Router
	body []byte
	req  *http.Request
	w    *discardWriter
	conv int
}

func newHandlerRig(tb testing.TB, stream bool) *handlerRig {
	rs := []replicaset.Replica{{Name: "llm-0", URL: "http://10.0.0.1:8080"}, {Name: "llm-1", URL: "http://10.0.0.2:8080"}, {Name: "llm-2", URL: "http://10.0.0.3:8080"}}
	cfg := testConfig(tb, "llm-aware", rs)
	cfg.HealthCheck.Interval = 0
	rt, err := New(Options{Config: cfg, Logger: slog.New(NewLogHandler(io.Discard, nil)), Transport: cannedUpstream{}})
	if err != nil {
		tb.Fatal(err)
	}
	rt.SetReplicas(rs)
	g := &handlerRig{rt: rt, w: &discardWriter{h: http.Header{}}}
	pad := strings.Repeat("x", 900)
	g.body = []byte(fmt.Sprintf(`{"model":"m","max_tokens":8,"stream":%t,"messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"%s"}]}`, stream, pad))
	// As from Serve's listener (clientServer): the request's context descends from r.flights.
	g.req, _ = http.NewRequestWithContext(rt.flights, http.MethodPost, "http://router"+wire.PathChatCompletions, nil)
	if stream {
		g.req.Header.Set("x-bench-stream", "1")
	}
	return g
}

// serve sends the prepared request once (conversations rotate over 64).
func (g *handlerRig) serve(tb testing.TB) {
	g.conv = (g.conv + 1) % 64
	g.req.Header.Set("x-conversation-id", "c"+strconv.Itoa(g.conv))
	g.req.Body = io.NopCloser(bytes.NewReader(g.body))
	g.req.ContentLength = int64(len(g.body))
	g.w.reset()
	g.rt.ServeHTTP(g.w, g.req)
	if g.w.status != http.StatusOK && g.w.status != 0 || g.w.n == 0 {
		tb.Fatalf("status %d, %d bytes", g.w.status, g.w.n)
	}
}

// processCPU is the process's CPU time (user + system, every thread: the
// garbage collector's too), in ns. On a shared machine it is a steadier
// figure than ns/op, which counts the time other processes had the CPU.
func processCPU() int64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// gcCPU is the runtime's estimate of the CPU its garbage collector has
// spent (mark workers, assists, pauses), in ns.
func gcCPU() int64 {
	s := []rtmetrics.Sample{{Name: "/cpu/classes/gc/total:cpu-seconds"}}
	rtmetrics.Read(s)
	if s[0].Value.Kind() != rtmetrics.KindFloat64 {
		return 0
	}
	return int64(s[0].Value.Float64() * 1e9)
}

// BenchmarkHandler is one proxied request through the router's handler:
// ns/op, cpu-ns/op and allocs/op of the router's own work, and the share
// of that CPU the garbage collector took (gc-cpu-%; GOGC applies).
func BenchmarkHandler(b *testing.B) {
	for _, stream := range []bool{false, true} {
		b.Run(fmt.Sprintf("stream=%t", stream), func(b *testing.B) {
			g := newHandlerRig(b, stream)
			b.ReportAllocs()
			cpu0, gc0 := processCPU(), gcCPU()
			for b.Loop() {
				g.serve(b)
			}
			cpu := processCPU() - cpu0
			b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/op")
			b.ReportMetric(100*float64(gcCPU()-gc0)/float64(max(cpu, 1)), "gc-cpu-%")
		})
	}
}

// maxAllocsPerRequest is what one proxied request may allocate through the
// in-process handler, by streamed (a chat completion, 1 KiB body; the
// canned upstream's own allocations included). Lower it when the handler
// allocates less; a change that needs more must say why. The race
// detector's figures are higher by its own allocations (raceExtra).
// 150 and 286 on the proxy branch; 152 and 288 after main's merges of the
// operator hooks (status page, tracing: off) and epp's Flight changes;
// 109 and 180 with the one-pass chat parse (parse_fast.go) and the
// accumulator hashing the conversation start as it goes; 154 streamed with
// engine.memberSpan walking the bytes (span.go); 85 and 130 with the flight
// holding its context, observer, body reader and idle watch (no per-request
// context for the listener, no closures); 86 and 131 with the body in
// io.NopCloser again (net/http retries a closed kept-alive connection only
// for a body it knows is in memory); 97 streamed with the stream's counts
// read by the router's own parser through engine.Filter's Counter (no
// encoding/json per counted event, no closure), the filter held in the
// flight with a pooled buffer, and the usage-only chunk recognized without
// decoding; 59 and 70 with the decision trace appended into a pooled
// buffer without fmt (issue 21: policy.Decision.AppendFormat; the log
// line's trace is one string); 54 and 65 with the request line appended as
// JSON into a pooled buffer (NewLogHandler, the rig's logger as the
// binary's: no slog.Record, attributes or trace string); 51 and 62 with
// the conversation headers looked up by their canonical keys, prepared once
// (keyHeaders), and their logged source not concatenated per request;
// 49 and 60 with the answers' idle timeout kept by one watch for all
// (idlewatch.go) instead of a timer per answer; 48 and 59 with the flight
// recycled (recycle, proxy.go).
var maxAllocsPerRequest = map[bool]float64{false: 48, true: 59}

const raceExtra = 25 // 22, plus its random sync.Pool drops

// TestHandlerAllocs guards the allocations of one proxied request: a count,
// not a time, so it cannot be noisy.
func TestHandlerAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation count: not in -short")
	}
	for _, stream := range []bool{false, true} {
		g := newHandlerRig(t, stream)
		for range 100 { // fill pools and placement memory
			g.serve(t)
		}
		got := testing.AllocsPerRun(200, func() { g.serve(t) })
		t.Logf("stream=%t: %.0f allocations per request", stream, got)
		limit := maxAllocsPerRequest[stream]
		if raceOn {
			limit += raceExtra
		}
		if got > limit {
			t.Errorf("stream=%t: %.0f allocations per proxied request, over the guard's %.0f", stream, got, limit)
		}
	}
}
