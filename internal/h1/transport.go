// Package h1 is the router's HTTP/1.1 client to its replicas: an
// http.RoundTripper that does each exchange on the calling goroutine over a
// pool of kept-alive connections.
//
// net/http's Transport hands every request to two goroutines of its
// connection (one writes the request, one reads the answer) and the answer's
// body back over channels: four goroutine hand-offs per request, which on a
// loaded router are a visible share of its CPU (docs/notes/proxy.md). A
// replica is a plain-HTTP/1.1 server on the cluster network (llama.cpp,
// vLLM's and SGLang's uvicorn, Ollama), one request at a time per
// connection, so the exchange can be done where it is asked for: write the
// request, read the answer's head with net/http's own parser
// (http.ReadResponse), and hand the body over to be read by the caller. What
// this transport does not do (TLS, proxies, HTTP/2, protocol upgrades, a
// body of unknown length) it hands to Fallback.
package h1

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Transport is an HTTP/1.1 round tripper for plain-http URLs. Its zero
// value works (no timeouts, http.DefaultTransport as the fallback); set
// the limits and Fallback before first use.
type Transport struct {
	// Dial opens a connection (nil: a net.Dialer with DialTimeout).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// DialTimeout bounds a connection's dial when Dial is nil (0: none).
	DialTimeout time.Duration
	// ResponseHeaderTimeout bounds the wait for an answer's head after the
	// request was written (0: none).
	ResponseHeaderTimeout time.Duration
	// IdleTimeout closes a kept-alive connection unused for longer (0: never).
	IdleTimeout time.Duration
	// MaxIdlePerHost is how many kept-alive connections a host keeps
	// (0: DefaultMaxIdlePerHost).
	MaxIdlePerHost int
	// Fallback carries what this transport does not: https and other
	// schemes, upgrades, bodies of unknown length (nil: http.DefaultTransport).
	Fallback http.RoundTripper

	mu    sync.Mutex
	idle  map[string][]*conn // by host:port, most recently used last
	swept time.Time          // the last sweep of expired idle connections
}

// DefaultMaxIdlePerHost is MaxIdlePerHost's default.
const DefaultMaxIdlePerHost = 256

// errBodyLength: the request's body ended before its ContentLength.
var errBodyLength = errors.New("h1: request body shorter than its ContentLength")

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !t.handles(req) {
		if t.Fallback == nil {
			return http.DefaultTransport.RoundTrip(req)
		}
		return t.Fallback.RoundTrip(req)
	}
	key := hostPort(req)
	ctx := req.Context()
	for tries := 0; ; tries++ {
		c, reused, err := t.conn(ctx, key)
		if err != nil {
			closeBody(req)
			return nil, err
		}
		resp, err := c.exchange(req)
		if err == nil {
			return resp, nil
		}
		c.close()
		// A kept-alive connection the replica closed while it was idle
		// fails before any byte of an answer: the request never reached
		// it, so it goes once more on a fresh connection (as net/http's
		// Transport retries on a closed idle connection). The host's other
		// idle connections are likely as stale (a replica that restarted):
		// they are closed, so that the retry dials.
		if !reused || c.nread != 0 || tries > 0 || ctx.Err() != nil || !rewind(req) {
			closeBody(req)
			return nil, err
		}
		t.dropIdle(key)
	}
}

// dropIdle closes key's idle connections.
func (t *Transport) dropIdle(key string) {
	t.mu.Lock()
	l := t.idle[key]
	delete(t.idle, key)
	t.mu.Unlock()
	for _, c := range l {
		c.nc.Close()
	}
}

// handles says whether t carries req itself.
// Synchronous reports whether RoundTrip carries req itself, on the
// caller's goroutine: then nothing of req (its body, its context) is used
// once RoundTrip has returned and the answer's body is closed, and the
// caller may reuse their memory. False for what goes to Fallback (https,
// bodies of unknown length, upgrades), whose transport may still hold req.
func (t *Transport) Synchronous(req *http.Request) bool { return t.handles(req) }

func (t *Transport) handles(req *http.Request) bool {
	if req.URL.Scheme != "http" || req.URL.Host == "" {
		return false
	}
	if req.Body != nil && req.Body != http.NoBody && req.ContentLength <= 0 {
		return false // a body of unknown length: chunked, net/http's
	}
	if _, ok := req.Header["Upgrade"]; ok {
		return false
	}
	return req.Method != http.MethodConnect
}

// rewind readies req's body to be sent again; false when it cannot be.
func rewind(req *http.Request) bool {
	if req.Body == nil || req.Body == http.NoBody {
		return true
	}
	if req.GetBody == nil {
		return false
	}
	b, err := req.GetBody()
	if err != nil {
		return false
	}
	req.Body = b
	return true
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}

