package router

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/llm-ring/llm-ring/internal/admission"
	"github.com/llm-ring/llm-ring/internal/config"
	"github.com/llm-ring/llm-ring/internal/replicaset"
)

// decodeTPOT is the first pool's learned time per output token on llm-0
// with one more request (the decode term's line; ok false while unknown).
func (a *admitter) decodeTPOT() (time.Duration, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, p := range a.order {
		ns, ok := p.c.Ledger().DecodeTPOT("llm-0", 0)
		return time.Duration(ns), ok
	}
	return 0, false
}

// TestAdmissionDecodeLive: the router teaches the decode term's line
// (decode_share) from its answers as the simulator does: after
// LedgerMinAnswers streamed answers of three tokens 10 ms apart the line
// predicts a TPOT of that order, and not before.
func TestAdmissionDecodeLive(t *testing.T) {
	srv := slowTokens(t)
	h := newHarness(t, "least-loaded", 1, func(c *config.Router) {
		c.Admission = config.Admission{Enabled: true, QueueThreshold: 100, WorkModel: admission.WorkPrefill,
			DecodeShare: 0.8, DefaultSLOTTFT: config.Duration(10 * time.Second), DefaultSLOTPOT: config.Duration(time.Second)}
	})
	h.rt.SetReplicas([]replicaset.Replica{{Name: "llm-0", URL: srv.URL}})
	for i := range admission.LedgerMinAnswers {
		if _, ok := h.rt.adm.decodeTPOT(); ok {
			t.Fatalf("the line is known after %d answers, want %d", i, admission.LedgerMinAnswers)
		}
		req, _ := http.NewRequest(http.MethodPost, h.srv.URL+"/v1/chat/completions", strings.NewReader(chatBody(fmt.Sprintf("request %d", i), true)))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		// the answer is settled after the client has its end: wait for it
		waitFor(t, "the answer settled", func() bool { return h.rt.inflight.Load() == 0 })
	}
	var tpot time.Duration
	waitFor(t, "the decode line", func() bool { d, ok := h.rt.adm.decodeTPOT(); tpot = d; return ok })
	if tpot < 2*time.Millisecond || tpot > 200*time.Millisecond {
		t.Fatalf("learned TPOT %v, want about 10 ms (three tokens 10 ms apart)", tpot)
	}
}
