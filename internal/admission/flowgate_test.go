package admission

import (
	"math"
	"testing"
)

// gateRig drives a controller as the drivers do: an admitted request is
// routed (a ledger entry tagged with its band and flow); names give ids.
type gateRig struct {
	t    *testing.T
	c    *Controller
	ids  map[string]uint64
	name map[uint64]string
	now  int64
	step int64 // the time between two offers (ms unless set)
}

func newGateRig(t *testing.T, gate float64, weights map[string]float64) *gateRig {
	s := on()
	s.FlowGate, s.QueueCapacity, s.FlowWeights = gate, 10, weights
	return &gateRig{t: t, c: New(s), ids: map[string]uint64{}, name: map[uint64]string{}, step: ms}
}

// offer offers request n (its flow is n's first letter) at score and
// checks the outcome.
func (g *gateRig) offer(n string, score float64, want Outcome) {
	g.t.Helper()
	g.now += g.step
	id := uint64(len(g.ids) + 1)
	g.ids[n], g.name[id] = id, n
	it := Item{ID: id, Flow: n[:1], Arrived: g.now}
	v, _, _ := g.c.OfferScore(it, g.now, score)
	if v.Outcome != want {
		g.t.Fatalf("%s at score %v: outcome %d, want %d", n, score, v.Outcome, want)
	}
	if v.Outcome == Admitted {
		g.route(it)
	}
}

func (g *gateRig) route(it Item) {
	g.c.Ledger().Dispatched(it.ID, "r", 100, 0, g.now)
	g.c.Flow(it.ID, it.Priority, it.Flow)
}

// dispatch dispatches at score until the controller says no and checks
// the order.
func (g *gateRig) dispatch(score float64, want ...string) {
	g.t.Helper()
	var got []string
	for {
		it, ok := g.c.DispatchScore(g.now, score)
		if !ok {
			break
		}
		got = append(got, g.name[it.ID])
		g.route(it)
	}
	if len(got) != len(want) {
		g.t.Fatalf("dispatch at %v: %v, want %v", score, got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			g.t.Fatalf("dispatch at %v: %v, want %v", score, got, want)
		}
	}
}

func (g *gateRig) end(n string) { g.c.Ledger().Ended(g.ids[n], g.now) }

func (g *gateRig) inFlight(want map[string]int) {
	g.t.Helper()
	for fl, n := range want {
		if got := g.c.FlowInFlight(0, fl); got != n {
			g.t.Fatalf("flow %s: %d in flight, want %d", fl, got, n)
		}
	}
}

