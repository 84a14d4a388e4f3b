package sim

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/llm-ring/llm-ring/internal/admission"
	"github.com/llm-ring/llm-ring/internal/config"
	"github.com/llm-ring/llm-ring/internal/model"
	"github.com/llm-ring/llm-ring/internal/record"
	"github.com/llm-ring/llm-ring/internal/replicaset"
	"github.com/llm-ring/llm-ring/internal/state"
	"github.com/llm-ring/llm-ring/internal/traffic"
)

// burst is n one-turn conversations c0 … c(n-1), all sent at t = 0 (one
// user each), on one replica of one slot that reports nothing: the pool's
// score is (in flight − 1) / queue_threshold.
func burstSpec(n int, adm *Admission) (Spec, fixed) {
	convs := make(fixed, n)
	for i := range convs {
		convs[i] = traffic.Conversation{ID: fmt.Sprintf("c%d", i), Turns: []traffic.Turn{{User: "Hello there, how are you?", MaxTokens: 4}}}
	}
	router := DefaultRouter()
	router.Signals.Interval = config.Duration(0)
	prof := tinyProfile(n, n)
	prof.TurnsMax = 1
	return Spec{RunID: "adm", Policy: "llm-aware", Seed: 1, Profile: prof, Replicas: 1, Model: tinyModel(0),
		Router: router, Source: convs, Admission: adm}, convs
}

func admSettings(capacity int) admission.Settings {
	s := admission.Defaults()
	s.Enabled, s.QueueThreshold, s.QueueCapacity = true, 1, capacity
	return s
}

// byConv indexes a run's rows by conversation (the admission tag cut off).
func byConv(t *testing.T, rows rowsOf) map[string]record.Request {
	t.Helper()
	out := map[string]record.Request{}
	for _, r := range rows {
		base, _, ok := admission.ParseRowTag(r.Conversation)
		if !ok {
			t.Fatalf("row %q has no admission tag", r.Conversation)
		}
		if _, dup := out[base]; dup {
			t.Fatalf("%s ended twice", base)
		}
		out[base] = r
	}
	return out
}

func wait(t *testing.T, r record.Request) float64 {
	_, tag, _ := admission.ParseRowTag(r.Conversation)
	return tag.WaitMS
}

// TestAdmissionBurst: six requests at once, queue of two. c0 and c1 are
// admitted at once (0, then 1 in flight: score 0); c2 and c3 find two in
// flight (score 1, saturated) and wait; c4 and c5 find the queue full and
// are shed (429, no replica). c2 is dispatched when c0's answer ends, c3
// when c1's does: their waits are those ends.
func TestAdmissionBurst(t *testing.T) {
	sp, _ := burstSpec(6, &Admission{Settings: admSettings(2)})
	var rows rowsOf
	res, err := Run(context.Background(), sp, &rows)
	if err != nil {
		t.Fatal(err)
	}
	got := byConv(t, rows)
	if len(got) != 6 || res.Sent != 6 {
		t.Fatalf("%d rows, %d sent, want 6 and 6", len(got), res.Sent)
	}
	for _, c := range []string{"c0", "c1", "c2", "c3"} {
		if got[c].Status != 200 || got[c].Replica != "llm-0" {
			t.Errorf("%s: status %d on %q, want 200 on llm-0", c, got[c].Status, got[c].Replica)
		}
	}
	for _, c := range []string{"c4", "c5"} {
		r := got[c]
		if r.Status != 429 || r.Replica != "" || !strings.Contains(r.Error, "queue-full") || r.CacheN+r.PromptN != 0 {
			t.Errorf("%s: status %d on %q (%q), want 429 queue-full at no replica", c, r.Status, r.Replica, r.Error)
		}
	}
	if w0, w1 := wait(t, got["c0"]), wait(t, got["c1"]); w0 != 0 || w1 != 0 {
		t.Errorf("c0, c1 waited %v, %v ms, want 0", w0, w1)
	}
	if w, end := wait(t, got["c2"]), got["c0"].EndMS; w != end || w == 0 {
		t.Errorf("c2 waited %v ms, want c0's end %v", w, end)
	}
	if w, end := wait(t, got["c3"]), got["c1"].EndMS; w != end {
		t.Errorf("c3 waited %v ms, want c1's end %v", w, end)
	}
	m := res.Info.Metrics
	if m[`llm_ring_admission_total{outcome="admitted"}`] != 2 || m[`llm_ring_admission_total{outcome="admitted-after-wait"}`] != 2 ||
		m[`llm_ring_admission_total{outcome="shed-queue-full"}`] != 2 {
		t.Errorf("admission counters %v", m)
	}
}

