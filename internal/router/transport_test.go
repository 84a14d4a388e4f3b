package router

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/llm-ring/llm-ring/internal/config"
	"github.com/llm-ring/llm-ring/internal/h1"
)

// TestNoCompressionAsked: the router does not ask a replica for a
// compressed answer itself (it reads the answer's counts and relays it:
// compression would only be undone here), and forwards a client's own
// Accept-Encoding unchanged.
func TestNoCompressionAsked(t *testing.T) {
	h := newHarness(t, "llm-aware", 1)
	seen := make(chan string, 2)
	up := h.fakes[0]
	up.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Get("Accept-Encoding")
		up.serve(w, r)
	})
	client := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	for _, ae := range []string{"", "br"} {
		req, _ := http.NewRequest(http.MethodPost, h.srv.URL+"/v1/chat/completions", strings.NewReader(chatBody("hi", false)))
		if ae != "" {
			req.Header.Set("Accept-Encoding", ae)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if got := <-seen; got != ae {
			t.Errorf("client Accept-Encoding %q: the replica saw %q", ae, got)
		}
	}
}

// TestUpstreamClient: the router's own HTTP/1.1 client by default (Go's
// Transport behind it for https), Go's alone with upstream.client: net/http.
func TestUpstreamClient(t *testing.T) {
	cfg := testConfig(t, "llm-aware", nil)
	own, ok := newTransport(cfg).(*h1.Transport)
	if !ok {
		t.Fatalf("default upstream client %T, want *h1.Transport", newTransport(cfg))
	}
	if std, ok := own.Fallback.(*http.Transport); !ok || !std.DisableCompression {
		t.Errorf("h1 fallback %T, want a *http.Transport without compression", own.Fallback)
	}
	if own.ResponseHeaderTimeout != cfg.Upstream.ResponseTimeout.D() || own.DialTimeout != cfg.Upstream.DialTimeout.D() {
		t.Errorf("h1 timeouts %v/%v, want the upstream settings", own.ResponseHeaderTimeout, own.DialTimeout)
	}
	cfg.Upstream.Client = config.ClientNetHTTP
	if _, ok := newTransport(cfg).(*http.Transport); !ok {
		t.Errorf("upstream.client net/http: %T, want *http.Transport", newTransport(cfg))
	}
}
