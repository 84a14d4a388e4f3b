package epp

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
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
// buffered request (the proxy's parser), route it, compute the fallbacks,
// feed the answer and release (request log to a discarding logger).
// fallbacks=0 is the proxy's own work for a request (parse, route, release).
func BenchmarkFlight(b *testing.B) {
	for _, n := range []int{0, 2} {
		b.Run(fmt.Sprintf("fallbacks=%d", n), func(b *testing.B) { benchFlight(b, n) })
	}
}

func benchFlight(b *testing.B, fallbacks int) {
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
		fl.Fallbacks(nil, fallbacks)
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
		lat = append(lat, exchangeOnce(b, client, hdr, bodies[i%len(bodies)], answer))
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

// exchangeOnce plays one request through the EPP and returns the time from
// its headers to the destination.
func exchangeOnce(b *testing.B, client extprocv3.ExternalProcessorClient, hdr *corev3HeaderMap, body, answer []byte) time.Duration {
	st, err := client.Process(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	t0 := time.Now()
	st.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{Headers: hdr.proto()}}})
	st.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: body, EndOfStream: true}}})
	if r, err := st.Recv(); err != nil || r.GetRequestHeaders() == nil {
		b.Fatalf("destination: %v %v", r, err)
	}
	d := time.Since(t0)
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
	return d
}

// BenchmarkExtProcLoopbackParallel is BenchmarkExtProcLoopback with 16
// streams in flight at once (GOMAXPROCS × 8 goroutines on 2 cores): the
// decision latency under contention and the CPU per request at saturation.
func BenchmarkExtProcLoopbackParallel(b *testing.B) {
	s, err := New(Options{Router: benchRouter(b), Fallbacks: 2})
	if err != nil {
		b.Fatal(err)
	}
	g := s.GRPC()
	ln := listen(b)
	go g.Serve(ln)
	defer g.Stop()
	client := extprocv3.NewExternalProcessorClient(dial(b, ln.Addr().String()))
	bodies := benchBodies()
	answer := []byte(answerJSON(0, 600, 16))
	var mu sync.Mutex
	var lat []time.Duration
	var seq atomic.Int64
	b.SetParallelism(8)
	b.ReportAllocs()
	cpu0 := cpuTime()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		hdr := &corev3HeaderMap{headers: map[string]string{":method": "POST", ":path": chatPath, "content-type": "application/json"}}
		var mine []time.Duration
		for pb.Next() {
			mine = append(mine, exchangeOnce(b, client, hdr, bodies[int(seq.Add(1))%len(bodies)], answer))
		}
		mu.Lock()
		lat = append(lat, mine...)
		mu.Unlock()
	})
	reportLatency(b, "decide-", lat, cpuTime()-cpu0)
}
