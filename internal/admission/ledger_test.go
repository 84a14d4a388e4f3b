package admission

import (
	"math/rand/v2"
	"testing"

	"github.com/llm-ring/llm-ring/internal/policy"
)

const ms = int64(1e6)

// teach gives replica of l n answers of 1,000 processed tokens, the i-th
// dispatched at off + i×step and its first token len later, learned in
// reverse order (answers end out of their prefill order), at now.
func teach(l *Ledger, replica string, n int, off, step, length, now int64) {
	for i := n - 1; i >= 0; i-- {
		start := off + int64(i)*step
		l.Learn(replica, start, start+length, 0, 1000, now)
	}
}

// TestLedgerRate: the throughput is Σ processed ÷ the union of the
// prefills, however the answers arrive; none before LedgerMinAnswers.
func TestLedgerRate(t *testing.T) {
	l := NewLedger()
	teach(l, "a", 7, 0, 100*ms, 200*ms, sec)
	if r := l.Rate("a"); r != 0 {
		t.Fatalf("7 answers: rate %v, want 0 (too few)", r)
	}
	l = NewLedger()
	// 8 prefills of 200 ms starting 100 ms apart, overlapping: the union is
	// [0, 900 ms], 8,000 tokens: 8,888.9 tok/s (a sum of the intervals, 1.6
	// s, would give the per-request rate 5,000; a running "covered until"
	// fed in reverse order would count only the last one's 200 ms).
	teach(l, "a", 8, 0, 100*ms, 200*ms, sec)
	if r := l.Rate("a"); !near(r, 8000/0.9) {
		t.Fatalf("overlapping: rate %v, want %v", r, 8000/0.9)
	}
	// Disjoint prefills, 100 ms each with 100 ms gaps: 8,000 tokens over
	// 0.8 s of busy time, 10,000 tok/s (the gaps are idle, not work).
	l = NewLedger()
	teach(l, "a", 8, 0, 200*ms, 100*ms, sec)
	if r := l.Rate("a"); !near(r, 10000) {
		t.Fatalf("disjoint: rate %v, want 10000", r)
	}
	// The answers dispatched before the oldest request still in flight make
	// a rate of their own, the larger wins: with request 100 (dispatched at
	// 0) pending, the eight answers after it make 10,000 tok/s over all
	// answers (none before it); once it is answered ([0, 100 ms], 1,000
	// tokens) the nine make 9,000 tokens over the union 0.8 s: 11,250 tok/s.
	// Request 101, dispatched at 2 s and pending, leaves that rate standing
	// while two slower answers after it (1,000 tokens in 1 s each) pull the
	// rate over all answers down to 11,000 ÷ 2.8 s.
	l = NewLedger()
	l.Dispatched(100, "a", 1000, 0, 0)
	teach(l, "a", 8, 0, 200*ms, 100*ms, sec)
	if r := l.Rate("a"); !near(r, 10000) {
		t.Fatalf("an older request in flight: rate %v, want 10000", r)
	}
	l.Answered(100, "a", 0, 100*ms, 0, 1000, sec)
	if r := l.Rate("a"); !near(r, 11250) {
		t.Fatalf("the older one answered: rate %v, want 11250", r)
	}
	l.Dispatched(101, "a", 1000, 0, 2*sec)
	l.Learn("a", 3*sec, 4*sec, 0, 1000, 4*sec)
	l.Learn("a", 4*sec, 5*sec, 0, 1000, 5*sec)
	if r := l.Rate("a"); !near(r, 11250) {
		t.Fatalf("slower answers after a pending one: rate %v, want 11250 (all: %v)", r, 11000/2.8)
	}
	// The window keeps the last LedgerWindow answers: 64 more at 1,000
	// tokens per 50 ms back to back (20,000 tok/s) replace the first ones.
	for i := 0; i < LedgerWindow; i++ {
		start := 10*sec + int64(i)*50*ms
		l.Learn("a", start, start+50*ms, 0, 1000, 20*sec)
	}
	if r := l.Rate("a"); !near(r, 20000) {
		t.Fatalf("after the window turned over: rate %v, want 20000", r)
	}
}