// TestAdmissionDeadline: with a TTFT SLO of 1 ms the waiting c2 and c3 are
// shed by the expiry timer one nanosecond after their deadline.
func TestAdmissionDeadline(t *testing.T) {
	sp, _ := burstSpec(4, &Admission{Settings: admSettings(2), SLOTTFT: 1e6})
	var rows rowsOf
	if _, err := Run(context.Background(), sp, &rows); err != nil {
		t.Fatal(err)
	}
	got := byConv(t, rows)
	for _, c := range []string{"c2", "c3"} {
		r := got[c]
		if r.Status != 429 || !strings.Contains(r.Error, "deadline") || r.EndMS != 1.000001 {
			t.Errorf("%s: status %d (%q) at %v ms, want 429 deadline at 1.000001 ms", c, r.Status, r.Error, r.EndMS)
		}
	}
}

// TestAdmissionBands: c2, c3 (band 0) wait; c4 (band 10) arrives to a
// full queue and displaces the newest of the lower band, c3; then it goes
// first: c4 is dispatched at c0's end, c2 at c1's.
func TestAdmissionBands(t *testing.T) {
	sp, _ := burstSpec(5, &Admission{Settings: admSettings(2), Bands: []int{0, 0, 0, 0, 10}})
	var rows rowsOf
	if _, err := Run(context.Background(), sp, &rows); err != nil {
		t.Fatal(err)
	}
	got := byConv(t, rows)
	if r := got["c3"]; r.Status != 429 || !strings.Contains(r.Error, "displaced") {
		t.Errorf("c3: status %d (%q), want 429 displaced", r.Status, r.Error)
	}
	if w, end := wait(t, got["c4"]), got["c0"].EndMS; w != end {
		t.Errorf("c4 (band 10) waited %v ms, want c0's end %v", w, end)
	}
	if w, end := wait(t, got["c2"]), got["c1"].EndMS; w != end {
		t.Errorf("c2 waited %v ms, want c1's end %v", w, end)
	}
}

// TestAdmissionProperties: an open-loop workload well over capacity, two
// bands and four flows: every request ends in exactly one row; a shed one
// reached no replica and has no wait; one that waited reached a replica.
// Without admission the same spec's rows carry no tag.
func TestAdmissionProperties(t *testing.T) {
	w, err := traffic.LoadWorkload(os.DirFS("."), "low-sharing")
	if err != nil {
		t.Fatal(err)
	}
	st := traffic.Stages{Rates: []float64{40}, StageS: 3, Poisson: true}
	reqs := w.Requests(traffic.OpenArrivals(st, 3), 3)
	prof, src, err := WorkloadRun("chat", reqs)
	if err != nil {
		t.Fatal(err)
	}
	set := admission.Defaults()
	set.Enabled, set.QueueCapacity = true, 16
	adm := &Admission{Settings: set, SLOTTFT: 2e9, HighShare: 0.2, HighPriority: 10, Tenants: 4, FloodShare: 0.5}
	sp := Spec{RunID: "p", Policy: "llm-aware", Seed: 3, Profile: prof, Replicas: 2, Model: tinyModel(0),
		Router: DefaultRouter(), Source: src(), Admission: adm}
	var rows rowsOf
	res, err := Run(context.Background(), sp, &rows)
	if err != nil {
		t.Fatal(err)
	}
	got := byConv(t, rows)
	if len(got) != res.Sent || res.Sent != len(reqs) {
		t.Fatalf("%d rows for %d sent, %d requests", len(got), res.Sent, len(reqs))
	}
	var shed, waited int
	for c, r := range got {
		switch {
		case r.Status == 429:
			shed++
			if r.Replica != "" || wait(t, r) != 0 {
				t.Errorf("%s: shed, yet on %q after %v ms", c, r.Replica, wait(t, r))
			}
		case wait(t, r) > 0:
			waited++
			if r.Replica == "" {
				t.Errorf("%s: waited, then reached no replica", c)
			}
		}
	}
	if shed == 0 || waited == 0 {
		t.Errorf("%d shed, %d waited: the load should make both happen", shed, waited)
	}
	sp.Admission, sp.Source = nil, src()
	rows = nil
	if _, err := Run(context.Background(), sp, &rows); err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if _, _, ok := admission.ParseRowTag(r.Conversation); ok || r.Status == 429 {
			t.Fatalf("admission off: row %q status %d", r.Conversation, r.Status)
		}
	}
}

