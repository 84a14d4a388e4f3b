package epp

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/llm-ring/llm-ring/internal/config"
	"github.com/llm-ring/llm-ring/internal/router"
)

// admissionConfig: admission on, a pool saturated at two requests in
// flight on one replica that reports nothing (queue threshold 1: one
// running, one waiting), a queue of three, two objectives.
func admissionConfig(t *testing.T, edit ...func(*config.Admission)) *config.Router {
	capacity := 3
	return testConfig(t, "least-loaded", func(c *config.Router) {
		c.Admission = config.Admission{Enabled: true, QueueThreshold: 1, QueueCapacity: &capacity,
			Objectives: map[string]int{"interactive": 10, "batch": -10}, DefaultPriority: -10}
		for _, e := range edit {
			e(&c.Admission)
		}
	})
}

// pending is a stream whose request phase was sent and whose first answer
// is awaited in the background (it may wait in the EPP's queue).
type pending struct {
	c   *call
	got chan *extprocv3.ProcessingResponse // the first answer; closed without one if the stream broke
}

// begin sends x's request phase (full duplex) without waiting for the EPP.
func (h *harness) begin(x exchange) *pending {
	h.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	h.t.Cleanup(cancel)
	st, err := extprocv3.NewExternalProcessorClient(h.conn).Process(ctx)
	if err != nil {
		h.t.Fatal(err)
	}
	c := &call{t: h.t, st: st, cancel: cancel}
	kv := map[string]string{":method": "POST", ":path": x.Path, ":authority": "gw", "content-type": "application/json"}
	for k, v := range x.Headers {
		kv[k] = v
	}
	c.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{Headers: hdrs(kv)}}})
	c.sendBody(x)
	p := &pending{c: c, got: make(chan *extprocv3.ProcessingResponse, 1)}
	go func() {
		if r, err := st.Recv(); err == nil {
			p.got <- r
		}
		close(p.got)
	}()
	return p
}

// dest waits for the first answer and returns its destination ("" for an
// immediate response, which is returned too).
func (p *pending) dest(t *testing.T) (string, *extprocv3.ImmediateResponse) {
	t.Helper()
	select {
	case r, ok := <-p.got:
		if !ok {
			t.Fatal("the stream ended without an answer")
		}
		if im := r.GetImmediateResponse(); im != nil {
			return "", im
		}
		for _, hv := range r.GetRequestHeaders().GetResponse().GetHeaderMutation().GetSetHeaders() {
			if hv.GetHeader().GetKey() == HeaderDestination {
				return string(hv.GetHeader().GetRawValue()), nil
			}
		}
		t.Fatalf("first answer %T carries no destination", r.GetResponse())
	case <-time.After(5 * time.Second):
		t.Fatal("no answer in 5 s")
	}
	return "", nil
}

// answered reports whether the first answer has come (without waiting).
func (p *pending) answered() bool { return len(p.got) > 0 }

// finish plays the rest of an admitted stream: the body answer (the
// request's body back), the upstream's answer, the stream's end.
func (p *pending) finish(t *testing.T) {
	t.Helper()
	for done := false; !done; {
		done = p.c.recv().GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse().GetEndOfStream()
	}
	p.c.answer(200, "application/json", "", answerJSON(0, 100, 4))
	p.c.close()
}

// metric reads one sample of the EPP's registry: name and, when set, the
// value of its outcome label.
func metric(t *testing.T, h *harness, name, outcome string) float64 {
	t.Helper()
	return sample(t, h.rt.Registry(), name, outcome)
}

