package router

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/llm-ring/llm-ring/internal/replicaset"
	"github.com/llm-ring/llm-ring/internal/wire"
)

// BenchmarkLoopback is one proxied request over loopback sockets, in one
// process: a client (one kept-alive connection), the router's own HTTP
// server (newServer) and transport (newTransport), and one replica
// answering the canned chat answer or stream. target=direct is the client
// against the replica itself, so the router's share of allocs/op and
// cpu-ns/op is the difference between the two. The JSON request log is
// encoded to io.Discard. A figure of the whole path (net/http's server,
// client and the router) that BenchmarkHandler, with no sockets, does
// not count.
func BenchmarkLoopback(b *testing.B) {
	for _, stream := range []bool{false, true} {
		for _, target := range []string{"direct", "router"} {
			b.Run(fmt.Sprintf("stream=%t/target=%s", stream, target), func(b *testing.B) {
				url, conns := loopbackRig(b, target == "router")
				body := []byte(fmt.Sprintf(`{"model":"m","max_tokens":8,"stream":%t,"messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"%s"}]}`,
					stream, strings.Repeat("x", 900)))
				client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4, DisableCompression: true}}
				defer client.CloseIdleConnections()
				hdr := http.Header{"Content-Type": {"application/json"}}
				if stream {
					hdr.Set("x-bench-stream", "1")
				}
				buf := make([]byte, 32<<10)
				send := func(i int) {
					req, _ := http.NewRequest(http.MethodPost, url+wire.PathChatCompletions, bytes.NewReader(body))
					req.Header = hdr.Clone()
					req.Header.Set("x-conversation-id", "c"+strconv.Itoa(i%64))
					resp, err := client.Do(req)
					if err != nil {
						b.Fatal(err)
					}
					n, _ := io.CopyBuffer(io.Discard, struct{ io.Reader }{resp.Body}, buf)
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK || n == 0 {
						b.Fatalf("status %d, %d bytes", resp.StatusCode, n)
					}
				}
				for i := range 100 { // connections, pools, placement memory
					send(i)
				}
				b.ReportAllocs()
				cpu0, conns0, i := processCPU(), conns.Load(), 0
				for b.Loop() {
					send(i)
					i++
				}
				b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
				// Connections opened during the loop (the replica's and the
				// router's listener): 0 when every one was kept alive.
				b.ReportMetric(float64(conns.Load()-conns0)/float64(b.N), "conns/op")
			})
		}
	}
}

// loopbackRig serves one canned replica (and, with router, the router in
// front of it) on loopback and returns the URL the client calls, and the
// count of connections their listeners accepted.
func loopbackRig(b *testing.B, router bool) (string, *atomic.Int64) {
	conns := new(atomic.Int64)
	count := func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	up := serveLoopback(b, &http.Server{ConnState: count, Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		io.Copy(io.Discard, req.Body)
		if strings.HasSuffix(req.Header.Get("x-bench-stream"), "1") {
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(http.StatusOK)
			for ev := range strings.SplitAfterSeq(cannedStream, "\n\n") { // one write per event, as engines send them
				io.WriteString(w, ev)
				w.(http.Flusher).Flush()
			}
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(cannedAnswer)))
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, cannedAnswer)
	})})
	if !router {
		return up, conns
	}
	rs := []replicaset.Replica{{Name: "llm-0", URL: up}}
	cfg := testConfig(b, "llm-aware", rs)
	cfg.HealthCheck.Interval = 0
	rt, err := New(Options{Config: cfg, Logger: slog.New(slog.NewJSONHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	rt.SetReplicas(rs)
	srv := rt.clientServer()
	srv.ConnState = count
	return serveLoopback(b, srv), conns
}

func serveLoopback(b *testing.B, srv *http.Server) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go srv.Serve(ln)
	b.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String()
}
