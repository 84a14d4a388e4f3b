package epp

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	procv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// chat is an OpenAI chat request: a conversation of turns user messages.
func chat(conv string, turns int, stream bool) []byte {
	var msgs []map[string]string
	for i := range turns {
		msgs = append(msgs, map[string]string{"role": "user", "content": fmt.Sprintf("%s: question %d %s", conv, i, strings.Repeat("lorem ipsum ", 40))})
		if i < turns-1 {
			msgs = append(msgs, map[string]string{"role": "assistant", "content": "answer " + strings.Repeat("dolor ", 20)})
		}
	}
	b, _ := json.Marshal(map[string]any{"model": "m", "messages": msgs, "max_tokens": 32, "stream": stream})
	return b
}

const chatPath = "/v1/chat/completions"

// answerJSON is a llama.cpp-style OpenAI answer with its timings.
func answerJSON(cacheN, promptN, predictedN int) string {
	return fmt.Sprintf(`{"choices":[{"message":{"role":"assistant","content":"ok"}}],"usage":{"prompt_tokens":%d,"completion_tokens":%d},"timings":{"cache_n":%d,"prompt_n":%d,"predicted_n":%d}}`,
		cacheN+promptN, predictedN, cacheN, promptN, predictedN)
}

func endpointsOf(h *harness) map[string]string {
	out := map[string]string{}
	for _, r := range h.rt.Table().Status().Replicas {
		out[endpoint(r.Replica)] = r.Name
	}
	return out
}

// TestPickAndFallbacks: the destination is in the header AND the envoy.lb
// metadata, the same string (MUSTs 9, 11); it lists the pick and then the
// policy's failover order, distinct endpoints of the pool (MUST 10); the
// body goes back to Envoy unchanged (MUST 4).
func TestPickAndFallbacks(t *testing.T) {
	h := newHarness(t, testConfig(t, "consistent"), Options{Fallbacks: 2})
	h.rt.SetReplicas(pool(4))
	body := chat("c1", 1, false)
	c := h.start(exchange{Path: chatPath, Body: body, Pieces: 3})
	if c.Immediate != nil {
		t.Fatalf("immediate response %v", c.Immediate)
	}
	if c.Dest == "" || c.Dest != c.Meta {
		t.Fatalf("header %q, metadata %q: want the same non-empty value", c.Dest, c.Meta)
	}
	eps := strings.Split(c.Dest, ",")
	names := endpointsOf(h)
	if len(eps) != 3 {
		t.Fatalf("destination %q: want the pick and 2 fallbacks", c.Dest)
	}
	for i, ep := range eps {
		if names[ep] == "" || slices.Index(eps, ep) != i {
			t.Fatalf("destination %q: %q is not a distinct endpoint of the pool %v", c.Dest, ep, names)
		}
	}
	if string(c.Forwarded) != string(body) {
		t.Fatalf("forwarded body differs from the client's (%d vs %d bytes)", len(c.Forwarded), len(body))
	}
	if got := h.inflight()[names[eps[0]]]; got != 1 {
		t.Fatalf("the pick %s has %d in flight, want 1 (fallbacks are not charged: %v)", names[eps[0]], got, h.inflight())
	}
	c.answer(200, "application/json", "", answerJSON(0, 200, 5))
	waitFor(t, "release", func() bool { return h.inflight()[names[eps[0]]] == 0 })
	c.close()
	// The same conversation's next turn goes to the same home (consistent).
	c2 := h.start(exchange{Path: chatPath, Body: chat("c1", 2, false)})
	if first, _, _ := strings.Cut(c2.Dest, ","); first != eps[0] {
		t.Fatalf("turn 2 → %s, turn 1 → %s", first, eps[0])
	}
}

// TestStreamedRequestBody: full duplex, the body in many pieces: the
// headers' answer waits for the whole body, then the body comes back in
// order, ending with end_of_stream (MUSTs 2, 4).
func TestStreamedRequestBody(t *testing.T) {
	h := newHarness(t, testConfig(t, "llm-aware"), Options{})
	h.rt.SetReplicas(pool(2))
	body := chat("c", 3, true)
	c := h.start(exchange{Path: chatPath, Body: body, Pieces: 7,
		ReqMode: procv3.ProcessingMode_FULL_DUPLEX_STREAMED, RespMode: procv3.ProcessingMode_FULL_DUPLEX_STREAMED})
	if c.Dest == "" || string(c.Forwarded) != string(body) {
		t.Fatalf("dest %q, forwarded %d of %d bytes", c.Dest, len(c.Forwarded), len(body))
	}
	if want := []string{"headers+dest", "body"}; !slices.Equal(c.Kinds, want) {
		t.Fatalf("answers %v, want %v (the headers' answer held until the body is in, then the body)", c.Kinds, want)
	}
	big := []byte(`{"model":"m","prompt":"` + strings.Repeat("x", 150<<10) + `"}`)
	c = h.start(exchange{Path: "/v1/completions", Body: big, Pieces: 5})
	if string(c.Forwarded) != string(big) || len(c.Kinds) != 4 {
		t.Fatalf("150 KiB body: forwarded %d of %d bytes in %v; want it back in 64 KiB pieces", len(c.Forwarded), len(big), c.Kinds)
	}
}

