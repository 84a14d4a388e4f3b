package router

import (
	"io"
	"net/http"
	"strings"
	"testing"
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
