package router

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/llm-ring/llm-ring/internal/admission"
	"github.com/llm-ring/llm-ring/internal/config"
	"github.com/llm-ring/llm-ring/internal/replicaset"
)

// prefilling is the work ledger's prefilling tokens of llm-0 and its
// in-flight tokens over all pools.
func (a *admitter) prefilling() (prefilling, inflight int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, p := range a.order {
		l := p.c.Ledger()
		prefilling += l.Prefilling("llm-0")
		in, _ := l.Tokens("llm-0", 0)
		inflight += in
	}
	return prefilling, inflight
}

// TestAdmissionFirstByte: the router tells the work ledger of an answer's
// first byte (the observer), as the simulator tells it of the model's
// first token: a streamed request's entry counts as prefilling until its
// replica sends the first event, then no longer, while it stays in flight
// until the answer ends.
func TestAdmissionFirstByte(t *testing.T) {
	got, first, rest := make(chan struct{}), make(chan struct{}), make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body)
		got <- struct{}{}
		<-first
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"w0 \"}}]}\n\n")
		w.(http.Flusher).Flush()
		<-rest
		fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}],\"timings\":{\"cache_n\":0,\"prompt_n\":40,\"predicted_n\":1}}\n\ndata: [DONE]\n\n")
	}))
	t.Cleanup(srv.Close)
	h := newHarness(t, "least-loaded", 1, func(c *config.Router) {
		c.Admission = config.Admission{Enabled: true, QueueThreshold: 100, WorkModel: admission.WorkPrefill}
	})
	var once sync.Once // a failed test must not leave the handler waiting (the servers' Close waits for it)
	t.Cleanup(func() { once.Do(func() { close(first) }); close(rest) })
	h.rt.SetReplicas([]replicaset.Replica{{Name: "llm-0", URL: srv.URL}})
	adm := h.rt.adm
	done := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, h.srv.URL+"/v1/chat/completions", strings.NewReader(chatBody("request 1", true)))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			done <- -1
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	<-got
	waitFor(t, "the entry", func() bool { n, _, _, _ := adm.ledger(0); return n == 1 })
	if pf, in := adm.prefilling(); pf <= 0 || pf != in {
		t.Fatalf("before the first byte: %d prefilling, %d in flight; want all of it prefilling", pf, in)
	}
	once.Do(func() { close(first) })
	waitFor(t, "the prefill left", func() bool { pf, _ := adm.prefilling(); return pf == 0 })
	if n, has, in, _ := adm.ledger(1); n != 1 || !has || in <= 0 {
		t.Fatalf("after the first byte: %d entries (its own %v), %d in flight; want it still in flight", n, has, in)
	}
	rest <- struct{}{}
	if st := <-done; st != 200 {
		t.Fatalf("status %d", st)
	}
	waitFor(t, "the ledger empty", func() bool {
		n, _, in, _ := adm.ledger(0)
		pf, _ := adm.prefilling()
		return n == 0 && in == 0 && pf == 0
	})
}

// TestAdmissionFirstByteFlight: the endpoint picker's Flight tells the
// work ledger of the answer's first byte too (ResponseBody), as the
// proxy's observer does: prefilling until the first piece of the body,
// then in flight only, then gone at Finish.
func TestAdmissionFirstByteFlight(t *testing.T) {
	h := newHarness(t, "least-loaded", 1, func(c *config.Router) {
		c.Admission = config.Admission{Enabled: true, QueueThreshold: 100, WorkModel: admission.WorkPrefill}
	})
	adm := h.rt.adm
	fl, err := h.rt.NewFlight(context.Background(), http.MethodPost, "/v1/chat/completions", http.Header{},
		[]byte(chatBody("request 1", true)))
	if err != nil {
		t.Fatal(err)
	}
	if err := fl.Admit(http.Header{}); err != nil {
		t.Fatal(err)
	}
	if err := fl.Route(); err != nil {
		t.Fatal(err)
	}
	if pf, in := adm.prefilling(); pf <= 0 || pf != in {
		t.Fatalf("routed, no answer yet: %d prefilling, %d in flight; want all of it prefilling", pf, in)
	}
	fl.ResponseHeaders(http.StatusOK, "text/event-stream", -1)
	if pf, _ := adm.prefilling(); pf <= 0 {
		t.Fatalf("headers only: %d prefilling; the first byte has not come", pf)
	}
	fl.ResponseBody([]byte("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"w0 \"}}]}\n\n"), false)
	if pf, in := adm.prefilling(); pf != 0 || in <= 0 {
		t.Fatalf("after the first event: %d prefilling, %d in flight; want none prefilling, still in flight", pf, in)
	}
	fl.ResponseBody([]byte("data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n"), true)
	fl.Finish(context.Background())
	if n, _, in, _ := adm.ledger(0); n != 0 || in != 0 {
		t.Fatalf("after Finish: %d entries, %d in flight", n, in)
	}
}