// TestLedgerUncached: the pick's expectation wins; else the replica's
// cached share; else the whole prompt.
func TestLedgerUncached(t *testing.T) {
	l := NewLedger()
	l.Learn("a", 0, 0, 750, 250, 0) // no first token: a share, no rate
	for _, c := range []struct {
		replica        string
		prompt, expect int
		want           int64
	}{
		{"a", 5000, 3000, 2000}, // 3,000 expected cached there (no expectation checked yet: trusted)
		{"a", 4000, 0, 1000},    // nothing expected: 0.75 of it taken as cached
		{"b", 4000, 0, 4000},    // nothing known of b: all of it
		{"a", 100, 500, 1},      // more expected than the prompt: at least 1
	} {
		if got := l.Uncached(c.replica, c.prompt, c.expect); got != c.want {
			t.Errorf("%s prompt %d expect %d: %d, want %d", c.replica, c.prompt, c.expect, got, c.want)
		}
	}
	if l.Rate("a") != 0 {
		t.Errorf("an answer without a first token taught a rate")
	}
	// Expectations a replica's answers found a quarter true: an answer that
	// expected 4,000 cached found 1,000 (the share of expected tokens found
	// is 0.25), so 4,000 expected of a 5,000 prompt count as 1,000 cached:
	// 4,000 of work. An answer that does not report its cache teaches nothing.
	l.Dispatched(7, "a", l.Uncached("a", 5000, 4000), 4000, 0)
	l.Answered(7, "a", 0, 100*ms, 1000, 4000, 100*ms)
	if got := l.Uncached("a", 5000, 4000); got != 4000 {
		t.Errorf("expectation a quarter true: %d, want 4000", got)
	}
	l.Dispatched(8, "a", 1, 4000, 0)
	l.Answered(8, "a", 0, 100*ms, -1, 5000, 100*ms)
	if got := l.Uncached("a", 5000, 4000); got != 4000 || l.Has(8) {
		t.Errorf("after an answer without its cache: %d, want 4000 (and no entry)", got)
	}
	if got := l.Uncached("a", 4000, 0); got != 1000 { // the share of answers that expected nothing is untouched
		t.Errorf("no expectation: %d, want 1000", got)
	}
}

// TestLedgerBacklog: the backlog grows by each dispatch, drains at the
// rate, never exceeds the in-flight sum; ended entries leave it.
func TestLedgerBacklog(t *testing.T) {
	l := NewLedger()
	teach(l, "a", 8, 0, 200*ms, 100*ms, sec) // 10,000 tok/s
	l.Dispatched(1, "a", 5000, 0, sec)
	check := func(at int64, wantIn int64, wantBL float64) {
		t.Helper()
		in, bl := l.Tokens("a", at)
		if in != wantIn || !near(bl, wantBL) {
			t.Fatalf("at %d ms: in flight %d, backlog %v; want %d, %v", at/ms, in, bl, wantIn, wantBL)
		}
	}
	check(1200*ms, 5000, 3000) // 200 ms at 10,000 tok/s drained 2,000
	l.Dispatched(2, "a", 1000, 0, 1200*ms)
	check(1200*ms, 6000, 4000)
	if ns, ok := l.Work("a", WorkBacklog, 1200*ms, 0); !ok || !near(ns, 0.4e9) {
		t.Fatalf("backlog work %v %v, want 400 ms", ns, ok)
	}
	if ns, ok := l.Work("a", WorkInflight, 1200*ms, 0); !ok || !near(ns, 0.6e9) {
		t.Fatalf("in-flight work %v %v, want 600 ms", ns, ok)
	}
	l.Ended(1, 1300*ms) // drained to 3,000, then bounded by the 1,000 left in flight
	check(1300*ms, 1000, 1000)
	check(1500*ms, 1000, 0)
	if l.Ended(1, 1500*ms) || !l.Ended(2, 1500*ms) || l.InFlight() != 0 {
		t.Fatalf("ending: twice, or not at all; %d left", l.InFlight())
	}
	// A re-dispatched id replaces its entry (never counted twice).
	l.Dispatched(3, "a", 700, 0, 2*sec)
	l.Dispatched(3, "a", 900, 0, 2*sec)
	check(2*sec, 900, 900)

	// No rate yet: nothing drains, and the first rate drains the backlog
	// from its start (the replica worked on it all along).
	l = NewLedger()
	l.Dispatched(1, "b", 3000, 0, 0)
	l.Dispatched(2, "b", 3000, 0, 100*ms)
	if _, bl := l.Tokens("b", 400*ms); bl != 6000 {
		t.Fatalf("no rate: backlog %v, want 6000", bl)
	}
	if _, ok := l.Work("b", WorkBacklog, 400*ms, 0); ok {
		t.Fatalf("no rate: work known")
	}
	teach(l, "c", 8, 0, 200*ms, 100*ms, 500*ms) // c: 10,000 tok/s, learned at 500 ms; b drains at the pool's mean
	if _, bl := l.Tokens("b", 500*ms); !near(bl, 1000) {
		t.Fatalf("first rate: backlog %v, want 6000 − 10,000 × 0.5 = 1000", bl)
	}
}

