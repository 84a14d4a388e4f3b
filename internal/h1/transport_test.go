package h1

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func newTransport() *Transport {
	return &Transport{DialTimeout: 2 * time.Second, IdleTimeout: time.Minute,
		Fallback: &http.Transport{DisableCompression: true}}
}

// countConns counts the connections a test server accepted.
func countConns(srv *httptest.Server) *atomic.Int64 {
	var n atomic.Int64
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			n.Add(1)
		}
	}
	return &n
}

func post(t *testing.T, tr http.RoundTripper, url, body string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

// TestRoundTripKeepsConnections: answers of known length and chunked ones
// come through whole, and one connection carries them all.
func TestRoundTripKeepsConnections(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.URL.Query().Get("chunked") != "" {
			w.Write([]byte("echo:"))
			w.(http.Flusher).Flush()
		}
		fmt.Fprintf(w, "%s %s %s", r.Method, r.URL.RequestURI(), b)
	}))
	conns := countConns(srv)
	srv.Start()
	defer srv.Close()
	tr := newTransport()
	for i := 0; i < 20; i++ {
		q := ""
		if i%2 == 1 {
			q = "?chunked=1"
		}
		resp, got := post(t, tr, srv.URL+"/v1/x"+q, fmt.Sprint("body", i))
		want := fmt.Sprintf("POST /v1/x%s body%d", q, i)
		if q != "" {
			want = "echo:" + want
		}
		if resp.StatusCode != 200 || got != want {
			t.Fatalf("request %d: %d %q, want 200 %q", i, resp.StatusCode, got, want)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("20 sequential requests used %d connections, want 1", n)
	}
}

// TestWireMatchesNetHTTP: what the replica receives is what Go's
// Transport sends for the same request: method, URI, host, every header
// and value, the body, and a Content-Length from the request's own length
// rather than its header's (a router that rewrote the body).
func TestWireMatchesNetHTTP(t *testing.T) {
	got := make(chan *http.Request, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(b))
		got <- r
	}))
	defer srv.Close()
	cases := []func() *http.Request{
		func() *http.Request {
			r, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/chat/completions?a=b&c=%20d", strings.NewReader(`{"x":1}`))
			r.Header["X-Multi"] = []string{"one", "two"}
			r.Header.Set("Content-Length", "999") // stale: the body was rewritten
			r.Header.Set("Authorization", "Bearer t")
			r.Header["User-Agent"] = []string{""} // ReverseProxy's "send none"
			return r
		},
		func() *http.Request {
			r, _ := http.NewRequest(http.MethodGet, srv.URL+"/health", nil)
			return r // Go's own User-Agent, no Content-Length
		},
		func() *http.Request {
			r, _ := http.NewRequest(http.MethodPost, srv.URL+"/empty", http.NoBody)
			r.Header.Set("User-Agent", "client/1")
			r.Host = "virtual.example"
			return r
		},
	}
	for i, mk := range cases {
		var seen [2]*http.Request
		for j, tr := range []http.RoundTripper{newTransport(), &http.Transport{DisableCompression: true}} {
			resp, err := tr.RoundTrip(mk())
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			seen[j] = <-got
		}
		a, b := seen[0], seen[1]
		ab, _ := io.ReadAll(a.Body)
		bb, _ := io.ReadAll(b.Body)
		if a.Method != b.Method || a.RequestURI != b.RequestURI || a.Host != b.Host ||
			a.ContentLength != b.ContentLength || !bytes.Equal(ab, bb) || a.Proto != b.Proto {
			t.Errorf("case %d: h1 sent %s %s %s host %q length %d body %q; net/http %s %s %s host %q length %d body %q", i,
				a.Method, a.RequestURI, a.Proto, a.Host, a.ContentLength, ab, b.Method, b.RequestURI, b.Proto, b.Host, b.ContentLength, bb)
		}
		if fa, fb := fmt.Sprint(a.Header), fmt.Sprint(b.Header); fa != fb {
			t.Errorf("case %d: headers differ:\n h1       %s\n net/http %s", i, fa, fb)
		}
	}
}