// TestTrailersEndBody: in full duplex, trailers tell that the body is
// complete (MUST 3): the pick happens then; the body's last piece does not
// end the stream, the trailers' answer follows.
func TestTrailersEndBody(t *testing.T) {
	h := newHarness(t, testConfig(t, "llm-aware"), Options{})
	h.rt.SetReplicas(pool(2))
	body := chat("c", 1, false)
	c := h.start(exchange{Path: chatPath, Body: body, Pieces: 2, Trailers: true})
	if want := []string{"headers+dest", "body", "trailers"}; c.Dest == "" || string(c.Forwarded) != string(body) || !slices.Equal(c.Kinds, want) {
		t.Fatalf("dest %q, forwarded %q, answers %v (want %v)", c.Dest, c.Forwarded, c.Kinds, want)
	}
}

// TestBufferedMode: BUFFERED request body: the headers are answered at
// once (Envoy waits for it before sending the body), the destination comes
// with the body's answer; every message gets exactly one answer (MUST 5).
func TestBufferedMode(t *testing.T) {
	h := newHarness(t, testConfig(t, "llm-aware"), Options{Fallbacks: 1})
	h.rt.SetReplicas(pool(2))
	c := h.start(exchange{Path: chatPath, Body: chat("c", 1, false),
		ReqMode: procv3.ProcessingMode_BUFFERED, RespMode: procv3.ProcessingMode_BUFFERED})
	if c.Answers != 2 || c.Dest == "" || c.Dest != c.Meta || len(c.Forwarded) != 0 {
		t.Fatalf("answers %d, dest %q meta %q, forwarded %d bytes: want 2 answers, the destination on the body's", c.Answers, c.Dest, c.Meta, len(c.Forwarded))
	}
	if back := c.answer(200, "application/json", "", answerJSON(0, 100, 4)); len(back) != 0 {
		t.Fatalf("BUFFERED response body mutated: %q", back)
	}
	waitFor(t, "release", func() bool { return h.inflight()["llm-0"]+h.inflight()["llm-1"] == 0 })
	c.close()
}

// TestEveryMessageAnswered: with STREAMED response bodies every chunk gets
// its own answer, in order (MUST 5); a headers-only request is answered at
// its headers.
func TestEveryMessageAnswered(t *testing.T) {
	h := newHarness(t, testConfig(t, "llm-aware"), Options{})
	h.rt.SetReplicas(pool(2))
	c := h.start(exchange{Method: "GET", Path: "/v1/models", ReqMode: procv3.ProcessingMode_BUFFERED, RespMode: procv3.ProcessingMode_STREAMED})
	if c.Answers != 1 || c.Dest == "" {
		t.Fatalf("GET: %d answers, dest %q; want the pick on the headers' answer", c.Answers, c.Dest)
	}
	c.respond(200, "application/json", "", -1)
	for i := range 5 {
		c.body([]byte(fmt.Sprintf(`{"part":%d}`, i)), i == 4)
	}
	c.close()
}

// TestSubsetHint: the pick and its fallbacks come only from the subset
// (MUST 6).
func TestSubsetHint(t *testing.T) {
	h := newHarness(t, testConfig(t, "consistent"), Options{Fallbacks: 3})
	h.rt.SetReplicas(pool(5))
	subset := []string{"10.0.0.2:8000", "10.0.0.4:8000"}
	for i := range 10 {
		c := h.start(exchange{Path: chatPath, Body: chat(fmt.Sprint("c", i), 1, false), Subset: subset, HasSubset: true})
		eps := strings.Split(c.Dest, ",")
		if len(eps) != 2 || !slices.Contains(subset, eps[0]) || !slices.Contains(subset, eps[1]) {
			t.Fatalf("conversation %d: destination %q, want both of %v only", i, c.Dest, subset)
		}
		c.cancel()
	}
}

