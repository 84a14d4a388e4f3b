package epp

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	procv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/llm-ring/llm-ring/internal/config"
	"github.com/llm-ring/llm-ring/internal/replicaset"
	"github.com/llm-ring/llm-ring/internal/router"
)

// logBuf is a concurrency-safe log sink.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) { l.mu.Lock(); defer l.mu.Unlock(); return l.b.Write(p) }
func (l *logBuf) String() string              { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

func testConfig(t testing.TB, pol string, edit ...func(*config.Router)) *config.Router {
	t.Helper()
	c, err := config.Load("../../config/router.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c.Policy = pol
	for _, e := range edit {
		e(c)
	}
	return c
}

// pool is n replicas at 10.0.0.i:8000 (the EPP never calls them).
func pool(n int) []replicaset.Replica {
	out := make([]replicaset.Replica, n)
	for i := range out {
		out[i] = replicaset.Replica{Name: "llm-" + strconv.Itoa(i), URL: "http://10.0.0." + strconv.Itoa(i+1) + ":8000"}
	}
	return out
}

// harness is an EPP on a loopback gRPC listener and a gateway client.
type harness struct {
	t    *testing.T
	rt   *router.Router
	s    *Server
	g    *grpc.Server
	conn *grpc.ClientConn
	log  *logBuf
	addr string
}

func newHarness(t *testing.T, cfg *config.Router, opts Options) *harness {
	t.Helper()
	return newHarnessNamed(t, cfg, opts, "")
}

func newHarnessNamed(t *testing.T, cfg *config.Router, opts Options, node string) *harness {
	t.Helper()
	h := &harness{t: t, log: &logBuf{}}
	rt, err := router.New(router.Options{Config: cfg, NodeName: node, Logger: slog.New(slog.NewJSONHandler(h.log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	h.rt = rt
	opts.Router = rt
	if h.s, err = New(opts); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h.addr = ln.Addr().String()
	h.g = h.s.GRPC()
	go h.g.Serve(ln)
	t.Cleanup(h.g.Stop)
	h.conn, err = grpc.NewClient(h.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.conn.Close() })
	return h
}

// exchange is one HTTP request as Envoy's ext_proc filter presents it.
type exchange struct {
	Method, Path string
	Headers      map[string]string
	Body         []byte
	Pieces       int  // request body sent in this many pieces (≥ 1)
	Trailers     bool // end the request body with trailers instead of end_of_stream
	Subset       []string
	HasSubset    bool
	ReqMode      procv3.ProcessingMode_BodySendMode // 0: no protocol_config (FULL_DUPLEX_STREAMED assumed)
	RespMode     procv3.ProcessingMode_BodySendMode
}

// call is a stream in progress.
type call struct {
	t      *testing.T
	st     extprocv3.ExternalProcessor_ProcessClient
	cancel context.CancelFunc
	// What the EPP answered to the request.
	Immediate *extprocv3.ImmediateResponse
	Dest      string   // x-gateway-destination-endpoint header
	Meta      string   // envoy.lb metadata value
	Forwarded []byte   // the request body Envoy would forward (full duplex)
	Answers   int      // responses received for the request phase
	done      bool     // the request phase is answered
	Kinds     []string // the request phase's answers in order: headers+dest, headers, body, trailers
	bodiless  bool
}

func hdrs(kv map[string]string) *corev3.HeaderMap {
	hm := &corev3.HeaderMap{}
	for k, v := range kv {
		hm.Headers = append(hm.Headers, &corev3.HeaderValue{Key: k, RawValue: []byte(v)})
	}
	return hm
}

// start sends the request phase of x and reads the EPP's answers to it.
func (h *harness) start(x exchange) *call {
	h.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	st, err := extprocv3.NewExternalProcessorClient(h.conn).Process(ctx)
	if err != nil {
		h.t.Fatal(err)
	}
	c := &call{t: h.t, st: st, cancel: cancel, bodiless: len(x.Body) == 0}
	h.t.Cleanup(cancel)
	if x.Method == "" {
		x.Method = "POST"
	}
	kv := map[string]string{":method": x.Method, ":path": x.Path, ":authority": "gw", "content-type": "application/json"}
	for k, v := range x.Headers {
		kv[k] = v
	}
	first := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
		Headers: hdrs(kv), EndOfStream: len(x.Body) == 0}}}
	if x.ReqMode != 0 {
		first.ProtocolConfig = &extprocv3.ProtocolConfiguration{RequestBodyMode: x.ReqMode, ResponseBodyMode: x.RespMode}
	}
	if x.HasSubset {
		vals := make([]*structpb.Value, len(x.Subset))
		for i, s := range x.Subset {
			vals[i] = structpb.NewStringValue(s)
		}
		first.MetadataContext = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{MetadataSubset: {Fields: map[string]*structpb.Value{
			KeySubset: structpb.NewListValue(&structpb.ListValue{Values: vals})}}}}
	}
	c.send(first)
	buffered := x.ReqMode == procv3.ProcessingMode_BUFFERED
	if buffered && len(x.Body) > 0 {
		c.recvRequestAnswer() // Envoy waits for the headers' answer before the body
	}
	c.sendBody(x)
	for c.Immediate == nil && !c.done {
		c.recvRequestAnswer()
	}
	return c
}

func (c *call) sendBody(x exchange) {
	if len(x.Body) == 0 {
		return
	}
	n := max(x.Pieces, 1)
	size := (len(x.Body) + n - 1) / n
	for off := 0; off < len(x.Body); off += size {
		end := min(off+size, len(x.Body))
		err := c.st.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{
			Body: x.Body[off:end], EndOfStream: end == len(x.Body) && !x.Trailers}}})
		if err == io.EOF {
			return // the EPP ended the stream (an immediate response): Envoy stops sending too
		}
		if err != nil {
			c.t.Fatalf("send: %v", err)
		}
	}
	if x.Trailers {
		c.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestTrailers{RequestTrailers: &extprocv3.HttpTrailers{
			Trailers: hdrs(map[string]string{"x-trailer": "1"})}}})
	}
}