// rawServer answers each connection with serve, over a plain listener.
func rawServer(t *testing.T, serve func(c net.Conn, br *bufio.Reader)) (url string, conns *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	conns = new(atomic.Int64)
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				serve(c, bufio.NewReader(c))
			}()
		}
	}()
	return "http://" + ln.Addr().String(), conns
}

// readReq reads one request and its body.
func readReq(br *bufio.Reader) (*http.Request, error) {
	r, err := http.ReadRequest(br)
	if err != nil {
		return nil, err
	}
	io.Copy(io.Discard, r.Body)
	return r, nil
}

// TestClosedIdleConnectionIsRetried: a replica that closed a kept-alive
// connection (without saying so) while it was idle costs nothing: the
// request goes again on a fresh connection.
func TestClosedIdleConnectionIsRetried(t *testing.T) {
	url, conns := rawServer(t, func(c net.Conn, br *bufio.Reader) {
		if _, err := readReq(br); err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		// then close, as a server whose keep-alive timeout passed
	})
	tr := newTransport()
	for i := 0; i < 3; i++ {
		resp, got := post(t, tr, url+"/x", "b")
		if resp.StatusCode != 200 || got != "ok" {
			t.Fatalf("request %d: %d %q", i, resp.StatusCode, got)
		}
		time.Sleep(20 * time.Millisecond) // let the close land before the next request
	}
	if n := conns.Load(); n < 3 {
		t.Errorf("%d connections for 3 requests on a server that closes each", n)
	}
	// Many stale connections at once (a replica that restarted): one
	// failure drops them all, and the retry dials rather than taking
	// another stale one.
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() { // (the stale ones' answers: served before the close)
			defer wg.Done()
			req, _ := http.NewRequest(http.MethodPost, url+"/x", strings.NewReader("b"))
			if resp, err := tr.RoundTrip(req); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			} else {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	time.Sleep(20 * time.Millisecond)
	for i := 0; i < 8; i++ {
		if resp, got := post(t, tr, url+"/x", "b"); resp.StatusCode != 200 || got != "ok" {
			t.Fatalf("after a restart, request %d: %d %q", i, resp.StatusCode, got)
		}
	}
}

// TestNoRetryOnceTheAnswerBegan: a connection that breaks after the
// answer began is the replica's failure, not a stale connection: the
// error comes back, and the request is not sent twice.
func TestNoRetryOnceTheAnswerBegan(t *testing.T) {
	var reqs atomic.Int64
	url, _ := rawServer(t, func(c net.Conn, br *bufio.Reader) {
		for {
			if _, err := readReq(br); err != nil {
				return
			}
			if reqs.Add(1) == 1 {
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
				continue
			}
			io.WriteString(c, "HTTP/1.1 20") // a torn head, then the connection ends
			return
		}
	})
	tr := newTransport()
	post(t, tr, url+"/x", "b")
	req, _ := http.NewRequest(http.MethodPost, url+"/x", strings.NewReader("b"))
	if _, err := tr.RoundTrip(req); err == nil {
		t.Fatal("a torn answer came back without an error")
	}
	if n := reqs.Load(); n != 2 {
		t.Errorf("the replica saw %d requests, want 2 (the torn one not sent again)", n)
	}
}

// TestInterimAnswersSkipped: a 100 Continue before the answer is not the
// answer.
func TestInterimAnswersSkipped(t *testing.T) {
	url, _ := rawServer(t, func(c net.Conn, br *bufio.Reader) {
		if _, err := readReq(br); err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"+
			"HTTP/1.1 201 Created\r\nContent-Length: 4\r\n\r\ndone")
	})
	resp, got := post(t, newTransport(), url+"/x", "b")
	if resp.StatusCode != 201 || got != "done" {
		t.Errorf("got %d %q, want 201 \"done\"", resp.StatusCode, got)
	}
}

