package main

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

// The bare proxy on a server loop of its own (bare-own): the same
// ReverseProxy and h1 client as bare-h1, but instead of net/http's server a
// minimal HTTP/1.1 loop — one goroutine per connection reading requests
// with net/http's parser (http.ReadRequest) and answering through a small
// ResponseWriter on a pooled bufio.Writer, flushed when the handler returns
// or flushes. It is a measurement, not a server: it has no timeouts, no
// header or body limits, no chunked request bodies, no 100-continue and no
// HTTP/1.0 keep-alive rules; it does keep net/http's per-request cost of
// noticing a client that goes away (the background read below). What it costs per request is therefore a lower
// bound on what a server loop of the router's own could cost (issue 21:
// net/http's server is most of bare-h1's CPU); what it saves against
// bare-h1 is about the most such a loop could save.

var ownWriters = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 8<<10) }}

// runOwn serves the bare proxy's handler (bareHandler) on addr with the
// minimal loop until the process is killed.
func runOwn(addr string, replicas []string) error {
	h, err := bareHandler(replicas, true)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		go serveOwn(c, h)
	}
}

// serveOwn answers the requests of one connection in turn. As net/http
// does, each request's context is cancelled when its client goes away: once
// its body has been read to the end, a background read of one byte watches
// the connection (a byte that comes is the next request's first, kept for
// it; an error ends the request), and it is stopped, by a read deadline in
// the past, before the next request is read.
func serveOwn(c net.Conn, h http.Handler) {
	defer c.Close()
	wc := &watchConn{Conn: c, done: make(chan struct{}, 1)}
	br := bufio.NewReaderSize(wc, 4<<10)
	bw := ownWriters.Get().(*bufio.Writer)
	bw.Reset(c)
	defer func() { bw.Reset(nil); ownWriters.Put(bw) }()
	w := &ownWriter{bw: bw, h: http.Header{}}
	remote := c.RemoteAddr().String()
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		ctx, cancel := context.WithCancel(context.Background())
		req = req.WithContext(ctx)
		req.RemoteAddr = remote
		req.Body = &watchBody{ReadCloser: req.Body, start: func() { wc.watch(cancel) }}
		w.reset(req)
		h.ServeHTTP(w, req)
		io.Copy(io.Discard, req.Body) // what the handler left, so the next request starts at its head
		err = w.finish()
		wc.stop()
		cancel()
		if err != nil || req.Close {
			return
		}
	}
}

// watchConn is the connection with its background read.
type watchConn struct {
	net.Conn
	b       [1]byte
	has     bool // b holds the next request's first byte
	running bool
	done    chan struct{}
}

func (c *watchConn) Read(p []byte) (int, error) {
	if c.has && len(p) > 0 {
		p[0], c.has = c.b[0], false
		return 1, nil
	}
	return c.Conn.Read(p)
}

// watch starts the background read; cancel ends the request if the
// client goes away.
func (c *watchConn) watch(cancel context.CancelFunc) {
	if c.running {
		return
	}
	c.running = true
	go func() {
		n, err := c.Conn.Read(c.b[:])
		c.has = n == 1
		var ne net.Error
		if err != nil && !(errors.As(err, &ne) && ne.Timeout()) {
			cancel()
		}
		c.done <- struct{}{}
	}()
}

// stop ends the background read, if one runs, and waits for it.
func (c *watchConn) stop() {
	if !c.running {
		return
	}
	c.Conn.SetReadDeadline(time.Unix(1, 0))
	<-c.done
	c.Conn.SetReadDeadline(time.Time{})
	c.running = false
}

// watchBody starts the watch when the request's body has been read to
// its end.
type watchBody struct {
	io.ReadCloser
	start func()
}

func (b *watchBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.start()
	}
	return n, err
}

// ownWriter is the loop's http.ResponseWriter and http.Flusher: the head
// goes out with the first write, the body with a Content-Length as it
// comes, without one chunked.
type ownWriter struct {
	bw      *bufio.Writer
	h       http.Header
	status  int
	wrote   bool // head written
	chunked bool
	head    bool // a HEAD request: no body
	err     error
}

func (w *ownWriter) reset(req *http.Request) {
	clear(w.h)
	w.status, w.wrote, w.chunked, w.head, w.err = 0, false, false, req.Method == http.MethodHead, nil
}

func (w *ownWriter) Header() http.Header { return w.h }

func (w *ownWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
}

// writeHead writes the status line and the headers.
func (w *ownWriter) writeHead() {
	if w.wrote {
		return
	}
	w.wrote = true
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if w.h.Get("Content-Length") == "" && !w.head && w.status >= 200 && w.status != http.StatusNoContent && w.status != http.StatusNotModified {
		w.chunked = true
		w.h.Set("Transfer-Encoding", "chunked")
	}
	var line [64]byte
	b := append(line[:0], "HTTP/1.1 "...)
	b = strconv.AppendInt(b, int64(w.status), 10)
	b = append(b, ' ')
	b = append(b, http.StatusText(w.status)...)
	b = append(b, "\r\n"...)
	w.bw.Write(b)
	w.h.Write(w.bw)
	w.bw.WriteString("\r\n")
}

func (w *ownWriter) Write(p []byte) (int, error) {
	w.writeHead()
	if w.err != nil {
		return 0, w.err
	}
	if w.head || len(p) == 0 {
		return len(p), nil
	}
	if w.chunked {
		var n [16]byte
		w.bw.Write(strconv.AppendInt(n[:0], int64(len(p)), 16))
		w.bw.WriteString("\r\n")
	}
	_, w.err = w.bw.Write(p)
	if w.chunked && w.err == nil {
		_, w.err = w.bw.WriteString("\r\n")
	}
	if w.err != nil {
		return 0, w.err
	}
	return len(p), nil
}

func (w *ownWriter) Flush() {
	w.writeHead()
	if w.err == nil {
		w.err = w.bw.Flush()
	}
}

// finish ends the answer (the last chunk) and flushes it.
func (w *ownWriter) finish() error {
	w.writeHead()
	if w.chunked && w.err == nil {
		_, w.err = w.bw.WriteString("0\r\n\r\n")
	}
	if w.err == nil {
		w.err = w.bw.Flush()
	}
	return w.err
}