// hostPort is the request's host:port, the key of its connection pool.
func hostPort(req *http.Request) string {
	h := req.URL.Host
	if req.URL.Port() == "" {
		return net.JoinHostPort(req.URL.Hostname(), "80")
	}
	return h
}

// conn takes a kept-alive connection to key, or dials one.
func (t *Transport) conn(ctx context.Context, key string) (*conn, bool, error) {
	now := time.Now()
	t.mu.Lock()
	for l := t.idle[key]; len(l) > 0; l = t.idle[key] {
		c := l[len(l)-1]
		l[len(l)-1] = nil
		t.idle[key] = l[:len(l)-1]
		if t.IdleTimeout > 0 && now.Sub(c.idleAt) > t.IdleTimeout {
			t.mu.Unlock()
			c.nc.Close()
			t.mu.Lock()
			continue
		}
		t.mu.Unlock()
		return c, true, nil
	}
	t.mu.Unlock()
	nc, err := t.dial(ctx, key)
	if err != nil {
		return nil, false, err
	}
	c := &conn{t: t, key: key, nc: nc}
	c.abort = func() { nc.Close() }
	c.br = bufio.NewReaderSize(readCounter{c}, 4<<10)
	c.bw = bufio.NewWriterSize(nc, 4<<10)
	return c, false, nil
}

func (t *Transport) dial(ctx context.Context, addr string) (net.Conn, error) {
	if t.Dial != nil {
		return t.Dial(ctx, "tcp", addr)
	}
	d := net.Dialer{Timeout: t.DialTimeout, KeepAlive: 30 * time.Second}
	return d.DialContext(ctx, "tcp", addr)
}

// put keeps c for the next request to its host, or closes it.
func (t *Transport) put(c *conn) {
	limit := t.MaxIdlePerHost
	if limit <= 0 {
		limit = DefaultMaxIdlePerHost
	}
	now := time.Now()
	c.idleAt = now
	t.mu.Lock()
	if t.idle == nil {
		t.idle = map[string][]*conn{}
	}
	var expired []*conn
	if t.IdleTimeout > 0 && now.Sub(t.swept) > t.IdleTimeout/2 {
		t.swept = now
		expired = t.sweep(now)
	}
	l := t.idle[c.key]
	keep := len(l) < limit
	if keep {
		t.idle[c.key] = append(l, c)
	}
	t.mu.Unlock()
	if !keep {
		c.nc.Close()
	}
	for _, x := range expired {
		x.nc.Close()
	}
}

// sweep takes out the idle connections unused for longer than IdleTimeout
// (of every host: a replica gone from the set gets no request that would
// find its connections expired), for the caller to close outside the lock.
func (t *Transport) sweep(now time.Time) []*conn {
	var expired []*conn
	for key, l := range t.idle {
		fresh := l[:0]
		for _, c := range l {
			if now.Sub(c.idleAt) > t.IdleTimeout {
				expired = append(expired, c)
			} else {
				fresh = append(fresh, c)
			}
		}
		clear(l[len(fresh):])
		if len(fresh) == 0 {
			delete(t.idle, key)
		} else {
			t.idle[key] = fresh
		}
	}
	return expired
}

// CloseIdleConnections closes every kept-alive connection (and the
// fallback's, when it has the method).
func (t *Transport) CloseIdleConnections() {
	t.mu.Lock()
	idle := t.idle
	t.idle = nil
	t.mu.Unlock()
	for _, l := range idle {
		for _, c := range l {
			c.nc.Close()
		}
	}
	if f, ok := t.Fallback.(interface{ CloseIdleConnections() }); ok {
		f.CloseIdleConnections()
	}
}

// conn is one kept-alive connection to a replica, carrying one exchange at
// a time.
type conn struct {
	t      *Transport
	key    string
	nc     net.Conn
	br     *bufio.Reader
	bw     *bufio.Writer
	nread  int64 // bytes read during the current exchange
	idleAt time.Time
	abort  func() // closes the connection: the request ended (a replica sees its client go)
}

// readCounter counts what the connection's reader reads.
type readCounter struct{ c *conn }

func (r readCounter) Read(p []byte) (int, error) {
	n, err := r.c.nc.Read(p)
	r.c.nread += int64(n)
	return n, err
}

func (c *conn) close() { c.nc.Close() }