func sample(t *testing.T, reg *prometheus.Registry, name, outcome string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if outcome != "" && (len(m.GetLabel()) == 0 || m.GetLabel()[0].GetValue() != outcome) {
				continue
			}
			if m.GetGauge() != nil {
				return m.GetGauge().GetValue()
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

func headerOf(im *extprocv3.ImmediateResponse) map[string]string {
	out := map[string]string{}
	for _, hv := range im.GetHeaders().GetSetHeaders() {
		out[hv.GetHeader().GetKey()] = string(hv.GetHeader().GetRawValue())
	}
	return out
}

func admissionReq(n int, objective string) exchange {
	x := exchange{Path: chatPath, Body: chat(fmt.Sprint("c", n), 1, false), Headers: map[string]string{"x-conversation-id": fmt.Sprint("c", n)}}
	if objective != "" {
		x.Headers["x-gateway-inference-objective"] = objective
	}
	return x
}

// TestAdmissionQueuesInTheEPP: the EPP runs the router's admission on its
// table. Over capacity a request waits in the EPP (no destination, nothing
// charged to a replica); a full queue answers a 429 immediate response
// with Retry-After and the reason; a stream that ends while queued never
// reaches a replica; capacity freed lets the higher band go first; the
// metrics are the router's llm_ring_admission_*.
func TestAdmissionQueuesInTheEPP(t *testing.T) {
	h := newHarness(t, admissionConfig(t), Options{})
	h.rt.SetReplicas(pool(1))
	p1, p2 := h.begin(admissionReq(1, "")), h.begin(admissionReq(2, ""))
	for _, p := range []*pending{p1, p2} {
		if d, im := p.dest(t); d == "" {
			t.Fatalf("below saturation: %v, want a destination", im)
		}
	}
	p3 := h.begin(admissionReq(3, "batch"))
	waitFor(t, "request 3 queued", func() bool { return metric(t, h, "llm_ring_admission_queue_length", "") == 1 })
	p4 := h.begin(admissionReq(4, "batch"))
	waitFor(t, "request 4 queued", func() bool { return metric(t, h, "llm_ring_admission_queue_length", "") == 2 })
	p5 := h.begin(admissionReq(5, "interactive"))
	waitFor(t, "request 5 queued", func() bool { return metric(t, h, "llm_ring_admission_queue_length", "") == 3 })

	// Full: a batch request has nobody below it to displace.
	_, im := h.begin(admissionReq(6, "batch")).dest(t)
	hd := headerOf(im)
	if im == nil || im.GetStatus().GetCode() != 429 || hd["retry-after"] == "" || hd[router.HeaderShedReason] != "queue-full" ||
		hd["content-type"] != "application/json" || !strings.Contains(string(im.GetBody()), "queue is full") {
		t.Fatalf("a full queue: %v (headers %v), want 429 with Retry-After and reason queue-full", im, hd)
	}
	// Request 4's client goes away while it waits: it leaves the queue.
	p4.c.cancel()
	waitFor(t, "request 4 cancelled", func() bool { return metric(t, h, "llm_ring_admission_total", "cancelled") == 1 })
	if q := metric(t, h, "llm_ring_admission_queue_length", ""); q != 2 {
		t.Fatalf("queue %v after the cancel, want 2", q)
	}
	if n := h.inflight()["llm-0"]; n != 2 || p3.answered() || p5.answered() {
		t.Fatalf("while saturated: %d in flight (want 2), answers to queued: %v %v", n, p3.answered(), p5.answered())
	}
	// One answer ends: the interactive request goes first, the batch one waits.
	p1.finish(t)
	if d, im := p5.dest(t); d == "" {
		t.Fatalf("request 5 after capacity freed: %v", im)
	}
	time.Sleep(3 * admitPollForTest)
	if p3.answered() {
		t.Fatal("request 3 (batch) was let go while the pool was saturated again")
	}
	p2.finish(t)
	if d, im := p3.dest(t); d == "" {
		t.Fatalf("request 3: %v", im)
	}
	p3.finish(t)
	p5.finish(t)
	waitFor(t, "all released", func() bool { return h.inflight()["llm-0"] == 0 })
	for outcome, want := range map[string]float64{"admitted": 2, "admitted-after-wait": 2, "shed-queue-full": 1, "cancelled": 1} {
		if got := metric(t, h, "llm_ring_admission_total", outcome); got != want {
			t.Errorf("llm_ring_admission_total{outcome=%q} = %v, want %v", outcome, got, want)
		}
	}
	waitFor(t, "the request log lines", func() bool { return strings.Count(h.log.String(), `"msg":"request"`) == 4 })
	if !strings.Contains(h.log.String(), `"priority":10`) || !strings.Contains(h.log.String(), `"queue_wait_ms"`) {
		t.Fatalf("the log lines say nothing of admission:\n%s", h.log.String())
	}
	gone := convOf(t, h, 4)
	for line := range strings.SplitSeq(h.log.String(), "\n") {
		var l struct{ Msg, Conversation string }
		if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "request" && l.Conversation == gone {
			t.Fatalf("the cancelled request has a request log line: it reached routing (%s)", line)
		}
	}
}

// admitPollForTest is the router's poll of waiting requests (admitPoll).
const admitPollForTest = 50 * time.Millisecond

// convOf is the logged conversation hash of request n: read from the
// admission_cancelled line (only request 4 has one).
func convOf(t *testing.T, h *harness, n int) string {
	t.Helper()
	for line := range strings.SplitSeq(h.log.String(), "\n") {
		var l struct{ Msg, Conversation string }
		if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "admission_cancelled" {
			return l.Conversation
		}
	}
	t.Fatalf("no admission_cancelled line for request %d", n)
	return ""
}

// TestQueuedWaitIsBounded: a request without a deadline waits at most
// max_wait, then gets the shed answer (reason timeout); nothing reached a
// replica for it.
func TestQueuedWaitIsBounded(t *testing.T) {
	h := newHarness(t, admissionConfig(t, func(a *config.Admission) { a.MaxWait = config.Duration(150 * time.Millisecond) }), Options{})
	h.rt.SetReplicas(pool(1))
	p1, p2 := h.begin(admissionReq(1, "")), h.begin(admissionReq(2, ""))
	p1.dest(t)
	p2.dest(t)
	t0 := time.Now()
	_, im := h.begin(admissionReq(3, "")).dest(t)
	if im == nil || im.GetStatus().GetCode() != 429 || headerOf(im)[router.HeaderShedReason] != "timeout" {
		t.Fatalf("%v, want 429 timeout", im)
	}
	if w := time.Since(t0); w < 150*time.Millisecond {
		t.Fatalf("shed after %v, before max_wait", w)
	}
	if n := h.inflight()["llm-0"]; n != 2 {
		t.Fatalf("%d in flight, want 2 (the shed request reached no replica)", n)
	}
}

// TestShedAnswerIsTheProxys: the same refusal from the proxy and from the
// EPP: status (429, or 503 by configuration), Retry-After, the reason
// header and the JSON body byte for byte, counted by the same metric.
func TestShedAnswerIsTheProxys(t *testing.T) {
	for _, status := range []int{429, 503} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			cfg := admissionConfig(t, func(a *config.Admission) {
				a.ShedStatus, a.ServiceFloor = status, config.Duration(time.Second)
			})
			x := admissionReq(1, "")
			x.Headers["x-slo-ttft-ms"] = "10" // cannot be met: shed at once (deadline)
			h := newHarness(t, cfg, Options{})
			h.rt.SetReplicas(pool(1))
			_, im := h.begin(x).dest(t)
			if im == nil {
				t.Fatal("the EPP did not shed")
			}
			proxy, err := router.New(router.Options{Config: cfg, Logger: slog.New(slog.NewJSONHandler(io.Discard, nil))})
			if err != nil {
				t.Fatal(err)
			}
			proxy.SetReplicas(pool(1))
			front := httptest.NewServer(proxy)
			defer front.Close()
			req, _ := http.NewRequest("POST", front.URL+chatPath, strings.NewReader(string(x.Body)))
			for k, v := range x.Headers {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			hd := headerOf(im)
			if int(im.GetStatus().GetCode()) != status || resp.StatusCode != status || string(im.GetBody()) != string(body) {
				t.Fatalf("EPP %d %q, proxy %d %q: want %d and the same body", im.GetStatus().GetCode(), im.GetBody(), resp.StatusCode, body, status)
			}
			for _, k := range []string{"Retry-After", router.HeaderShedReason, "Content-Type"} {
				if hd[strings.ToLower(k)] != resp.Header.Get(k) || hd[strings.ToLower(k)] == "" {
					t.Errorf("%s: EPP %q, proxy %q", k, hd[strings.ToLower(k)], resp.Header.Get(k))
				}
			}
			if e, p := metric(t, h, "llm_ring_admission_total", "shed-deadline"), sample(t, proxy.Registry(), "llm_ring_admission_total", "shed-deadline"); e != 1 || p != 1 {
				t.Fatalf("shed-deadline counted %v by the EPP, %v by the proxy; want 1 each", e, p)
			}
		})
	}
}