// TestFlowGate: a flooder f and two light flows a, b in one band, gate
// 0.5 of limit 1. By hand (n: in flight per flow, N the band's, W the
// active flows' weights; over ⇔ n_f·W > N):
func TestFlowGate(t *testing.T) {
	g := newGateRig(t, 0.5, nil)
	// Below the gate (score 0.2 < 0.5) every request goes at once.
	g.offer("f1", 0.2, Admitted)
	g.offer("f2", 0.2, Admitted)
	g.offer("f3", 0.2, Admitted)
	// At 0.6 the gate applies. a has nothing in flight: at once (f 3, a 1).
	g.offer("a1", 0.6, Admitted)
	// f: 3·W(f, a = 2) = 6 > N = 4: over, it waits.
	g.offer("f4", 0.6, Queued)
	// b is not over, and the one waiting flow (f: 3·2 > 4) is: b goes at
	// once past f's waiting request (f 3, a 1, b 1).
	g.offer("b1", 0.6, Admitted)
	// a: 1·3 = 3 ≤ 5; f still over (9 > 5): at once (f 3, a 2, b 1).
	g.offer("a2", 0.6, Admitted)
	// f waits while over (3·3 = 9 > 6): the queue passes it over.
	g.dispatch(0.6)
	g.inFlight(map[string]int{"f": 3, "a": 2, "b": 1})
	// Two of f's answers end (f 1, a 2, b 1; N 4): 1·3 ≤ 4, f4 goes.
	g.end("f1")
	g.end("f2")
	g.dispatch(0.6, "f4")
	// f 2, a 2, b 1 (N 5): f 6 > 5 and a 6 > 5 wait; b 3 ≤ 5 goes at once.
	g.offer("f5", 0.6, Queued)
	g.offer("a3", 0.6, Queued)
	g.offer("b2", 0.6, Admitted)
	// f 2, a 2, b 2 (N 6): neither is over (6 ≤ 6). Fair order: a's tag
	// (0, newly active) is below f's (1, after f4): a3, then f5 (f: 6 ≤ 7).
	g.dispatch(0.9, "a3", "f5")
	g.inFlight(map[string]int{"f": 3, "a": 3, "b": 2})
	// At the limit nobody goes at once, under its share or not.
	g.offer("b3", 1.0, Queued)
	g.dispatch(1.0)
	g.dispatch(0.6, "b3") // b: 2·3 = 6 ≤ 8
	for _, n := range []string{"f3", "f4", "f5", "a1", "a2", "a3", "b1", "b2", "b3"} {
		g.end(n)
	}
	g.inFlight(map[string]int{"f": 0, "a": 0, "b": 0})
	if g.c.Ledger().flows[flowKey{0, "f"}] != nil || len(g.c.Ledger().bandsIn) != 0 {
		t.Fatalf("counts left after every request ended: %v %v", g.c.Ledger().flows, g.c.Ledger().bandsIn)
	}
}

// TestFlowGateOff: without the gate the flooder's f4 goes at once, as before.
func TestFlowGateOff(t *testing.T) {
	g := newGateRig(t, 0, nil)
	for _, n := range []string{"f1", "f2", "f3", "a1", "f4", "b1"} {
		g.offer(n, 0.6, Admitted)
	}
	g.inFlight(map[string]int{"f": 4, "a": 1, "b": 1})
}

// TestFlowGateWeights: f weighs 3, a 1: f's share is 3/4 of the band's in
// flight. f 3, a 1 (N 4, W 4): 3·4 = 12 ≤ 4·3, f4 goes; then f 4, a 1
// (N 5): 16 > 15, f5 waits.
func TestFlowGateWeights(t *testing.T) {
	g := newGateRig(t, 0.5, map[string]float64{"f": 3})
	for _, n := range []string{"f1", "f2", "f3", "a1", "f4"} {
		g.offer(n, 0.6, Admitted)
	}
	g.offer("f5", 0.6, Queued)
	g.offer("a2", 0.6, Admitted) // a: 1·4 ≤ 5
}

// TestFlowUntagged: Flow without a ledger entry, or twice, counts nothing
// more; an entry ended by a reused id releases its count.
func TestFlowUntagged(t *testing.T) {
	c := New(on())
	c.Flow(1, 0, "a")
	if c.FlowInFlight(0, "a") != 0 {
		t.Fatal("counted without an entry")
	}
	c.Ledger().Dispatched(1, "r", 10, 0, 0)
	c.Flow(1, 0, "a")
	c.Flow(1, 0, "a")
	if c.FlowInFlight(0, "a") != 1 {
		t.Fatalf("%d in flight, want 1", c.FlowInFlight(0, "a"))
	}
	c.Ledger().Dispatched(1, "r", 10, 0, 0) // the id reused: the old entry ends
	if c.FlowInFlight(0, "a") != 0 {
		t.Fatalf("%d in flight after the reuse, want 0", c.FlowInFlight(0, "a"))
	}
}