func (c *call) send(r *extprocv3.ProcessingRequest) {
	c.t.Helper()
	if err := c.st.Send(r); err != nil {
		c.t.Fatalf("send: %v", err)
	}
}

func (c *call) recv() *extprocv3.ProcessingResponse {
	c.t.Helper()
	r, err := c.st.Recv()
	if err != nil {
		c.t.Fatalf("recv: %v", err)
	}
	return r
}

// recvRequestAnswer reads one answer of the request phase.
func (c *call) recvRequestAnswer() {
	c.t.Helper()
	r := c.recv()
	c.Answers++
	if d := r.GetDynamicMetadata(); d != nil {
		c.Meta = d.GetFields()[MetadataLB].GetStructValue().GetFields()[HeaderDestination].GetStringValue()
	}
	var common *extprocv3.CommonResponse
	switch v := r.GetResponse().(type) {
	case *extprocv3.ProcessingResponse_ImmediateResponse:
		c.Immediate = v.ImmediateResponse
		return
	case *extprocv3.ProcessingResponse_RequestHeaders:
		common = v.RequestHeaders.GetResponse()
		c.done = c.bodiless
		c.Kinds = append(c.Kinds, "headers")
	case *extprocv3.ProcessingResponse_RequestBody:
		common = v.RequestBody.GetResponse()
		c.Kinds = append(c.Kinds, "body")
		if sr := common.GetBodyMutation().GetStreamedResponse(); sr != nil {
			c.Forwarded = append(c.Forwarded, sr.GetBody()...)
			c.done = sr.GetEndOfStream()
		} else {
			c.done = common.GetHeaderMutation() != nil // BUFFERED: the destination comes with the body
		}
	case *extprocv3.ProcessingResponse_RequestTrailers:
		c.done = true
		c.Kinds = append(c.Kinds, "trailers")
	default:
		c.t.Fatalf("unexpected answer in the request phase: %T", v)
	}
	for _, hv := range common.GetHeaderMutation().GetSetHeaders() {
		if hv.GetHeader().GetKey() == HeaderDestination {
			c.Dest = string(hv.GetHeader().GetRawValue())
			c.Kinds[len(c.Kinds)-1] += "+dest"
		}
	}
}

// answer plays the upstream's answer through the EPP: response headers
// (with the served endpoint, if any), the body in pieces, then the end of
// the stream. It returns the body the EPP handed back (full duplex).
func (c *call) answer(status int, contentType string, served string, pieces ...string) []byte {
	c.t.Helper()
	c.respond(status, contentType, served, len(strings.Join(pieces, "")))
	var back []byte
	for i, p := range pieces {
		back = append(back, c.body([]byte(p), i == len(pieces)-1)...)
	}
	return back
}

func (c *call) respond(status int, contentType, served string, length int) {
	c.t.Helper()
	kv := map[string]string{":status": strconv.Itoa(status), "content-type": contentType}
	if length >= 0 && !strings.HasPrefix(contentType, "text/event-stream") {
		kv["content-length"] = strconv.Itoa(length)
	}
	req := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{Headers: hdrs(kv)}}}
	if served != "" {
		req.MetadataContext = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{MetadataLB: {Fields: map[string]*structpb.Value{
			KeyServed: structpb.NewStringValue(served)}}}}
	}
	c.send(req)
	if _, ok := c.recv().GetResponse().(*extprocv3.ProcessingResponse_ResponseHeaders); !ok {
		c.t.Fatal("response headers not answered with a headers response")
	}
}

// body sends one piece of the response body and returns what came back.
func (c *call) body(p []byte, end bool) []byte {
	c.t.Helper()
	c.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{Body: p, EndOfStream: end}}})
	r := c.recv().GetResponseBody()
	if r == nil {
		c.t.Fatal("response body not answered with a body response")
	}
	return r.GetResponse().GetBodyMutation().GetStreamedResponse().GetBody()
}

// close ends the stream as Envoy does after the answer, and waits for the
// EPP to end it too.
func (c *call) close() {
	c.t.Helper()
	c.st.CloseSend()
	if _, err := c.st.Recv(); err != io.EOF {
		c.t.Fatalf("after close: %v, want EOF", err)
	}
}

// waitFor polls cond (state changes happen on the EPP's goroutines).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

// inflight is the pool's requests in flight per replica name.
func (h *harness) inflight() map[string]int64 {
	out := map[string]int64{}
	for _, r := range h.rt.Table().Status().Replicas {
		out[r.Name] = r.Load.Requests
	}
	return out
}

func dial(t testing.TB, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func listen(tb testing.TB) net.Listener {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	return ln
}