// TestSubsetHintNoneEligible: an empty subset, or one naming no replica
// of the pool, is a 503 immediate response (MUST 7).
func TestSubsetHintNoneEligible(t *testing.T) {
	h := newHarness(t, testConfig(t, "llm-aware"), Options{})
	h.rt.SetReplicas(pool(2))
	for _, subset := range [][]string{{}, {"10.9.9.9:8000"}} {
		c := h.start(exchange{Path: chatPath, Body: chat("c", 1, false), Subset: subset, HasSubset: true})
		if c.Immediate == nil || c.Immediate.GetStatus().GetCode() != 503 {
			t.Fatalf("subset %v: %v, want a 503 immediate response", subset, c.Immediate)
		}
	}
}

// TestNoReplica503: no ready replica → 503 immediate response with an
// OpenAI-style error body (MUST 12); a malformed body is the proxy's 400.
func TestNoReplica503(t *testing.T) {
	h := newHarness(t, testConfig(t, "llm-aware"), Options{})
	c := h.start(exchange{Path: chatPath, Body: chat("c", 1, false)})
	if c.Immediate == nil || c.Immediate.GetStatus().GetCode() != 503 || !strings.Contains(string(c.Immediate.GetBody()), `"error"`) {
		t.Fatalf("no replicas: %v, want 503 with a JSON error", c.Immediate)
	}
	h.rt.SetReplicas(pool(1))
	c = h.start(exchange{Path: chatPath, Body: []byte(`{"messages": 3}`)})
	if c.Immediate == nil || c.Immediate.GetStatus().GetCode() != 400 || !strings.Contains(string(c.Immediate.GetBody()), "messages") {
		t.Fatalf("bad body: %v, want the proxy's 400 naming messages", c.Immediate)
	}
}

// TestHealthServices: liveness, readiness and the ext_proc service as the
// protocol names them (MUST 14): readiness follows the pool, and both
// turn NOT_SERVING when the EPP stops.
func TestHealthServices(t *testing.T) {
	cfg := testConfig(t, "llm-aware")
	h := newHarness(t, cfg, Options{ReadyEvery: 5 * time.Millisecond})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.s.Serve(ctx, ln, time.Second) }()
	h.addr = ln.Addr().String()
	conn := dial(t, h.addr)
	hc := healthpb.NewHealthClient(conn)
	check := func(svc string) healthpb.HealthCheckResponse_ServingStatus {
		r, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil {
			return -1
		}
		return r.GetStatus()
	}
	if check(ServiceLiveness) != healthpb.HealthCheckResponse_SERVING || check(ServiceReadiness) != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("no replicas: liveness %v readiness %v", check(ServiceLiveness), check(ServiceReadiness))
	}
	h.rt.SetReplicas(pool(1))
	waitFor(t, "readiness", func() bool {
		return check(ServiceReadiness) == healthpb.HealthCheckResponse_SERVING && check(ServiceExtProc) == healthpb.HealthCheckResponse_SERVING
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	r, _ := h.s.health.Check(context.Background(), &healthpb.HealthCheckRequest{Service: ServiceExtProc})
	if r.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("after stop: ext_proc %v", r.GetStatus())
	}
}

// TestUnsupportedModeAndLimits: a request body mode the EPP cannot pick in
// (STREAMED: Envoy would want the headers answered before the body) ends
// the stream with an error naming it; a body over the limit is a 413.
func TestUnsupportedModeAndLimits(t *testing.T) {
	h := newHarness(t, testConfig(t, "llm-aware"), Options{MaxBody: 1000})
	h.rt.SetReplicas(pool(2))
	st, err := extprocv3.NewExternalProcessorClient(h.conn).Process(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	st.Send(&extprocv3.ProcessingRequest{
		ProtocolConfig: &extprocv3.ProtocolConfiguration{RequestBodyMode: procv3.ProcessingMode_STREAMED},
		Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
			Headers: hdrs(map[string]string{":method": "POST", ":path": chatPath})}}})
	if _, err := st.Recv(); err == nil || !strings.Contains(err.Error(), "STREAMED") {
		t.Fatalf("STREAMED request body: %v, want an error naming the mode", err)
	}
	c := h.start(exchange{Path: chatPath, Body: chat("big", 4, false), Pieces: 3})
	if c.Immediate == nil || c.Immediate.GetStatus().GetCode() != 413 {
		t.Fatalf("a body over the limit: %v, want 413", c.Immediate)
	}
}