// TestScoreFromLedger: the pool score's work term from the ledger, hand
// computed; a replica without a rate of its own takes the pool's mean; a
// stale replica scores 1; the charges model ignores the ledger.
func TestScoreFromLedger(t *testing.T) {
	s := on()
	s.WorkLimitNs, s.WorkModel, s.QueueThreshold = sec, WorkBacklog, 100
	c := New(s)
	l := c.Ledger()
	teach(l, "a", 8, 0, 200*ms, 100*ms, sec) // a: 10,000 tok/s
	l.Dispatched(1, "a", 4000, 0, sec)       // a: 0.4 s of backlog
	l.Dispatched(2, "b", 2000, 0, sec)       // b: no rate; the mean, 10,000: 0.2 s
	v := &policy.View{Names: []string{"a", "b", "c"}, Rows: make([]policy.Row, 3), Now: sec}
	if got := c.Score(v, 0); !near(got, (0.4+0.2+0)/3) {
		t.Fatalf("backlog: %v, want %v", got, (0.4+0.2)/3)
	}
	v.Now = 1100 * ms // a drained 1,000, b 1,000 at the mean
	if got := c.Score(v, 0); !near(got, (0.3+0.1)/3) {
		t.Fatalf("100 ms later: %v, want %v", got, 0.4/3)
	}
	v.Rows[2].Reported = policy.Reported{HasQueue: true, At: 0} // 1.1 s old: stale after 1 s
	c.s.StaleAfterNs = sec
	if got := c.Score(v, 0); !near(got, (0.3+0.1+1)/3) {
		t.Fatalf("c stale: %v, want %v", got, 1.4/3)
	}
	c.s.WorkModel = WorkInflight // 4,000 and 2,000 in flight: 0.4 s and 0.2 s
	if got := c.Score(v, 0); !near(got, (0.4+0.2+1)/3) {
		t.Fatalf("in flight: %v, want %v", got, 1.6/3)
	}
	c.s.WorkModel = WorkCharges // the rows carry no charges: only c's staleness
	if got := c.Score(v, 0); !near(got, 1.0/3) {
		t.Fatalf("charges: %v, want %v", got, 1.0/3)
	}
	s.WorkModel = "tokens"
	if err := s.Validate(); err == nil {
		t.Errorf("work_model %q validated", s.WorkModel)
	}
}