// TestConnectionCloseNotKept: an answer that says Connection: close (or
// an HTTP/1.0 one) ends its connection.
func TestConnectionCloseNotKept(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "close")
		io.WriteString(w, "bye")
	}))
	conns := countConns(srv)
	srv.Start()
	defer srv.Close()
	tr := newTransport()
	for i := 0; i < 3; i++ {
		if _, got := post(t, tr, srv.URL, "b"); got != "bye" {
			t.Fatalf("got %q", got)
		}
	}
	if n := conns.Load(); n != 3 {
		t.Errorf("%d connections for 3 Connection: close answers, want 3", n)
	}
}

// TestStreamEventsArriveAsSent: each event of a stream is readable as
// soon as the replica wrote it, before the next is written.
func TestStreamEventsArriveAsSent(t *testing.T) {
	next := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i := 0; i < 3; i++ {
			fmt.Fprintf(w, "data: %d\n\n", i)
			w.(http.Flusher).Flush()
			<-next
		}
	}))
	defer srv.Close()
	req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("b"))
	resp, err := newTransport().RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	for i := 0; i < 3; i++ {
		line, err := br.ReadString('\n')
		if err != nil || line != fmt.Sprintf("data: %d\n", i) {
			t.Fatalf("event %d: %q %v", i, line, err)
		}
		br.ReadString('\n')
		next <- struct{}{}
	}
}

// TestEarlyCloseEndsTheConnection: closing an answer before its end does
// not wait for the rest (a stream's rest may be minutes), and the
// connection is not used again.
func TestEarlyCloseEndsTheConnection(t *testing.T) {
	gone := make(chan struct{})
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/short" {
			io.WriteString(w, "ok")
			return
		}
		io.WriteString(w, "data: 0\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done(): // the router closed the connection
			close(gone)
		case <-time.After(10 * time.Second):
		}
	}))
	conns := countConns(srv)
	srv.Start()
	defer srv.Close()
	tr := newTransport()
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/stream", strings.NewReader("b"))
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Read(make([]byte, 4))
	resp.Body.Close() // returns at once (it does not read the rest)
	select {
	case <-gone:
	case <-time.After(5 * time.Second):
		t.Fatal("the replica's connection stayed open after the answer was closed")
	}
	post(t, tr, srv.URL+"/short", "b")
	if n := conns.Load(); n != 2 {
		t.Errorf("%d connections, want 2 (the closed one not reused)", n)
	}
}

// TestCancelEndsTheWait: the request's end (its client gone) ends the
// wait for the head, and the wait for the body's next bytes.
func TestCancelEndsTheWait(t *testing.T) {
	release := make(chan struct{})
	gone := make(chan string, 2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body) // (net/http watches the connection once the body is read)
		if r.URL.Path == "/body" {
			io.WriteString(w, "data: 0\n\n")
			w.(http.Flusher).Flush()
		}
		select {
		case <-release:
		case <-r.Context().Done():
			gone <- r.URL.Path
		}
	}))
	defer srv.Close()
	defer close(release)
	tr := newTransport()
	for _, path := range []string{"/head", "/body"} {
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+path, strings.NewReader("b"))
		time.AfterFunc(50*time.Millisecond, cancel)
		resp, err := tr.RoundTrip(req)
		if path == "/head" {
			if !errors.Is(err, context.Canceled) {
				t.Errorf("%s: err %v, want context.Canceled", path, err)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		_, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		if err == nil {
			t.Errorf("%s: the body ended without an error after the request's end", path)
		}
	}
	for _, path := range []string{"/head", "/body"} {
		select {
		case <-gone:
		case <-time.After(5 * time.Second):
			t.Fatalf("the replica did not see the request to %s end", path)
		}
	}
}

// TestResponseHeaderTimeout: no head within the timeout is net/http's
// error, and the connection's deadline is cleared for a body that then
// takes longer than the timeout.
func TestResponseHeaderTimeout(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow-head" {
			time.Sleep(300 * time.Millisecond)
			return
		}
		io.WriteString(w, "a")
		w.(http.Flusher).Flush()
		time.Sleep(300 * time.Millisecond) // longer than the head's timeout
		io.WriteString(w, "b")
	}))
	defer srv.Close()
	tr := newTransport()
	tr.ResponseHeaderTimeout = 100 * time.Millisecond
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/slow-head", strings.NewReader("b"))
	if _, err := tr.RoundTrip(req); !errors.Is(err, errHeaderTimeout) {
		t.Errorf("slow head: err %v, want %v", err, errHeaderTimeout)
	}
	if _, got := post(t, tr, srv.URL+"/slow-body", "b"); got != "ab" {
		t.Errorf("slow body: %q, want \"ab\"", got)
	}
}

