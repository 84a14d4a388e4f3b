package router

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/llm-ring/llm-ring/internal/config"
	"github.com/llm-ring/llm-ring/internal/replicaset"
	"github.com/llm-ring/llm-ring/internal/wire"
)

// tracedHarness is a harness with tracing on, spans kept in memory, and
// replicas that remember the traceparent each request brought.
func tracedHarness(t *testing.T, n int, edit ...func(*config.Router)) (*harness, *tracetest.InMemoryExporter, *parents) {
	h := newHarness(t, "llm-aware", n, edit...)
	exp := tracetest.NewInMemoryExporter()
	h.rt.setTracing(config.Tracing{Mode: config.TracingOTLP}, "test", sdktrace.WithSyncer(exp))
	seen := &parents{}
	for _, f := range h.fakes {
		inner := f.srv.Config.Handler
		f.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			seen.add(r.Header.Get("traceparent"))
			inner.ServeHTTP(w, r)
		})
	}
	return h, exp, seen
}

type parents struct {
	mu  sync.Mutex
	got []string
}

func (p *parents) add(s string) { p.mu.Lock(); p.got = append(p.got, s); p.mu.Unlock() }
func (p *parents) all() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.got...)
}

func attrs(s tracetest.SpanStub) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes {
		m[kv.Key] = kv.Value
	}
	return m
}

// waitSpans waits for n ended spans (a span ends just after the answer's
// last byte reached the client).
func waitSpans(t *testing.T, exp *tracetest.InMemoryExporter, n int) tracetest.SpanStubs {
	t.Helper()
	waitFor(t, "spans", func() bool { return len(exp.GetSpans()) >= n })
	return exp.GetSpans()
}

// TestTracingSpan: one server span per request, a child of the client's
// traceparent, with the decision; the replica gets the span's traceparent.
func TestTracingSpan(t *testing.T) {
	h, exp, seen := tracedHarness(t, 2)
	const client = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	body := chatBody(strings.Repeat("hello there ", 30), false)
	h.post(t, wire.PathChatCompletions, body, "x-conversation-id", "t1", "traceparent", client)
	h.post(t, wire.PathChatCompletions, body, "x-conversation-id", "t1", "traceparent", client)
	spans := waitSpans(t, exp, 2)
	if len(spans) != 2 {
		t.Fatalf("%d spans, want 2", len(spans))
	}
	s := spans[1]
	if s.SpanKind != trace.SpanKindServer || s.Name != "POST "+wire.PathChatCompletions {
		t.Errorf("span %q kind %v", s.Name, s.SpanKind)
	}
	if got := s.SpanContext.TraceID().String(); got != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("trace id %s: not the client's", got)
	}
	if got := s.Parent.SpanID().String(); got != "00f067aa0ba902b7" || !s.Parent.IsRemote() {
		t.Errorf("parent %s: not the client's span", got)
	}
	a := attrs(s)
	replica := a["llm_ring.replica"].AsString()
	if a["llm_ring.policy"].AsString() != "llm-aware" || !strings.HasPrefix(replica, "llm-") || a["llm_ring.reason"].AsString() == "" ||
		a["llm_ring.attempts"].AsInt64() != 1 || a["http.response.status_code"].AsInt64() != 200 {
		t.Errorf("decision attributes: %v", a)
	}
	if a["llm_ring.cached_tokens.expected"].AsInt64() == 0 || a["llm_ring.cached_tokens.reported"].AsInt64() == 0 || !a["llm_ring.counts_known"].AsBool() {
		t.Errorf("second turn: cached tokens expected %v, reported %v", a["llm_ring.cached_tokens.expected"], a["llm_ring.cached_tokens.reported"])
	}
	if s.Status.Code == codes.Error {
		t.Errorf("status %v", s.Status)
	}
	tp := seen.all()
	want := "00-4bf92f3577b34da6a3ce929d0e0e4736-" + s.SpanContext.SpanID().String() + "-01"
	if len(tp) != 2 || tp[1] != want {
		t.Errorf("the replica got traceparent %q, want %q (the router's span)", tp, want)
	}
}