// TestFlowGateNoCredit: a flow passed over by the gate saves no credit.
// f has 3 in flight; f4–f6 and a1–a3 wait (tags 0). At 0.6 (gate 0.5) f is
// over (3·2 > N) while a1, a2, a3 go: the virtual time reaches 2 and f's
// tag is brought up to it each time it is passed over. Then f4 (f not
// over: 3·2 ≤ 6; tag 2 → 3), a4 arrives (tag max(3, 2) = 3); below the
// gate fair queuing alternates: f5 (tag 3, activated first), a4, f6. Had
// f kept its tag 0 it would have gone f5, f6 (tags 1, 2) before a4.
func TestFlowGateNoCredit(t *testing.T) {
	g := newGateRig(t, 0.5, nil)
	for _, n := range []string{"f1", "f2", "f3"} {
		g.offer(n, 0.2, Admitted)
	}
	for _, n := range []string{"f4", "f5", "f6", "a1", "a2", "a3"} {
		g.offer(n, 1.0, Queued)
	}
	g.dispatch(0.6, "a1", "a2", "a3", "f4")
	g.offer("a4", 1.0, Queued)
	g.dispatch(0.2, "f5", "a4", "f6")
}

func newRateRig(t *testing.T, gate float64, weights map[string]float64) *gateRig {
	g := newGateRig(t, gate, weights)
	s := g.c.s
	s.FlowShare = FlowShareRate
	g.c, g.step = New(s), 0 // one instant: the counts are not decayed
	return g
}

// TestFlowRate: the rate share at one instant (no decay), gate 0.5. f1–f4
// go below the gate (f: 4 offers, 4 admissions). Saturated, a1, a2, b1,
// f5, f6 wait (offers a 2, b 1, f 6). Water-filling A admissions over the
// demands (b 1, a 2, f 6): A 4 → b 1, a 1.5, f 1.5: f is over (4 − 1.5 >
// ½); at 0.6 a1 goes (tags: a first), A 5 → b 1, a 2, f 2: f still over,
// b1 goes; A 6 → b 1, a 2, f 3: f still over (4 − 3 = 1 > ½), a2 (tag 1)
// goes; A 7 → f 4: f is at its share, f5 and f6 go. With the in-flight
// share f stays over (4 in flight against an equal part) and the queue
// stops after a2.
func TestFlowRate(t *testing.T) {
	for _, rate := range []bool{true, false} {
		g := newGateRig(t, 0.5, nil)
		if rate {
			g = newRateRig(t, 0.5, nil)
		}
		for _, n := range []string{"f1", "f2", "f3", "f4"} {
			g.offer(n, 0.2, Admitted)
		}
		for _, n := range []string{"a1", "a2", "b1", "f5", "f6"} {
			g.offer(n, 1.0, Queued)
		}
		if !rate {
			g.dispatch(0.6, "a1", "b1", "a2")
			continue
		}
		if a, s := g.c.RateShare(0, "f"); a != 4 || s != 1.5 {
			t.Fatalf("f: %v admissions, share %v; want 4, 1.5", a, s)
		}
		g.dispatch(0.6, "a1", "b1", "a2", "f5", "f6")
		if a, s := g.c.RateShare(0, "f"); a != 6 || s != 6 { // A 9: b 1, a 2, f 6
			t.Fatalf("f after: %v admissions, share %v; want 6, 6", a, s)
		}
	}
}

// TestFlowRateAtOnce: a light flow that asks for less than an equal part
// does not hold the flooder back. Gate 0.5, at 0.6 throughout: a1 (a: 1
// offer, 1 admission), then f1…f6: f's share is A − 1 (a asked for 1), its
// admissions, so f is never over and every request goes at once (with the
// in-flight share f waits from f3: 2·2 > 3).
func TestFlowRateAtOnce(t *testing.T) {
	g := newRateRig(t, 0.5, nil)
	g.offer("a1", 0.6, Admitted)
	for _, n := range []string{"f1", "f2", "f3", "f4", "f5", "f6"} {
		g.offer(n, 0.6, Admitted)
	}
	g = newGateRig(t, 0.5, nil)
	g.offer("a1", 0.6, Admitted)
	g.offer("f1", 0.6, Admitted)
	g.offer("f2", 0.6, Admitted)
	g.offer("f3", 0.6, Queued)
}