// TestAdmissionPredictsService: the simulator fills Item.Service from
// policy.ServiceTime, as the router does. One user sends c0 (a short
// prompt), then c1 (~2,000 characters, ~500 tokens). c0 is admitted with
// nothing learned (no prediction); its answer teaches the replica its
// prefill rate (1 ms per token: 1,000 tok/s), so c1 is predicted at
// ~0.5 s on the idle replica: with a 300 ms SLO it is shed at once
// (deadline, no wait, no replica); with a 2 s SLO it is served.
func TestAdmissionPredictsService(t *testing.T) {
	run := func(slo time.Duration) map[string]record.Request {
		convs := fixed{
			{ID: "c0", Turns: []traffic.Turn{{User: "Hello there, how are you?", MaxTokens: 4}}},
			{ID: "c1", Turns: []traffic.Turn{{User: strings.Repeat("word ", 400), MaxTokens: 4}}},
		}
		router := DefaultRouter()
		router.Signals.Interval = config.Duration(0)
		prof := tinyProfile(2, 1)
		prof.TurnsMax = 1
		sp := Spec{RunID: "svc", Policy: "llm-aware", Seed: 1, Profile: prof, Replicas: 1, Model: tinyModel(0),
			Router: router, Source: convs, Admission: &Admission{Settings: admSettings(2), SLOTTFT: slo}}
		var rows rowsOf
		if _, err := Run(context.Background(), sp, &rows); err != nil {
			t.Fatal(err)
		}
		return byConv(t, rows)
	}
	got := run(300 * time.Millisecond)
	if r := got["c0"]; r.Status != 200 {
		t.Fatalf("c0: status %d (%q), want 200 (nothing predicted before an answer)", r.Status, r.Error)
	}
	if r := got["c1"]; r.Status != 429 || !strings.Contains(r.Error, "deadline") || r.Replica != "" || wait(t, r) != 0 {
		t.Errorf("c1, 300 ms SLO: status %d (%q) on %q after %v ms, want 429 deadline at once", r.Status, r.Error, r.Replica, wait(t, r))
	}
	got = run(2 * time.Second)
	if r := got["c1"]; r.Status != 200 || r.TTFTMS < 300 {
		t.Errorf("c1, 2 s SLO: status %d, TTFT %v ms; want 200 and a TTFT over 300 ms (the prediction's point)", r.Status, r.TTFTMS)
	}
}

// TestAdmissionShedStatus: ShedStatus 503 (the router's shed_status) makes
// shed rows 503, still told apart from other failures (admission.IsShed);
// another status is refused.
func TestAdmissionShedStatus(t *testing.T) {
	sp, _ := burstSpec(4, &Admission{Settings: admSettings(1), ShedStatus: 503})
	var rows rowsOf
	if _, err := Run(context.Background(), sp, &rows); err != nil {
		t.Fatal(err)
	}
	got := byConv(t, rows)
	if r := got["c3"]; r.Status != 503 || !admission.IsShed(r.Status, r.Error) || !strings.Contains(r.Error, "queue-full") {
		t.Errorf("c3: status %d (%q), want 503 queue-full", r.Status, r.Error)
	}
	bad := &Admission{Settings: admSettings(1), ShedStatus: 500}
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "shed_status") {
		t.Errorf("ShedStatus 500: %v, want an error naming shed_status", err)
	}
}

// TestAdmissionBandLimits: one replica, queue_threshold 2, so the score is
// (in flight − 1) / 2. c0, c1 (band 0) are admitted at 0; c2 (band 0)
// finds 0.5, band 0's limit, and waits; c3 (band 10, limit 1) is admitted
// at once past it. c2 goes when c1's answer ends (one in flight: 0).
// Without the band limit c2 goes at once and c3 waits for c0's end.
func TestAdmissionBandLimits(t *testing.T) {
	for _, limited := range []bool{true, false} {
		s := admSettings(4)
		s.QueueThreshold = 2
		if limited {
			s.BandLimits = map[int]float64{0: 0.5}
		}
		sp, _ := burstSpec(4, &Admission{Settings: s, Bands: []int{0, 0, 0, 10}})
		var rows rowsOf
		if _, err := Run(context.Background(), sp, &rows); err != nil {
			t.Fatal(err)
		}
		got := byConv(t, rows)
		w2, w3 := wait(t, got["c2"]), wait(t, got["c3"])
		switch {
		case limited && (w3 != 0 || w2 != got["c1"].EndMS || w2 == 0):
			t.Errorf("band limit: c2 waited %v ms (want c1's end %v), c3 %v (want 0)", w2, got["c1"].EndMS, w3)
		case !limited && (w2 != 0 || w3 != got["c0"].EndMS || w3 == 0):
			t.Errorf("no band limit: c2 waited %v ms (want 0), c3 %v (want c0's end %v)", w2, w3, got["c0"].EndMS)
		}
	}
}

