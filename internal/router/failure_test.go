package router

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"os"
	"reflect"
	"slices"
	"testing"
)

// TestFailureLabels: the labels are metric label values and log fields
// that dashboards read; they must not change.
func TestFailureLabels(t *testing.T) {
	want := map[failure][2]any{
		failDial: {"dial", 502}, failStatus: {"status", 0}, failTimeout: {"timeout", 504}, failStall: {"stall", 504},
		failBroken: {"broken", 502}, failCut: {"cut", 503}, failClient: {"client", 499},
	}
	for k := failNone + 1; int(k) < len(failures); k++ {
		if w, ok := want[k]; !ok || k.String() != w[0] || failures[k].status != w[1] {
			t.Errorf("failure %d: %q %d, want %v", k, k.String(), failures[k].status, w)
		}
	}
	if len(failures)-1 != len(want) {
		t.Errorf("%d failures, want %d", len(failures)-1, len(want))
	}
}

// TestClassify: one decision of what ended a request, before and after
// the answer's headers.
func TestClassify(t *testing.T) {
	r := &Router{}
	dial := &net.OpError{Op: "dial", Err: errors.New("connection refused")}
	timeout := fmt.Errorf("awaiting headers: %w", os.ErrDeadlineExceeded)
	live := context.Background()
	gone, cancel := context.WithCancel(live)
	cancel()
	cases := []struct {
		ctx     context.Context
		err     error
		sent    bool
		cut     bool
		want    failure
		comment string
	}{
		{live, dial, false, false, failDial, "never reached"},
		{live, timeout, false, false, failTimeout, "no headers in time"},
		{live, errUpstreamIdle, false, false, failStall, "stalled before the body"},
		{live, errUpstreamIdle, true, false, failStall, "stalled mid-answer"},
		{live, timeout, true, false, failBroken, "a timeout mid-answer is a broken connection"},
		{live, errors.New("unexpected EOF"), false, false, failBroken, "anything else"},
		{live, nil, true, false, failBroken, "ended early without an error"},
		{gone, dial, false, false, failClient, "the client left first"},
		{gone, nil, true, true, failCut, "cut by shutdown"},
	}
	for _, c := range cases {
		r.cut.Store(c.cut)
		if got := r.classify(c.ctx, c.err, c.sent); got != c.want {
			t.Errorf("%s: %v, want %v", c.comment, got, c.want)
		}
	}
}

// TestSetXForwardedAgrees: setXForwarded sets the headers
// httputil.ProxyRequest.SetXForwarded sets, and the empty User-Agent
// ReverseProxy sets when the client sent none.
func TestSetXForwardedAgrees(t *testing.T) {
	for _, remote := range []string{"10.1.2.3:4567", "[::1]:80", "not-an-address"} {
		for _, prior := range [][]string{nil, {"1.1.1.1"}, {"1.1.1.1, 2.2.2.2", "3.3.3.3"}} {
			for _, secure := range []bool{false, true} {
				for _, ua := range []string{"", "curl/8"} {
					in := httptest.NewRequest(http.MethodPost, "http://router.example/v1/chat/completions", nil)
					in.RemoteAddr, in.Host = remote, "router.example:8080"
					if secure {
						in.TLS = &tls.ConnectionState{}
					}
					mk := func() *http.Request {
						out := in.Clone(in.Context())
						out.Header = http.Header{"Content-Type": {"application/json"}}
						if prior != nil {
							out.Header["X-Forwarded-For"] = slices.Clone(prior)
						}
						if ua != "" {
							out.Header.Set("User-Agent", ua)
						}
						return out
					}
					want, got := mk(), mk()
					(&httputil.ProxyRequest{In: in, Out: want}).SetXForwarded()
					if _, ok := want.Header["User-Agent"]; !ok {
						want.Header.Set("User-Agent", "")
					}
					setXForwarded(got, in)
					if !reflect.DeepEqual(got.Header, want.Header) {
						t.Errorf("remote %q prior %q tls %t ua %q:\n got %v\nwant %v", remote, prior, secure, ua, got.Header, want.Header)
					}
				}
			}
		}
	}
}
