package router

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llm-ring/llm-ring/internal/admission"
	"github.com/llm-ring/llm-ring/internal/config"
	"github.com/llm-ring/llm-ring/internal/policy"
	"github.com/llm-ring/llm-ring/internal/replicaset"
	"github.com/llm-ring/llm-ring/internal/state"
)

// admissionHarness: one replica that holds every request until told, a
// pool saturated at two requests in flight (queue threshold 1: one running,
// one waiting), a queue of three.
func admissionHarness(t *testing.T, edit ...func(*config.Admission)) (*harness, *fakeReplica) {
	capacity := 3
	h := newHarness(t, "least-loaded", 1, func(c *config.Router) {
		c.Admission = config.Admission{Enabled: true, QueueThreshold: 1, QueueCapacity: &capacity,
			Objectives: map[string]int{"interactive": 10, "batch": -10}, DefaultPriority: -10}
		for _, e := range edit {
			e(&c.Admission)
		}
	})
	f := h.fakes[0]
	f.hold = make(chan struct{})
	return h, f
}

// send posts a chat request tagged n in the background; its status lands in out.
func (h *harness) send(ctx context.Context, wg *sync.WaitGroup, n int, objective string, out chan<- [2]int) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, h.srv.URL+"/v1/chat/completions", strings.NewReader(chatBody(fmt.Sprintf("request %d", n), false)))
		req.Header.Set("x-conversation-id", fmt.Sprintf("c%d", n))
		if objective != "" {
			req.Header.Set("x-gateway-inference-objective", objective)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			out <- [2]int{n, -1}
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		out <- [2]int{n, resp.StatusCode}
	}()
}

func (a *admitter) queued() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, p := range a.order {
		n += p.c.Len()
	}
	return n
}

// Over capacity: requests wait in the router, not at the replica; the
// higher band goes first; a full queue answers 429 with Retry-After and a
// reason; a client that leaves while queued never reaches the replica.
func TestAdmissionLive(t *testing.T) {
	h, f := admissionHarness(t)
	adm := h.rt.adm
	var wg sync.WaitGroup
	out := make(chan [2]int, 16)
	bg := context.Background()
	h.send(bg, &wg, 1, "", out)
	h.send(bg, &wg, 2, "", out)
	waitFor(t, "two requests at the replica", func() bool { return f.calls.Load() == 2 })
	h.send(bg, &wg, 3, "batch", out)
	waitFor(t, "request 3 queued", func() bool { return adm.queued() == 1 })
	h.send(bg, &wg, 4, "interactive", out)
	waitFor(t, "request 4 queued", func() bool { return adm.queued() == 2 })
	gone, leave := context.WithCancel(bg)
	h.send(gone, &wg, 5, "batch", out)
	waitFor(t, "request 5 queued", func() bool { return adm.queued() == 3 })
	leave()
	waitFor(t, "request 5 cancelled", func() bool { return adm.queued() == 2 })
	h.send(bg, &wg, 6, "batch", out)
	waitFor(t, "request 6 queued", func() bool { return adm.queued() == 3 })

	// The queue is full and request 7 is of the lowest band: shed at once.
	resp, body := h.post(t, "/v1/chat/completions", chatBody("request 7", false), "x-conversation-id", "c7")
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" || resp.Header.Get(HeaderShedReason) != "queue-full" {
		t.Fatalf("request 7: %d Retry-After=%q reason=%q %s", resp.StatusCode, resp.Header.Get("Retry-After"), resp.Header.Get(HeaderShedReason), body)
	}
	var e struct {
		Error struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error.Code != 429 || !strings.Contains(e.Error.Message, "queue is full") {
		t.Fatalf("request 7's error body: %s", body)
	}
	if f.calls.Load() != 2 {
		t.Fatalf("the replica saw %d requests while the pool was saturated, want 2", f.calls.Load())
	}

	// Release one at a time: each release frees room for exactly one, and
	// the interactive request goes before the batch ones that came first.
	for want := int64(3); want <= 5; want++ {
		f.hold <- struct{}{}
		waitFor(t, fmt.Sprintf("%d requests at the replica", want), func() bool { return f.calls.Load() == want })
		time.Sleep(20 * time.Millisecond) // a second dispatch, if any, would arrive now
		if got := f.calls.Load(); got != want {
			t.Fatalf("one release let %d requests reach the replica", got-want+1)
		}
	}
	f.mu.Lock()
	order := strings.Join(f.arrivals[2:], ",")
	f.mu.Unlock()
	if order != "c4,c3,c6" {
		t.Errorf("queued requests reached the replica in the order %s, want c4,c3,c6", order)
	}
	close(f.hold)
	wg.Wait()
	close(out)
	status := map[int]int{}
	for r := range out {
		status[r[0]] = r[1]
	}
	for _, n := range []int{1, 2, 3, 4, 6} {
		if status[n] != http.StatusOK {
			t.Errorf("request %d: status %d, want 200", n, status[n])
		}
	}
	if status[5] != -1 {
		t.Errorf("request 5 (client gone): %d", status[5])
	}
	if f.calls.Load() != 5 {
		t.Errorf("the replica saw %d requests, want 5 (never the cancelled one)", f.calls.Load())
	}
	if !h.waitLog(t, `"msg":"admission_cancelled"`) || !h.waitLog(t, `"reason":"queue-full"`) ||
		!h.waitLog(t, `admission: band 10, flow \"\": waited`) || !h.waitLog(t, `"queue_wait_ms":`) {
		t.Errorf("log lacks the cancellation or the shed:\n%s", h.logText())
	}
}