// TestAdmissionTokenShare: the simulator derives the token capacity from
// the replica model's KV pool as the live router does from a report
// (admission.TokenCapacityFor): a paged model's pool of 4,096 tokens with
// token_share 1/4096 gives a capacity of 1 token, so one request in flight
// saturates the pool and the burst's others wait; the llama.cpp model
// (no pool reported) and no share leave the token term off, and nothing
// waits (the queue term is (in flight − running) / 100).
func TestAdmissionTokenShare(t *testing.T) {
	waited := func(paged bool, share float64) (capacity int64, n int) {
		st := admSettings(8)
		st.QueueThreshold, st.TokenShare = 100, share
		sp, _ := burstSpec(4, &Admission{Settings: st})
		sp.Model.NParallel = 4
		if paged {
			sp.Model.Engine, sp.Model.KVTokens = model.EngineVLLM, 4096
		}
		capacity = newAdmState(sp.Admission, sp.Model).c.Settings().TokenCapacity
		var rows rowsOf
		if _, err := Run(context.Background(), sp, &rows); err != nil {
			t.Fatal(err)
		}
		for _, r := range byConv(t, rows) {
			if r.Status != 200 {
				t.Errorf("paged %v share %v: %s status %d, want 200", paged, share, r.Conversation, r.Status)
			}
			if wait(t, r) > 0 {
				n++
			}
		}
		return capacity, n
	}
	if c, n := waited(true, 1.0/4096); c != 1 || n != 3 {
		t.Errorf("paged, share 1/4096: capacity %d, %d waited, want 1 and 3 (all but the first)", c, n)
	}
	if c, n := waited(true, 0); c != 0 || n != 0 {
		t.Errorf("paged, no share: capacity %d, %d waited, want 0 and 0", c, n)
	}
	if c, n := waited(false, 1.0/4096); c != 0 || n != 0 {
		t.Errorf("llama.cpp, share 1/4096: capacity %d, %d waited, want 0 and 0 (no pool known)", c, n)
	}
}

// TestAdmissionWorkShare: the simulator derives the work limit from the
// run's TTFT SLO as the live router does from its default_slo_ttft
// (admission.WorkLimitFor): work_share 0.5 of a 1 s SLO is 500 ms; no SLO
// leaves the term off.
func TestAdmissionWorkShare(t *testing.T) {
	for _, c := range []struct {
		slo  time.Duration
		want int64
	}{{time.Second, int64(500 * time.Millisecond)}, {0, 0}} {
		st := admSettings(8)
		st.WorkShare = 0.5
		sp, _ := burstSpec(4, &Admission{Settings: st, SLOTTFT: c.slo})
		if got := newAdmState(sp.Admission, sp.Model).c.Settings().WorkLimitNs; got != c.want {
			t.Errorf("SLO %v: work limit %d, want %d", c.slo, got, c.want)
		}
	}
}

