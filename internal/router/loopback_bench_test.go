package router

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/llm-ring/llm-ring/internal/config"
	"github.com/llm-ring/llm-ring/internal/replicaset"
	"github.com/llm-ring/llm-ring/internal/wire"
)

// BenchmarkLoopback is one proxied request over loopback sockets, in one
// process: a client (one kept-alive connection), the router's own HTTP
// server (newServer) and transport (newTransport), and one replica
// answering the canned chat answer or stream. target=direct is the client
// against the replica itself; target=bare is the floor: net/http's server
// (newServer) and a bare httputil.ReverseProxy on the router's transport,
// the body read into memory first as the router reads it, and nothing
// else. What net/http costs is bare minus direct; what the router adds
// to it is router minus bare; router-nethttp is the router on Go's
// Transport to the replica (upstream.client: net/http) instead of its own
// client (internal/h1), which bare uses too. The JSON request log is
// encoded to io.Discard. A figure of the whole path (net/http's server,
// client and the router) that BenchmarkHandler, with no sockets, does
// not count.
func BenchmarkLoopback(b *testing.B) {
	for _, stream := range []bool{false, true} {
		for _, target := range []string{"direct", "bare", "router", "router-nethttp"} {
			b.Run(fmt.Sprintf("stream=%t/target=%s", stream, target), func(b *testing.B) {
				url, conns := loopbackRig(b, target)
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

// loopbackRig serves one canned replica (and, for target bare or router,
// that proxy in front of it) on loopback and returns the URL the client
// calls, and the count of connections their listeners accepted.
func loopbackRig(b *testing.B, target string) (string, *atomic.Int64) {
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
	rs := []replicaset.Replica{{Name: "llm-0", URL: up}}
	cfg := testConfig(b, "llm-aware", rs)
	cfg.HealthCheck.Interval = 0
	switch target {
	case "direct":
		return up, conns
	case "bare":
		srv := (&Router{cfg: cfg, log: slog.New(slog.DiscardHandler)}).newServer(bareProxy(b, cfg, up))
		srv.ConnState = count
		return serveLoopback(b, srv), conns
	}
	if target == "router-nethttp" {
		cfg.Upstream.Client = config.ClientNetHTTP
	}
	rt, err := New(Options{Config: cfg, Logger: slog.New(NewLogHandler(io.Discard, nil))})
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

// bareProxy is the loopback floor: ReverseProxy on the router's transport
// in front of one replica, the body read first.
func bareProxy(b *testing.B, cfg *config.Router, up string) http.Handler {
	u, err := url.Parse(up)
	if err != nil {
		b.Fatal(err)
	}
	rp := &httputil.ReverseProxy{
		Rewrite:    func(pr *httputil.ProxyRequest) { pr.SetURL(u); pr.SetXForwarded() },
		Transport:  newTransport(cfg),
		BufferPool: copyBuffers{},
	}
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, err := io.ReadAll(req.Body)
		if err != nil {
			b.Error(err)
			return
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
		rp.ServeHTTP(w, req)
	})
}