// TestAdmissionPerPool: the admitter keeps one queue per table (pool): a
// request for a pool that has room is admitted at once while another pool
// is saturated and has requests waiting; token budgets are shared.
func TestAdmissionPerPool(t *testing.T) {
	h, f := admissionHarness(t)
	adm := h.rt.adm
	var wg sync.WaitGroup
	out := make(chan [2]int, 8)
	bg := context.Background()
	h.send(bg, &wg, 1, "", out)
	h.send(bg, &wg, 2, "", out)
	waitFor(t, "two requests at the replica", func() bool { return f.calls.Load() == 2 })
	h.send(bg, &wg, 3, "", out)
	waitFor(t, "request 3 queued", func() bool { return adm.queued() == 1 })

	other := state.New(h.rt.cfg.StateConfig(), policy.Least{})
	other.SetReplicas([]replicaset.Replica{{Name: "other-0", URL: "http://127.0.0.1:1"}})
	fl := &flight{ctx: bg, path: "/v1/chat/completions", body: []byte(chatBody("x", false))}
	ad, shed, ok := adm.decide(bg, http.Header{}, fl, other)
	if !ok || shed != nil || ad.queued || ad.pool == adm.pools[h.rt.table] {
		t.Fatalf("a request for an idle pool: ok %v shed %v queued %v: want admitted at once, on its own pool", ok, shed, ad.queued)
	}
	if adm.queued() != 1 || len(adm.order) != 2 || adm.order[1].c.Len() != 0 {
		t.Fatalf("queues: %d waiting over %d pools", adm.queued(), len(adm.order))
	}
	close(f.hold)
	wg.Wait()
}

// TestAdmissionPredictsService: a request's predicted service time
// (policy.ServiceTime) counts against its TTFT SLO. Before any answer
// nothing is predicted (nothing is shed on a guess): a short SLO is
// admitted. That answer, held 400 ms, teaches the replica a prefill rate of
// its prompt (~150 tokens) per ≥ 0.4 s; a prompt about 3× longer is then
// predicted at ≥ 1.2 s on the idle pool: with a 600 ms SLO it is shed at
// once (reason deadline), with a 20 s SLO admitted.
func TestAdmissionPredictsService(t *testing.T) {
	h, f := admissionHarness(t)
	go func() { time.Sleep(400 * time.Millisecond); f.hold <- struct{}{} }()
	resp, body := h.post(t, "/v1/chat/completions", chatBody(strings.Repeat("word ", 100), false), "x-conversation-id", "a", "x-slo-ttft-ms", "100")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("first request, nothing learned yet: %d %s, want 200", resp.StatusCode, body)
	}
	close(f.hold)
	long := chatBody(strings.Repeat("word ", 400), false)
	resp, body = h.post(t, "/v1/chat/completions", long, "x-conversation-id", "b", "x-slo-ttft-ms", "600")
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get(HeaderShedReason) != "deadline" {
		t.Fatalf("600 ms SLO: %d reason %q %s, want 429 deadline", resp.StatusCode, resp.Header.Get(HeaderShedReason), body)
	}
	if f.calls.Load() != 1 {
		t.Fatal("the shed request reached the replica")
	}
	resp, body = h.post(t, "/v1/chat/completions", long, "x-conversation-id", "c", "x-slo-ttft-ms", "20000")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("20 s SLO: %d %s, want 200", resp.StatusCode, body)
	}
	// The pool's cached share discounts the prompt: with 90 % of the
	// answers' prompt tokens cached, a 4,000-token prompt is predicted as
	// 400 new ones (the idle pool: prefill only, a tenth of the time).
	adm := h.rt.adm
	adm.mu.Lock()
	defer adm.mu.Unlock()
	p := adm.pools[h.rt.table]
	p.cached = admission.CachedShare{}
	fl := &flight{in: state.Input{Tokens: 4000}}
	now := time.Now().UnixNano()
	whole := adm.service(p, fl, now)
	p.cached.Learn(900, 100)
	if part := adm.service(p, fl, now); whole <= 0 || math.Abs(float64(part)/float64(whole)-0.1) > 1e-3 {
		t.Fatalf("service %d ns with a 90 %% cached share, %d without: want a tenth", part, whole)
	}
}
