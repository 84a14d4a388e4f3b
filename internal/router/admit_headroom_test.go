package router

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/llm-ring/llm-ring/internal/admission"
	"github.com/llm-ring/llm-ring/internal/config"
	"github.com/llm-ring/llm-ring/internal/replicaset"
)

// headroom is the work ledger's multiplier of the first pool (1: none).
func (a *admitter) headroom() float64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, p := range a.order {
		return p.c.Ledger().Headroom()
	}
	return 1
}

// TestAdmissionHeadroomLive: the router feeds the headroom (work_target)
// as the simulator does: a streamed answer's first byte well within the
// target (0.5 of a 10 s default SLO) raises the multiplier to e^(0.05/9);
// with a default TPOT SLO of 1 µs the answer's three tokens over 20 ms
// are over it and the decode guard takes it back to 1 (admitter.done's
// Ledger.Decoded); without one it stays.
// slowTokens is a replica streaming three tokens 10 ms apart, then the
// end with llama.cpp's timings.
func slowTokens(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range 3 {
			fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"w%d \"}}]}\n\n", i)
			w.(http.Flusher).Flush()
			time.Sleep(10 * time.Millisecond)
		}
		fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}],\"timings\":{\"cache_n\":0,\"prompt_n\":40,\"predicted_n\":3}}\n\ndata: [DONE]\n\n")
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestAdmissionHeadroomLive(t *testing.T) {
	srv := slowTokens(t)
	for _, tpot := range []time.Duration{0, time.Microsecond} {
		h := newHarness(t, "least-loaded", 1, func(c *config.Router) {
			c.Admission = config.Admission{Enabled: true, QueueThreshold: 100, WorkModel: admission.WorkPrefill,
				WorkTarget: 0.5, DefaultSLOTTFT: config.Duration(10 * time.Second), DefaultSLOTPOT: config.Duration(tpot)}
		})
		h.rt.SetReplicas([]replicaset.Replica{{Name: "llm-0", URL: srv.URL}})
		req, _ := http.NewRequest(http.MethodPost, h.srv.URL+"/v1/chat/completions", strings.NewReader(chatBody("request 1", true)))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		want := math.Exp(0.05 / 9)
		if tpot > 0 {
			want = 1
		}
		waitFor(t, "the headroom", func() bool { return math.Abs(h.rt.adm.headroom()-want) < 1e-12 })
	}
}