// TestPropertyLedger drives a controller as the drivers do, its score from
// its own ledger: admitted requests enter the ledger when routed, leave it
// when they end. Every offered request ends once as admitted, shed or
// cancelled; none is ever both waiting and in the ledger (queued and
// sent); the ledger's entries and tokens are the requests in flight, its
// backlog within [0, in flight], its prefilling sum the tokens of those
// whose first token has not come (a first token is told at random, some
// twice, some never before the answer); at the end nothing is left.
func TestPropertyLedger(t *testing.T) {
	names := []string{"a", "b", "c"}
	loosened := 0 // steps with the headroom above 1 (the option is exercised)
	for seed := uint64(1); seed <= 20; seed++ {
		rng := rand.New(rand.NewPCG(seed, 11))
		s := on()
		s.QueueCapacity, s.QueueThreshold, s.WorkLimitNs = 1+rng.IntN(20), 100, int64(rng.IntN(3)+1)*sec/2
		s.WorkModel = []string{WorkBacklog, WorkInflight, WorkPrefill}[rng.IntN(3)]
		if seed%2 == 0 { // the flow gate, from none to always
			s.FlowGate = float64(rng.IntN(11)) / 10
		}
		if seed%3 == 0 { // the headroom, at a target of 0.1–1 of a 1 s SLO
			s.WorkTarget = float64(1+rng.IntN(10)) / 10
		}
		c := New(s)
		c.SetSLO(sec)
		c.SetTPOT(100 * ms)
		l := c.Ledger()
		oracle := headroom{m: 1, tpot: 100 * ms} // fed each request's first time from dispatch to first token, and each answer's TPOT
		oracle.setTarget(s.WorkTargetFor(sec))
		type flight struct {
			rep    string
			tokens int64
			start  int64
			key    flowKey
			first  bool // its first token came (Ledger.First)
		}
		inflight := map[uint64]flight{}
		var order []uint64 // in flight, in dispatch order
		ends := map[uint64]string{}
		end := func(id uint64, how string) {
			if prev, ok := ends[id]; ok {
				t.Fatalf("seed %d: request %d ended twice (%s, then %s)", seed, id, prev, how)
			}
			ends[id] = how
		}
		now, next := int64(0), uint64(0)
		route := func(it Item) {
			id := it.ID
			f := flight{rep: names[rng.IntN(len(names))], start: now, key: flowKey{it.Priority, it.Flow}}
			f.tokens = l.Uncached(f.rep, 1+rng.IntN(4000), rng.IntN(2)*rng.IntN(3000))
			l.Dispatched(id, f.rep, f.tokens, 0, now)
			c.Flow(id, it.Priority, it.Flow)
			inflight[id] = f
			order = append(order, id)
		}
		view := func() *policy.View {
			return &policy.View{Names: names, Rows: make([]policy.Row, len(names)), Now: now}
		}
		for step := 0; step < 3000; step++ {
			now += int64(rng.IntN(100)) * ms
			switch op := rng.IntN(10); {
			case op < 4:
				next++
				it := Item{ID: next, Priority: rng.IntN(2), Flow: string(rune('a' + rng.IntN(3))), Arrived: now}
				if rng.IntN(2) == 0 {
					it.Deadline = now + int64(rng.IntN(3000))*ms
				}
				v, out, ok := c.OfferScore(it, now, c.Score(view(), 0))
				if ok {
					end(out.ID, "displaced")
				}
				switch v.Outcome {
				case Admitted:
					end(it.ID, "admitted")
					route(it)
				case Shed:
					end(it.ID, "shed")
				}
			case op < 6:
				if it, ok := c.DispatchScore(now, c.Score(view(), 0)); ok {
					end(it.ID, "admitted")
					route(it)
				}
			case op < 8 && len(order) > 0: // a first token comes, or an answer ends
				k := rng.IntN(len(order))
				id := order[k]
				f := inflight[id]
				if rng.IntN(2) == 0 {
					if got := c.FirstToken(id, now); got != (!f.first && s.WorkModel == WorkPrefill) {
						t.Fatalf("seed %d: request %d's first token (again: %v) freed %v", seed, id, f.first, got)
					}
					if !f.first {
						oracle.observe(now - f.start)
					}
					f.first = true
					inflight[id] = f
					break
				}
				l.Answered(id, f.rep, f.start, min(f.start+int64(rng.IntN(500))*ms, now), rng.IntN(1000)-1, rng.IntN(3000), now)
				tpot := int64(rng.IntN(200)) * ms // its time per output token (the decode guard)
				l.Decoded(tpot)
				oracle.decoded(tpot)
				delete(inflight, id)
				order = append(order[:k], order[k+1:]...)
			case op < 9:
				c.Expire(now, func(it Item, r Reason) { end(it.ID, r.String()) })
			default:
				if id := uint64(rng.IntN(int(next) + 1)); c.Cancel(id) {
					end(id, "cancelled")
				}
			}
			sums, prefilling := map[string]int64{}, map[string]int64{}
			flows := map[flowKey]int{}
			for _, id := range order {
				sums[inflight[id].rep] += inflight[id].tokens
				if !inflight[id].first {
					prefilling[inflight[id].rep] += inflight[id].tokens
				}
				flows[inflight[id].key]++
			}
			for _, name := range names {
				if got := l.Prefilling(name); got != prefilling[name] {
					t.Fatalf("seed %d: %s prefilling %d, want %d", seed, name, got, prefilling[name])
				}
			}
			for p := 0; p < 2; p++ {
				for _, fl := range []string{"a", "b", "c"} {
					if got := c.FlowInFlight(p, fl); got != flows[flowKey{p, fl}] {
						t.Fatalf("seed %d: band %d flow %s: %d in flight, want %d", seed, p, fl, got, flows[flowKey{p, fl}])
					}
				}
			}
			if h := l.Headroom(); h < 1 || h > headroomMax || !near(h, oracle.m) {
				t.Fatalf("seed %d: headroom %v, want %v in [1, %v]", seed, h, oracle.m, headroomMax)
			} else if h > 1 {
				loosened++
			}
			ledgerAgrees(t, seed, c, l, names, now, next, len(order), sums)
		}
		for _, id := range order {
			l.Ended(id, now)
		}
		for {
			it, ok := c.DispatchScore(now, 0)
			if !ok {
				break
			}
			end(it.ID, "admitted")
		}
		if uint64(len(ends)) != next || l.InFlight() != 0 {
			t.Fatalf("seed %d: %d of %d requests ended, %d ledger entries left", seed, len(ends), next, l.InFlight())
		}
	}
	if loosened == 0 {
		t.Fatalf("the headroom never rose above 1: the work target is not exercised")
	}
}

func ledgerAgrees(t *testing.T, seed uint64, c *Controller, l *Ledger, names []string, now int64, next uint64, n int, sums map[string]int64) {
	t.Helper()
	for id := uint64(1); id <= next; id++ {
		if c.Waiting(id) && l.Has(id) {
			t.Fatalf("seed %d: request %d both queued and sent", seed, id)
		}
	}
	if l.InFlight() != n {
		t.Fatalf("seed %d: %d ledger entries, %d in flight", seed, l.InFlight(), n)
	}
	for _, name := range names {
		in, bl := l.Tokens(name, now)
		if in != sums[name] || bl < 0 || bl > float64(in) {
			t.Fatalf("seed %d: %s in flight %d (want %d), backlog %v", seed, name, in, sums[name], bl)
		}
	}
}
