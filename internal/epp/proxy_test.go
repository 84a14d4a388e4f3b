package epp

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/llm-ring/llm-ring/internal/replicaset"
	"github.com/llm-ring/llm-ring/internal/router"
)

// llamaFake answers chat requests as llama.cpp would, with timings: a
// conversation's previous prompt and answer are cached where it was last
// served. An answer is computed when the request arrives; hold, when set,
// delays writing it until release(seq).
type llamaFake struct {
	mu      sync.Mutex
	cached  map[string]int // conversation → tokens cached here
	hold    bool
	arrived map[string]chan struct{}
	release map[string]chan struct{}
}

func newLlamaFake(hold bool) *llamaFake {
	return &llamaFake{cached: map[string]int{}, hold: hold, arrived: map[string]chan struct{}{}, release: map[string]chan struct{}{}}
}

func (f *llamaFake) gates(seq string) (arrived, release chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.arrived[seq] == nil {
		f.arrived[seq], f.release[seq] = make(chan struct{}), make(chan struct{})
	}
	return f.arrived[seq], f.release[seq]
}

func (f *llamaFake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/health" {
		w.Write([]byte(`{"status":"ok"}`))
		return
	}
	body, _ := io.ReadAll(r.Body)
	var req struct {
		Messages []struct{ Content string } `json:"messages"`
	}
	if json.Unmarshal(body, &req) != nil || len(req.Messages) == 0 {
		http.Error(w, "not a chat request", http.StatusNotFound) // the pool's /metrics scrapes
		return
	}
	conv, _, _ := strings.Cut(req.Messages[0].Content, ":")
	prompt := len(body) / 4
	f.mu.Lock()
	cache := min(f.cached[conv], prompt-1)
	f.cached[conv] = prompt + 8
	f.mu.Unlock()
	answer := answerJSON(cache, prompt-cache, 8)
	if f.hold {
		arrived, release := f.gates(r.Header.Get("x-seq"))
		close(arrived)
		<-release
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write([]byte(answer))
}

type turnReq struct {
	conv string
	turn int
}

// traffic interleaves conversations' turns in a fixed order.
func traffic(convs, turns int) []turnReq {
	var out []turnReq
	next := make([]int, convs)
	for i := 0; len(out) < convs*turns; i++ {
		c := (i*7 + i/convs) % convs
		if next[c] < turns {
			next[c]++
			out = append(out, turnReq{fmt.Sprintf("conv%02d", c), next[c]})
		}
	}
	return out
}

// decisions reads "request" log lines: (conversation hash, turn) → replica and reason.
func decisions(t *testing.T, log string) map[string]string {
	out := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(log))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var l struct {
			Msg, Conversation, Replica, Reason string
			Turn                               int
		}
		if json.Unmarshal(sc.Bytes(), &l) != nil || l.Msg != "request" {
			continue
		}
		out[fmt.Sprintf("%s/%d", l.Conversation, l.Turn)] = l.Replica + " " + l.Reason
	}
	return out
}

// TestSameDecisionsAsProxy feeds the same traffic to the proxy and to the
// EPP, two requests in flight at a time (each pick happens while the
// previous request is still being answered), and compares every decision:
// the replica and the policy's reason, request by request.
func TestSameDecisionsAsProxy(t *testing.T) {
	for _, pol := range []string{"llm-aware", "bounded", "consistent", "round-robin", "scored", "predictive"} {
		t.Run(pol, func(t *testing.T) { sameDecisions(t, pol) })
	}
}

func sameDecisions(t *testing.T, pol string) {
	const n = 3
	proxyFakes, eppFakes := make([]*llamaFake, n), make([]*llamaFake, n)
	var proxySet, eppSet []replicaset.Replica
	for i := range n {
		proxyFakes[i], eppFakes[i] = newLlamaFake(true), newLlamaFake(false)
		ps, es := httptest.NewServer(proxyFakes[i]), httptest.NewServer(eppFakes[i])
		t.Cleanup(ps.Close)
		t.Cleanup(es.Close)
		name := fmt.Sprintf("llm-%d", i)
		proxySet = append(proxySet, replicaset.Replica{Name: name, URL: ps.URL})
		eppSet = append(eppSet, replicaset.Replica{Name: name, URL: es.URL})
	}
	var proxyLog logBuf
	proxy, err := router.New(router.Options{Config: testConfig(t, pol), Logger: slog.New(slog.NewJSONHandler(&proxyLog, nil))})
	if err != nil {
		t.Fatal(err)
	}
	proxy.SetReplicas(proxySet)
	front := httptest.NewServer(proxy)
	t.Cleanup(front.Close)
	h := newHarness(t, testConfig(t, pol), Options{Fallbacks: 1})
	h.rt.SetReplicas(eppSet)

	reqs := traffic(8, 4)
	// The proxy: request i+1 is sent once request i has reached its replica
	// (it is charged), then i is answered.
	var wg sync.WaitGroup
	var pending []func()
	for i, r := range reqs {
		body := chat(r.conv, r.turn, false)
		seq := fmt.Sprint(i)
		wg.Add(1)
		done := make(chan struct{})
		go func() {
			defer wg.Done()
			defer close(done)
			req, _ := http.NewRequest("POST", front.URL+chatPath, bytes.NewReader(body))
			req.Header.Set("x-seq", seq)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}()
		var got *llamaFake
		for got == nil {
			for _, f := range proxyFakes {
				a, _ := f.gates(seq)
				select {
				case <-a:
					got = f
				default:
				}
			}
		}
		_, rel := got.gates(seq)
		pending = append(pending, func() { close(rel); <-done })
		if len(pending) == 2 {
			pending[0]()
			pending = pending[1:]
		}
	}
	for _, p := range pending {
		p()
	}
	wg.Wait()

	// The EPP, the same schedule: pick i+1, then forward and answer i.
	var inflight []*call
	for _, r := range reqs {
		inflight = append(inflight, h.start(exchange{Path: chatPath, Body: chat(r.conv, r.turn, false)}))
		if len(inflight) == 2 {
			h.forward(t, inflight[0])
			inflight = inflight[1:]
		}
	}
	for _, c := range inflight {
		h.forward(t, c)
	}
	waitFor(t, "the EPP's log lines", func() bool { return len(decisions(t, h.log.String())) == len(reqs) })
	want, got := decisions(t, proxyLog.String()), decisions(t, h.log.String())
	if len(want) != len(reqs) {
		t.Fatalf("proxy logged %d requests, want %d", len(want), len(reqs))
	}
	spread := map[string]bool{}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s: proxy %q, EPP %q", k, w, got[k])
		}
		spread[strings.Fields(w)[0]] = true
	}
	if len(spread) < 2 {
		t.Fatalf("all requests on one replica: the comparison shows nothing (%v)", want)
	}
}

// forward plays the gateway's data path: the request goes to the picked
// endpoint, and the answer is fed back through the EPP.
func (h *harness) forward(t *testing.T, c *call) {
	t.Helper()
	first, _, _ := strings.Cut(c.Dest, ",")
	resp, err := http.Post("http://"+first+chatPath, "application/json", bytes.NewReader(c.Forwarded))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	c.answer(resp.StatusCode, resp.Header.Get("Content-Type"), first, string(b))
	c.close()
}