// TestFlowRateWeights: f weighs 3, a 1. f1–f3 and a1 go below the gate;
// f4, f5, a2, a3 wait (offers f 5, a 3; per weight f 5/3 < a 3, so f is
// filled first): A 4 → f min(5, 4·3/4) = 3, a 1: neither over. At 0.6
// weighted fair queuing decides: f4 (tag 0, activated first; f's tag
// → 1/3), a2 (0 → 1), f5 (1/3), a3; no flow is ever over (A 5: f 3.75,
// a 1.25; A 6: f 4.5, a 1.5 against a's 2 admissions: ½, not more).
func TestFlowRateWeights(t *testing.T) {
	g := newRateRig(t, 0.5, map[string]float64{"f": 3})
	for _, n := range []string{"f1", "f2", "f3", "a1"} {
		g.offer(n, 0.2, Admitted)
	}
	for _, n := range []string{"f4", "f5", "a2", "a3"} {
		g.offer(n, 1.0, Queued)
	}
	if a, s := g.c.RateShare(0, "a"); a != 1 || s != 1 {
		t.Fatalf("a: %v admissions, share %v; want 1, 1", a, s)
	}
	g.dispatch(0.6, "f4", "a2", "f5", "a3")
}

// TestFlowRateDecay: the counts decay with the window (1 s here): after
// one window a count of 4 is 4/e; a flow that asked for nothing for long
// is forgotten.
func TestFlowRateDecay(t *testing.T) {
	s := on()
	s.FlowGate, s.FlowShare, s.FlowWindowNs = 0.5, FlowShareRate, sec
	c := New(s)
	for i := uint64(1); i <= 4; i++ {
		if v, _, _ := c.OfferScore(Item{ID: i, Flow: "f"}, sec, 0.2); v.Outcome != Admitted {
			t.Fatalf("f%d: %+v", i, v)
		}
	}
	c.OfferScore(Item{ID: 5, Flow: "a"}, 2*sec, 0.2) // decays f to 4/e
	if a, _ := c.RateShare(0, "f"); math.Abs(a-4/math.E) > 1e-12 {
		t.Fatalf("f after one window: %v, want %v", a, 4/math.E)
	}
	c.OfferScore(Item{ID: 6, Flow: "a"}, 20*sec, 0.2) // f: 4·e^-19 < 1e-3
	if a, s := c.RateShare(0, "f"); a != 0 || s != 0 || len(c.rates[0].flows) != 1 {
		t.Fatalf("f not forgotten: %v, %v, %d flows", a, s, len(c.rates[0].flows))
	}
}

// TestFlowGateExpectedWait: while the gate applies, a flow under its share
// does not count the waiting requests of a flow over its share as ahead of
// it (the dispatch passes them over). f1–f3 and b1 go at once 1 ms apart
// (the interval between admissions: 1 ms); f4–f6 wait. f: 3·2 > 4, over.
// A request of a: at 0.6 nothing is ahead, (0 + 1) × 1 ms; below the gate
// fair queuing serves one of f's first, (1 + 1) × 1 ms; f's own: its 3
// waiting, (3 + 1) × 1 ms, gate or not.
func TestFlowGateExpectedWait(t *testing.T) {
	g := newGateRig(t, 0.5, nil)
	for _, n := range []string{"f1", "f2", "f3", "b1"} {
		g.offer(n, 0.2, Admitted)
	}
	for _, n := range []string{"f4", "f5", "f6"} {
		g.offer(n, 1.0, Queued)
	}
	for _, c := range []struct {
		flow  string
		score float64
		want  int64
	}{{"a", 0.6, ms}, {"a", 0.2, 2 * ms}, {"f", 0.6, 4 * ms}, {"f", 0.2, 4 * ms}} {
		if got := g.c.expectedWait(0, c.flow, c.score); got != c.want {
			t.Fatalf("%s at %v: expected wait %d, want %d", c.flow, c.score, got, c.want)
		}
	}
}
