package epp

import (
	"net"
	"strconv"
	"strings"
	"testing"
)

// sse is a llama.cpp-style OpenAI stream: content chunks, then the last
// chunk with its timings, then [DONE].
func sse(cacheN, promptN, predictedN int) []string {
	return []string{
		"data: {\"choices\":[{\"delta\":{\"content\":\"he\"}}]}\n\n",
		"data: {\"choices\":[{\"delta\":{\"content\":\"llo\"}}]}\n\ndata: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}],",
		"\"timings\":{\"cache_n\":" + itoa(cacheN) + ",\"prompt_n\":" + itoa(promptN) + ",\"predicted_n\":" + itoa(predictedN) + "}}\n\n",
		"data: [DONE]\n\n",
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestStreamedResponse: a streamed answer passes back unchanged, piece by
// piece; the load is held until the stream's [DONE] and the counts are
// learnt: the next turn's estimate is the reported prompt plus the new
// text, and it is expected cached where it was served.
func TestStreamedResponse(t *testing.T) {
	h := newHarness(t, testConfig(t, "llm-aware"), Options{})
	h.rt.SetReplicas(pool(3))
	c := h.start(exchange{Path: chatPath, Body: chat("s", 1, true)})
	name := endpointsOf(h)[strings.Split(c.Dest, ",")[0]]
	c.respond(200, "text/event-stream", "", -1)
	pieces := sse(0, 300, 7)
	var back string
	for i, p := range pieces[:3] {
		back += string(c.body([]byte(p), false))
		if got := h.inflight()[name]; got != 1 {
			t.Fatalf("after piece %d: %d in flight on %s, want 1 until the stream ends", i, got, name)
		}
	}
	back += string(c.body([]byte(pieces[3]), true))
	if back != strings.Join(pieces, "") {
		t.Fatalf("stream came back changed:\n%q", back)
	}
	if got := h.inflight()[name]; got != 0 {
		t.Fatalf("after [DONE]: %d in flight, want 0", got)
	}
	c.close()
	waitFor(t, "log line", func() bool { return strings.Contains(h.log.String(), `"prompt_n":300`) })
	if !strings.Contains(h.log.String(), `"counts_known":true`) {
		t.Fatalf("counts not learnt:\n%s", h.log.String())
	}
	c2 := h.start(exchange{Path: chatPath, Body: chat("s", 2, true)})
	if first, _, _ := strings.Cut(c2.Dest, ","); endpointsOf(h)[first] != name {
		t.Fatalf("turn 2 → %s, want %s where turn 1's cache is", endpointsOf(h)[first], name)
	}
}

// TestServedFallbackAccounted: the data plane reports that a fallback
// served the request (MUST 13): the pick's load is returned, the served
// replica carries the request, and placement memory learns that the
// conversation lives there.
func TestServedFallbackAccounted(t *testing.T) {
	h := newHarness(t, testConfig(t, "llm-aware"), Options{Fallbacks: 2})
	h.rt.SetReplicas(pool(3))
	c := h.start(exchange{Path: chatPath, Body: chat("f", 1, false)})
	eps := strings.Split(c.Dest, ",")
	names := endpointsOf(h)
	primary, fallback := names[eps[0]], names[eps[1]]
	c.respond(200, "application/json", eps[1], len(answerJSON(0, 250, 5)))
	if in := h.inflight(); in[primary] != 0 || in[fallback] != 1 {
		t.Fatalf("served by the fallback %s: in flight %v, want it on %s only", fallback, in, fallback)
	}
	c.body([]byte(answerJSON(0, 250, 5)), true)
	c.close()
	if in := h.inflight(); in[primary]+in[fallback] != 0 {
		t.Fatalf("after the answer: %v", in)
	}
	c2 := h.start(exchange{Path: chatPath, Body: chat("f", 2, false)})
	if first, _, _ := strings.Cut(c2.Dest, ","); names[first] != fallback {
		t.Fatalf("turn 2 → %s, want %s (where turn 1 was served)", names[first], fallback)
	}
	if !strings.Contains(h.log.String(), `"msg":"failover"`) {
		t.Fatal("the fallback was not logged as a failover")
	}
}

// TestClientDisconnectMidStream: the client leaves during a streamed
// answer (Envoy resets the ext_proc stream): the load is released and the
// request logged as the proxy logs a client that went away.
func TestClientDisconnectMidStream(t *testing.T) {
	h := newHarness(t, testConfig(t, "llm-aware"), Options{})
	h.rt.SetReplicas(pool(2))
	for _, during := range []string{"request", "response"} {
		c := h.start(exchange{Path: chatPath, Body: chat(during, 1, true)})
		if during == "response" {
			c.respond(200, "text/event-stream", "", -1)
			c.body([]byte(sse(0, 100, 3)[0]), false)
		}
		c.cancel()
		waitFor(t, "release after "+during, func() bool { return h.inflight()["llm-0"]+h.inflight()["llm-1"] == 0 })
	}
	waitFor(t, "log lines", func() bool { return strings.Count(h.log.String(), `"error_kind":"client"`) == 2 })
}

// TestEPPRestartMidRun: the EPP process is replaced during a run: the
// stream it had in flight fails (Envoy answers per its failure mode), the
// gateway's next requests reach the new EPP on the same address, which
// routes them from a fresh state.
func TestEPPRestartMidRun(t *testing.T) {
	h := newHarness(t, testConfig(t, "llm-aware"), Options{})
	h.rt.SetReplicas(pool(2))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	g1 := h.s.GRPC()
	go g1.Serve(ln)
	h.conn = dial(t, addr)
	c := h.start(exchange{Path: chatPath, Body: chat("r", 1, true)})
	c.respond(200, "text/event-stream", "", -1)
	g1.Stop() // the old EPP dies mid-answer
	if _, err := c.st.Recv(); err == nil {
		t.Fatal("the stream outlived its EPP")
	}
	waitFor(t, "old EPP released its load", func() bool { return h.inflight()["llm-0"]+h.inflight()["llm-1"] == 0 })

	h2 := newHarness(t, testConfig(t, "llm-aware"), Options{})
	h2.rt.SetReplicas(pool(2))
	var ln2 net.Listener
	waitFor(t, "the address to be free", func() bool { ln2, err = net.Listen("tcp", addr); return err == nil })
	g2 := h2.s.GRPC()
	go g2.Serve(ln2)
	t.Cleanup(g2.Stop)
	h2.conn = dial(t, addr) // Envoy's gRPC client reconnects to the new process
	c2 := h2.start(exchange{Path: chatPath, Body: chat("r", 1, false)})
	if c2.Dest == "" {
		t.Fatal("no destination from the restarted EPP")
	}
	c2.answer(200, "application/json", "", answerJSON(0, 100, 3))
	c2.close()
}
