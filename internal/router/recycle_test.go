package router

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/llm-ring/llm-ring/internal/h1"
)

// TestRecycle: a flight goes back to the pool (zeroed) only when nothing can
// still reach it — forward returned, every attempt over a synchronous
// transport, no failover — and is left alone otherwise.
func TestRecycle(t *testing.T) {
	for _, tt := range []struct {
		name string
		edit func(f *flight)
		want bool
	}{
		{"one attempt, returned", func(f *flight) {}, true},
		{"aborted (ReverseProxy's panic)", func(f *flight) { f.returned = false }, false},
		{"a transport that may hold it", func(f *flight) { f.shared = true }, false},
		{"failed over", func(f *flight) { f.failed = []string{"llm-0"}; f.tries = 2 }, false},
		{"a retry pending", func(f *flight) { f.next = &retryTo{} }, false},
	} {
		f := &flight{path: "/v1/chat/completions", status: 200, tries: 1, returned: true, body: []byte("{}")}
		tt.edit(f)
		recycle(f)
		if got := f.path == ""; got != tt.want {
			t.Errorf("%s: recycled %t, want %t", tt.name, got, tt.want)
		}
		if tt.want && (f.status != 0 || f.body != nil || f.returned) {
			t.Errorf("%s: a recycled flight is not zero: %+v", tt.name, f)
		}
	}
}

// TestSynchronousTransport: the replicas' own client says it is done with a
// plain http request once its answer is closed, not with what it hands to
// Go's Transport (https); Go's Transport is never taken as synchronous.
func TestSynchronousTransport(t *testing.T) {
	tr := &h1.Transport{}
	req := func(u string) *http.Request {
		pu, _ := url.Parse(u)
		return &http.Request{Method: http.MethodPost, URL: pu, Header: http.Header{}}
	}
	if !tr.Synchronous(req("http://10.0.0.1:8080/v1/chat/completions")) {
		t.Error("h1 on http: want synchronous")
	}
	if tr.Synchronous(req("https://10.0.0.1:8443/v1/chat/completions")) {
		t.Error("h1 on https (Go's Transport): want not synchronous")
	}
	var rt http.RoundTripper = &http.Transport{}
	if _, ok := rt.(synchronous); ok {
		t.Error("Go's Transport taken as synchronous")
	}
}
