package epp

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"syscall"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/llm-ring/llm-ring/internal/router"
)

func benchRouter(b *testing.B) *router.Router {
	rt, err := router.New(router.Options{Config: testConfig(b, "llm-aware"), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	rt.SetReplicas(pool(8))
	return rt
}

func benchBodies() [][]byte {
	out := make([][]byte, 256)
	for i := range out {
		out[i] = chat(fmt.Sprint("bench", i), 1+i%4, false)
	}
	return out
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportLatency adds p50 / p99 of lat (per request) and the process CPU
// per request to the benchmark's output.
func reportLatency(b *testing.B, prefix string, lat []time.Duration, cpu time.Duration) {
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), prefix+"p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), prefix+"p99-µs")
	b.ReportMetric(float64(cpu.Microseconds())/float64(len(lat)), "cpu-µs/req")
}

// BenchmarkFlight is the EPP's decision without the transport: parse the
// buffered request (the proxy's parser), route it, compute 2 fallbacks,
// feed the answer and release (request log to a discarding logger).
func BenchmarkFlight(b *testing.B) {
	rt := benchRouter(b)
	bodies := benchBodies()
	answer := []byte(answerJSON(0, 600, 16))
	h := http.Header{"Content-Type": {"application/json"}}
	lat := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	cpu0 := cpuTime()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		t0 := time.Now()
		fl, err := rt.NewFlight(context.Background(), "POST", chatPath, h, bodies[i%len(bodies)])
		if err != nil {
			b.Fatal(err)
		}
		if err := fl.Route(); err != nil {
			b.Fatal(err)
		}
		fl.Fallbacks(nil, 2)
		lat = append(lat, time.Since(t0))
		fl.ResponseHeaders(200, "application/json", int64(len(answer)))
		fl.ResponseBody(answer, true)
		fl.Finish(context.Background())
	}
	reportLatency(b, "decide-", lat, cpuTime()-cpu0)
}

// BenchmarkExtProcLoopback is one whole request as Envoy drives it, over a
// loopback gRPC connection: headers + body (full duplex), the EPP's
// destination and body back, response headers + body, the stream's end.
// decide- is from the request headers sent to the destination received.
// CPU counts the test gateway's side too (one process): an upper bound.
func BenchmarkExtProcLoopback(b *testing.B) {
	s, err := New(Options{Router: benchRouter(b), Fallbacks: 2})
	if err != nil {
		b.Fatal(err)
	}
	g := s.GRPC()
	ln := listen(b)
	go g.Serve(ln)
	defer g.Stop()
	conn := dial(b, ln.Addr().String())
	client := extprocv3.NewExternalProcessorClient(conn)
	bodies := benchBodies()
	answer := []byte(answerJSON(0, 600, 16))
	hdr := &corev3HeaderMap{headers: map[string]string{":method": "POST", ":path": chatPath, "content-type": "application/json"}}
	lat := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	cpu0 := cpuTime()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		st, err := client.Process(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		st.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{Headers: hdr.proto()}}})
		st.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: bodies[i%len(bodies)], EndOfStream: true}}})
		if r, err := st.Recv(); err != nil || r.GetRequestHeaders() == nil {
			b.Fatalf("destination: %v %v", r, err)
		}
		lat = append(lat, time.Since(t0))
		mustRecv(b, st) // the body back
		st.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{
			Headers: (&corev3HeaderMap{headers: map[string]string{":status": "200", "content-type": "application/json", "content-length": fmt.Sprint(len(answer))}}).proto()}}})
		mustRecv(b, st)
		st.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{Body: answer, EndOfStream: true}}})
		mustRecv(b, st)
		st.CloseSend()
		if _, err := st.Recv(); err != io.EOF {
			b.Fatalf("end: %v", err)
		}
	}
	reportLatency(b, "decide-", lat, cpuTime()-cpu0)
}

func mustRecv(b *testing.B, st extprocv3.ExternalProcessor_ProcessClient) {
	if _, err := st.Recv(); err != nil {
		b.Fatal(err)
	}
}

type corev3HeaderMap struct{ headers map[string]string }

func (m *corev3HeaderMap) proto() *corev3.HeaderMap { return hdrs(m.headers) }