// exchange writes req and reads its answer's head; the answer's body is
// read from the connection by whoever reads resp.Body.
func (c *conn) exchange(req *http.Request) (*http.Response, error) {
	c.nread = 0
	ctx := req.Context()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	// The request's end (its client gone, the router's cut) closes the
	// connection: whatever waits on it ends, and the replica sees the
	// request gone and stops working on it.
	stop := context.AfterFunc(ctx, c.abort)
	if err := c.write(req); err != nil {
		stop()
		return nil, c.ctxErr(ctx, err)
	}
	resp, err := c.readHead(req)
	if err != nil {
		stop()
		return nil, c.ctxErr(ctx, err)
	}
	// A body per exchange: whoever holds the last answer's may still close
	// it after the connection has gone on to the next.
	b := &body{c: c, rc: resp.Body, stop: stop, keep: !resp.Close && !req.Close}
	if resp.Body == http.NoBody {
		b.done(b.keep)
		return resp, nil
	}
	resp.Body = b
	return resp, nil
}

// ctxErr prefers the request's own end to the connection error it caused.
func (c *conn) ctxErr(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return cerr
	}
	return err
}

// readHead reads the answer's head, skipping interim (1xx) answers.
func (c *conn) readHead(req *http.Request) (*http.Response, error) {
	if d := c.t.ResponseHeaderTimeout; d > 0 {
		c.nc.SetReadDeadline(time.Now().Add(d))
	}
	for {
		resp, err := http.ReadResponse(c.br, req)
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() && req.Context().Err() == nil {
				return nil, errHeaderTimeout
			}
			return nil, err
		}
		if resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			if c.t.ResponseHeaderTimeout > 0 {
				c.nc.SetReadDeadline(time.Time{})
			}
			return resp, nil
		}
	}
}

// errHeaderTimeout is net/http's message for the same wait.
var errHeaderTimeout = errors.New("net/http: timeout awaiting response headers")

// reqExclude is what write sets itself rather than copying from the header.
var reqExclude = map[string]bool{"Host": true, "User-Agent": true, "Content-Length": true,
	"Transfer-Encoding": true, "Trailer": true}

// write writes req's head and body to the connection.
func (c *conn) write(req *http.Request) error {
	w := c.bw
	w.WriteString(req.Method)
	w.WriteByte(' ')
	w.WriteString(req.URL.RequestURI())
	w.WriteString(" HTTP/1.1\r\nHost: ")
	host := req.Host
	if host == "" {
		host = req.URL.Host
	}
	w.WriteString(host)
	if ua := req.Header["User-Agent"]; len(ua) > 0 && ua[0] != "" {
		w.WriteString("\r\nUser-Agent: ")
		w.WriteString(ua[0])
	} else if _, set := req.Header["User-Agent"]; !set {
		w.WriteString("\r\nUser-Agent: Go-http-client/1.1")
	}
	n := req.ContentLength
	if req.Body == nil || req.Body == http.NoBody {
		n = 0
	}
	if n > 0 || req.Method == http.MethodPost || req.Method == http.MethodPut || req.Method == http.MethodPatch {
		w.WriteString("\r\nContent-Length: ")
		var b [20]byte
		w.Write(strconv.AppendInt(b[:0], n, 10))
	}
	if req.Close {
		w.WriteString("\r\nConnection: close")
	}
	w.WriteString("\r\n")
	if err := req.Header.WriteSubset(w, reqExclude); err != nil {
		return err
	}
	w.WriteString("\r\n")
	if n > 0 {
		m, err := io.Copy(w, io.LimitReader(req.Body, n))
		req.Body.Close()
		if err != nil {
			return err
		}
		if m != n {
			return errBodyLength
		}
	} else if req.Body != nil {
		req.Body.Close()
	}
	return w.Flush()
}

// body is an answer's body: read from the connection, which goes back to
// the pool when the body was read to its end and may be kept.
type body struct {
	c    *conn
	rc   io.ReadCloser
	stop func() bool
	keep bool
	eof  bool
	end  bool // done was called
}

func (b *body) Read(p []byte) (int, error) {
	if b.end {
		if b.eof {
			return 0, io.EOF
		}
		return 0, errBodyClosed
	}
	n, err := b.rc.Read(p)
	if err == io.EOF {
		b.eof = true
		b.done(b.keep)
	} else if err != nil {
		b.done(false)
	}
	return n, err
}

var errBodyClosed = errors.New("h1: read on closed response body")

// Close ends the answer. Before its end, the connection is closed (net/
// http's body would read the rest, which for a stream may be minutes).
func (b *body) Close() error {
	if !b.end {
		b.done(false)
	}
	return nil
}

// done ends the exchange: the connection is kept or closed.
func (b *body) done(keep bool) {
	b.end = true
	if !b.stop() { // the request's end already closed the connection
		keep = false
	}
	c := b.c
	if keep && c.br.Buffered() == 0 {
		c.t.put(c)
		return
	}
	c.nc.Close()
}