// TestTracingFailover: the attempts and the replicas that failed are on the
// span; every attempt carries the traceparent.
func TestTracingFailover(t *testing.T) {
	h, exp, seen := tracedHarness(t, 2)
	body := chatBody("fail over", false)
	// Find the replica the conversation goes to, then make it answer 503.
	resp, _ := h.post(t, wire.PathChatCompletions, body, "x-conversation-id", "f1")
	first := resp.Header.Get(HeaderRoutedTo)
	for _, f := range h.fakes {
		if f.name == first {
			f.status = http.StatusServiceUnavailable
		}
	}
	h.post(t, wire.PathChatCompletions, body, "x-conversation-id", "f1")
	s := waitSpans(t, exp, 2)[1]
	a := attrs(s)
	if a["llm_ring.attempts"].AsInt64() != 2 || a["llm_ring.replica"].AsString() == first {
		t.Errorf("attempts %v, replica %v (first %s)", a["llm_ring.attempts"], a["llm_ring.replica"], first)
	}
	if got := a["llm_ring.failed_replicas"].AsStringSlice(); len(got) != 1 || got[0] != first {
		t.Errorf("failed replicas %v, want [%s]", got, first)
	}
	tp := seen.all()
	if len(tp) != 3 || tp[1] == "" || tp[1] != tp[2] {
		t.Errorf("traceparents %q: want the span's on both attempts", tp)
	}
}

// TestTracingError: a request no replica can serve ends its span with an
// error status.
func TestTracingError(t *testing.T) {
	h, exp, _ := tracedHarness(t, 1)
	h.fakes[0].status = http.StatusInternalServerError
	h.post(t, wire.PathChatCompletions, chatBody("boom", false))
	s := waitSpans(t, exp, 1)[0]
	if s.Status.Code != codes.Error || attrs(s)["http.response.status_code"].AsInt64() != 500 {
		t.Errorf("status %v, attributes %v", s.Status, attrs(s))
	}
}

// TestTracingOffAllocs: with tracing off (the default) the hooks allocate
// nothing.
func TestTracingOffAllocs(t *testing.T) {
	h := newHarness(t, "consistent", 1)
	if h.rt.tracing != nil {
		t.Fatal("tracing on by default")
	}
	if _, ok := h.rt.base.(tracedTransport); ok {
		t.Error("tracing off, yet the transport to the replicas is wrapped")
	}
	req := httptest.NewRequest(http.MethodPost, wire.PathChatCompletions, nil)
	f := &flight{ctx: context.Background()}
	n := testing.AllocsPerRun(100, func() {
		ctx := req.Context()
		end := h.rt.startSpan(&ctx, req)
		h.rt.traceFinish(f, counts{})
		end()
	})
	if n != 0 {
		t.Errorf("tracing off: %v allocations per request, want 0", n)
	}
}

// TestTracingConfig: the block is optional, validated, and builds an OTLP
// exporter that does not need its receiver to be up.
func TestTracingConfig(t *testing.T) {
	for _, tc := range []struct {
		c    config.Tracing
		want string
	}{
		{config.Tracing{}, ""},
		{config.Tracing{Mode: "none"}, ""},
		{config.Tracing{Mode: "otlp", Endpoint: "http://127.0.0.1:4318"}, ""},
		{config.Tracing{Mode: "otlp", Endpoint: "https://collector.example/otlp/v1/traces", SampleRatio: 0.1}, ""},
		{config.Tracing{Mode: "jaeger"}, "tracing.mode"},
		{config.Tracing{Mode: "otlp", Endpoint: "collector:4318"}, "tracing.endpoint"},
		{config.Tracing{Mode: "otlp", Endpoint: "http://c:4318", SampleRatio: 2}, "tracing.sample_ratio"},
	} {
		err := tc.c.Validate()
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v: %v, want %q", tc.c, err, tc.want)
		}
	}
	base, err := os.ReadFile("../../config/router.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for block, want := range map[string]string{
		"tracing:\n  mode: otlp\n  endpoint: http://otel-collector:4318\n  sample_ratio: 0.5\n": "",
		"tracing:\n  mode: otlp\n":                "endpoint",
		"tracing:\n  mode: none\n  color: blue\n": "color",
	} {
		path := filepath.Join(t.TempDir(), "router.yaml")
		os.WriteFile(path, append(append([]byte{}, base...), block...), 0o644)
		c, err := config.Load(path)
		if want == "" && (err != nil || !c.Tracing.On() || c.Tracing.SampleRatio != 0.5) || want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
			t.Errorf("router.yaml + %q: %v, want %q", block, err, want)
		}
	}
	rt, err := New(Options{Config: testConfig(t, "consistent", []replicaset.Replica{{Name: "a", URL: "http://127.0.0.1:1"}},
		func(c *config.Router) { c.Tracing = config.Tracing{Mode: "otlp", Endpoint: "http://127.0.0.1:1"} })})
	if err != nil || rt.tracing == nil {
		t.Fatalf("New with tracing: %v", err)
	}
	done := make(chan struct{})
	go func() { rt.shutdownTracing(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("shutdown hangs on an unreachable receiver")
	}
}