// TestFallback: https, and a body of unknown length, go to the fallback.
func TestFallback(t *testing.T) {
	tls := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s %v", b, r.TransferEncoding)
	}))
	defer tls.Close()
	tr := newTransport()
	tr.Fallback = tls.Client().Transport
	if _, got := post(t, tr, tls.URL, "secure"); got != "secure []" {
		t.Errorf("https: %q", got)
	}
	req, _ := http.NewRequest(http.MethodPost, tls.URL, io.MultiReader(strings.NewReader("un"), strings.NewReader("known")))
	req.ContentLength = -1
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "unknown [chunked]" {
		t.Errorf("unknown length: %q", b)
	}
}

// TestIdleLimits: a connection idle past IdleTimeout is not used again,
// and a host keeps at most MaxIdlePerHost.
func TestIdleLimits(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}))
	conns := countConns(srv)
	srv.Start()
	defer srv.Close()
	tr := newTransport()
	tr.IdleTimeout = time.Nanosecond
	post(t, tr, srv.URL, "a")
	time.Sleep(time.Millisecond)
	post(t, tr, srv.URL, "b")
	if n := conns.Load(); n != 2 {
		t.Errorf("IdleTimeout 1ns: %d connections for 2 requests, want 2", n)
	}
	tr = newTransport()
	tr.MaxIdlePerHost = 2
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("c"))
			if resp, err := tr.RoundTrip(req); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	}
	wg.Wait()
	tr.mu.Lock()
	kept := len(tr.idle[hostPort(&http.Request{URL: mustURL(srv.URL)})])
	tr.mu.Unlock()
	if kept > 2 {
		t.Errorf("%d idle connections kept, MaxIdlePerHost 2", kept)
	}
	tr.CloseIdleConnections()
}

// TestConcurrentRequests: many requests at once, each answer its own
// (run with -race).
func TestConcurrentRequests(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Write(b)
	}))
	defer srv.Close()
	tr := newTransport()
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				want := fmt.Sprintf("g%d-%d", g, i)
				req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(want))
				resp, err := tr.RoundTrip(req)
				if err != nil {
					errs <- err
					return
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if string(b) != want {
					errs <- fmt.Errorf("got %q, want %q", b, want)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func mustURL(s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		panic(err)
	}
	return u
}

// TestSweepClosesOtherHosts: an idle connection to a host that gets no
// more requests (a replica gone from the set) is closed once it expired,
// when any connection goes back to the pool.
func TestSweepClosesOtherHosts(t *testing.T) {
	closed := make(chan struct{})
	gone := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	gone.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateClosed {
			close(closed)
		}
	}
	gone.Start()
	defer gone.Close()
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer other.Close()
	tr := newTransport()
	tr.IdleTimeout = 20 * time.Millisecond
	post(t, tr, gone.URL, "a")
	time.Sleep(50 * time.Millisecond)
	post(t, tr, other.URL, "b")
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("the expired idle connection to the other host was not closed")
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if _, ok := tr.idle[hostPort(&http.Request{URL: mustURL(gone.URL)})]; ok {
		t.Error("the swept host is still in the pool")
	}
}

// TestZeroValue: a zero Transport carries plain http itself and the rest
// through http.DefaultTransport.
func TestZeroValue(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer srv.Close()
	var tr Transport
	if _, got := post(t, &tr, srv.URL, "a"); got != "ok" {
		t.Errorf("plain: %q", got)
	}
	req, _ := http.NewRequest(http.MethodPost, srv.URL, io.MultiReader(strings.NewReader("b")))
	req.ContentLength = -1 // unknown length: the fallback's
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	tr.CloseIdleConnections()
}
