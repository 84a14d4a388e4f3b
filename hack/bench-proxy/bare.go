package main

import (
	"bytes"
	"hash/fnv"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"time"

	"github.com/llm-ring/llm-ring/internal/h1"
)

// The bare proxy is the floor: net/http's server, httputil.ReverseProxy
// and a Transport with the router's settings (internal/router,
// newTransport), picking a replica by a hash of x-conversation-id and
// nothing else: no parsing, routing state, observer, metrics or log. What
// it costs per request on the same traffic is what net/http itself costs;
// what llm-ring costs beyond it is the router's own.

// bareBuffers lends ReverseProxy its copy buffers, as the router does.
type bareBuffers struct{}

var (
	barePool = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}
	bodyPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}
)

func (bareBuffers) Get() []byte  { return *barePool.Get().(*[]byte) }
func (bareBuffers) Put(b []byte) { barePool.Put(&b) }

// runBare serves the bare proxy on addr in front of the replicas' URLs
// until the process is killed.
func runBare(addr string, replicas []string, useH1 bool) error {
	h, err := bareHandler(replicas, useH1)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, IdleTimeout: 2 * time.Minute}
	return srv.Serve(ln)
}

// bareHandler is the bare proxy's handler in front of the replicas' URLs,
// on the router's HTTP/1.1 client (useH1) or Go's Transport.
func bareHandler(replicas []string, useH1 bool) (http.Handler, error) {
	ups := make([]*url.URL, len(replicas))
	for i, r := range replicas {
		u, err := url.Parse(r)
		if err != nil {
			return nil, err
		}
		ups[i] = u
	}
	tr := &http.Transport{
		DialContext:           (&net.Dialer{Timeout: 2 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          1024,
		MaxIdleConnsPerHost:   256,
		IdleConnTimeout:       90 * time.Second,
		ResponseHeaderTimeout: 10 * time.Minute,
	}
	var rt http.RoundTripper = tr
	if useH1 {
		rt = &h1.Transport{DialTimeout: 2 * time.Second, ResponseHeaderTimeout: 10 * time.Minute,
			IdleTimeout: 90 * time.Second, MaxIdlePerHost: 256, Fallback: tr}
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			h := fnv.New32a()
			h.Write([]byte(pr.In.Header.Get("x-conversation-id")))
			pr.SetURL(ups[h.Sum32()%uint32(len(ups))])
			pr.SetXForwarded()
		},
		Transport:  rt,
		BufferPool: bareBuffers{},
	}
	// The body is read into memory before it is forwarded, as the router
	// reads it (to parse it, and to send it again on a failover). Passing
	// the server's body reader on instead had net/http cut about one in
	// four of the unloaded streamed answers (the upstream connection
	// closed mid-answer: "unexpected EOF" at the client), which neither
	// the router nor HAProxy did on the same traffic.
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b := bodyPool.Get().(*bytes.Buffer)
		b.Reset()
		if _, err := b.ReadFrom(req.Body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			bodyPool.Put(b)
			return
		}
		req.Body = io.NopCloser(bytes.NewReader(b.Bytes()))
		rp.ServeHTTP(w, req)
		bodyPool.Put(b)
	}), nil
}