// TestAdmissionLedger: the simulator feeds admission's work ledger as the
// router does. A routed request enters it with its estimated prompt less
// what the pick expected cached on its replica (5,000 − 3,000), and leaves
// it when it fails; over an open-loop run with the backlog model every
// routed request leaves it again (answered or failed), the replicas'
// prefill throughput is learned, and requests wait and are shed.
func TestAdmissionLedger(t *testing.T) {
	st := admSettings(8)
	sp, _ := burstSpec(2, &Admission{Settings: st})
	s, err := newSim(&sp, &rowsOf{})
	if err != nil {
		t.Fatal(err)
	}
	l := s.adm.c.Ledger()
	us := &s.users[0]
	us.ticket = state.Ticket{Replica: replicaset.Replica{Name: "llm-0"}, EstPrompt: 5000, ExpectCached: 3000}
	s.admRouted(0)
	if in, _ := l.Tokens("llm-0", 0); in != 2000 || !l.Has(ledgerID(us)) {
		t.Fatalf("routed: %d tokens in flight, want 2000", in)
	}
	s.admEnded(0)
	if in, _ := l.Tokens("llm-0", 0); in != 0 || l.InFlight() != 0 {
		t.Fatalf("failed: %d tokens, %d entries left", in, l.InFlight())
	}

	set := admission.Defaults()
	set.Enabled, set.QueueCapacity, set.WorkModel, set.WorkShare = true, 16, admission.WorkBacklog, 0.5
	sp, reqs := overCapacity(t, "l", &Admission{Settings: set, SLOTTFT: 2e9, Tenants: 2})
	var rows rowsOf
	if s, err = newSim(&sp, &rows); err != nil {
		t.Fatal(err)
	}
	if err := s.loop(context.Background()); err != nil {
		t.Fatal(err)
	}
	s.finish()
	l = s.adm.c.Ledger()
	if l.InFlight() != 0 || l.Rate("llm-0") <= 0 || l.Rate("llm-1") <= 0 {
		t.Fatalf("after the run: %d entries left, rates %v %v", l.InFlight(), l.Rate("llm-0"), l.Rate("llm-1"))
	}
	var shed, waited int
	for _, r := range byConv(t, rows) {
		if r.Status == 429 {
			shed++
		} else if wait(t, r) > 0 {
			waited++
		}
	}
	if shed == 0 || waited == 0 || len(rows) != len(reqs) {
		t.Errorf("%d rows of %d, %d shed, %d waited: the load should make both happen", len(rows), len(reqs), shed, waited)
	}
}

// TestAdmissionFlowGate: the simulator tags each routed request with its
// band and flow (the flow gate's counts): one in flight while routed, none
// after a gated open-loop run over capacity, which still waits and sheds.
func TestAdmissionFlowGate(t *testing.T) {
	set := admission.Defaults()
	set.Enabled, set.QueueCapacity, set.WorkModel, set.WorkShare, set.FlowGate = true, 16, admission.WorkBacklog, 0.5, 0.8
	sp, reqs := overCapacity(t, "g", &Admission{Settings: set, SLOTTFT: 2e9, Tenants: 3, FloodShare: 0.5})
	var rows rowsOf
	s, err := newSim(&sp, &rows)
	if err != nil {
		t.Fatal(err)
	}
	us := &s.users[0]
	us.prio, us.flow = 0, "t1"
	us.ticket = state.Ticket{Replica: replicaset.Replica{Name: "llm-0"}, EstPrompt: 100}
	s.admRouted(0)
	if n := s.adm.c.FlowInFlight(0, "t1"); n != 1 {
		t.Fatalf("routed: flow t1 counts %d, want 1", n)
	}
	s.admEnded(0)
	if n := s.adm.c.FlowInFlight(0, "t1"); n != 0 {
		t.Fatalf("ended: flow t1 counts %d, want 0", n)
	}
	if err := s.loop(context.Background()); err != nil {
		t.Fatal(err)
	}
	s.finish()
	for _, fl := range []string{"t0", "t1", "t2"} {
		if n := s.adm.c.FlowInFlight(0, fl); n != 0 || s.adm.c.Ledger().InFlight() != 0 {
			t.Fatalf("after the run: flow %s counts %d, %d ledger entries", fl, n, s.adm.c.Ledger().InFlight())
		}
	}
	if s.adm.waited == 0 || len(rows) != len(reqs) {
		t.Errorf("%d rows of %d, %d waited: the load should make requests wait", len(rows), len(reqs), s.adm.waited)
	}
}

// overCapacity is an open-loop run of the low-sharing workload at 40/s
// (Poisson, 3 s, seed 3) on two tiny replicas of ~100 ms a prompt (10/s
// each) under adm, and the requests it sends.
func overCapacity(t *testing.T, id string, adm *Admission) (Spec, []traffic.WorkloadRequest) {
	t.Helper()
	w, err := traffic.LoadWorkload(os.DirFS("."), "low-sharing")
	if err != nil {
		t.Fatal(err)
	}
	reqs := w.Requests(traffic.OpenArrivals(traffic.Stages{Rates: []float64{40}, StageS: 3, Poisson: true}, 3), 3)
	prof, src, err := WorkloadRun("chat", reqs)
	if err != nil {
		t.Fatal(err)
	}
	sp := Spec{RunID: id, Policy: "round-robin", Seed: 3, Profile: prof, Replicas: 2, Model: tinyModel(0),
		Router: DefaultRouter(), Source: src(), Admission: adm}
	sp.Model.TokenCost = 50 * time.Microsecond // ~100 ms a prompt: 10/s a replica, against 40/s offered
	return sp, reqs
}
