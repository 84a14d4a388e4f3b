package policy

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/llm-ring/llm-ring/internal/ring"
)

// handView is the situation of the hand-computed decisions: on the seed's
// ring key 5 has home llm-0. llm-0 prefills 100 tokens/s and decodes 20,
// with 2 requests (600 tokens) in flight; llm-1 is twice as fast, with 1
// request (300 tokens); llm-2 answered once, at the settings' priors' rates
// (80 and 20), and is idle.
func handView() *View {
	v := seedView()
	v.Rows[0].Load, v.Rows[0].Speed = Load{Requests: 2, Tokens: 600}, Speed{Prefill: 100, Decode: 20, Samples: 5}
	v.Rows[1].Load, v.Rows[1].Speed = Load{Requests: 1, Tokens: 300}, Speed{Prefill: 200, Decode: 40, Samples: 5}
	v.Rows[2].Load, v.Rows[2].Speed = Load{}, Speed{Prefill: 80, Decode: 20, Samples: 1}
	v.Recount()
	return v
}

// TestPredictiveHandComputed: the predicted times in the trace equal the
// hand computation (defaults: slots 4, move_turns 8, margin 0.1 + 0.25 s).
func TestPredictiveHandComputed(t *testing.T) {
	type pred struct{ queue, prefill, decode, move float64 }
	tests := []struct {
		name   string
		req    Request
		setup  func(v *View)
		want   [3]pred // by replica
		winner int
		reason Reason
		charge int64
	}{{
		// Cached on llm-1 (900 of 1000 tokens).
		// llm-1: 1 ahead sharing the batch, delays by min(300, own 100+100)=200 tok → 200/200=1 s;
		//        prefill 100/200=0.5 s; decode 100/40=2.5 s → 4 s.
		// llm-0: 2 ahead, min(300, 1100) each = 600 tok → 6 s; prefill 1000/100=10 s; decode 100/20=5 s;
		//        move 8 × 900/100 = 72 s.
		// llm-2: idle; prefill 1000/80=12.5 s; decode 5 s; move 8 × 900/80 = 90 s.
		name: "cached conversation stays with its cache",
		req:  Request{Hash: 5, PromptTokens: 1000, OutputTokens: 100, Last: 1, CachedTokens: 900},
		setup: func(v *View) {
			v.Rows[1].Match = 900
		},
		want:   [3]pred{{6, 10, 5, 72}, {1, 0.5, 2.5, 0}, {0, 12.5, 5, 90}},
		winner: 1, reason: Cache, charge: 200,
	}, {
		// New conversation, 400 tokens; llm-2 holds 256 of them (a shared
		// system prompt). Home llm-0: 600/100=6 + 4 + 5 = 15 s. llm-1:
		// min(300, 500)/200=1.5 + 400/200=2 + 2.5 = 6 s. llm-2: 0 +
		// 144/80=1.8 + 5 = 6.8 s. 15 − 6 = 9 > 0.1×15 + 0.25 → llm-1.
		name: "new conversation leaves a clearly slower home",
		req:  Request{Hash: 5, PromptTokens: 400, OutputTokens: 100, Last: -1},
		setup: func(v *View) {
			v.Rows[2].Match = 256
		},
		want:   [3]pred{{6, 4, 5, 0}, {1.5, 2, 2.5, 0}, {0, 1.8, 5, 0}},
		winner: 1, reason: Faster, charge: 500,
	}, {
		// As above with llm-1 busy (8 requests, 8000 tokens: 5 to wait for
		// in full, 3 sharing: 5×1000 + 3×500 = 6500 tok → 32.5 s): llm-2,
		// which holds a shared prefix, is fastest (6.8 s).
		name: "new conversation to the replica holding a shared prefix",
		req:  Request{Hash: 5, PromptTokens: 400, OutputTokens: 100, Last: -1},
		setup: func(v *View) {
			v.Rows[1].Load = Load{Requests: 8, Tokens: 8000}
			v.Rows[2].Match = 256
		},
		want:   [3]pred{{6, 4, 5, 0}, {32.5, 2, 2.5, 0}, {0, 1.8, 5, 0}},
		winner: 2, reason: Prefix, charge: 244,
	}, {
		// llm-2 reports 3 running + 2 waiting (another router's traffic),
		// fresh (0.5 s old): 5 requests at the mean charge (this request's
		// own work, 500, since this router has none there): 2 to wait for
		// + 3 sharing = 2500 tok → 31.25 s; + 400/80 = 5 + 5 = 41.25 s.
		// llm-1 (6 s) is fastest.
		name: "replica's own report counts other routers' requests",
		req:  Request{Hash: 5, PromptTokens: 400, OutputTokens: 100, Last: -1},
		setup: func(v *View) {
			v.Now = 10e9
			v.Rows[2].Reported = Reported{Running: 3, Waiting: 2, HasQueue: true, At: 9.5e9}
		},
		want:   [3]pred{{6, 4, 5, 0}, {1.5, 2, 2.5, 0}, {31.25, 5, 5, 0}},
		winner: 1, reason: Faster, charge: 500,
	}, {
		// The same report 2 s old is stale (stale_after_s 1): ignored.
		name: "a stale report is ignored",
		req:  Request{Hash: 5, PromptTokens: 400, OutputTokens: 100, Last: -1},
		setup: func(v *View) {
			v.Now = 10e9
			v.Rows[2].Reported = Reported{Running: 3, Waiting: 2, HasQueue: true, At: 8e9}
		},
		want:   [3]pred{{6, 4, 5, 0}, {1.5, 2, 2.5, 0}, {0, 5, 5, 0}},
		winner: 1, reason: Faster, charge: 500,
	}, {
		// Cached on llm-1 (300 of 1000), llm-1 swamped: 20 in flight,
		// 20000 tokens → 17 to wait for × 1000 + 3 × min(1000, 800) =
		// 19400 tok → 97 s; + 3.5 + 2.5 = 103 s. llm-0: 6 + 10 + 5 + move
		// 8×300/100 = 24 → 45 s; llm-2: 12.5 + 5 + 30 = 47.5 s. The move
		// to llm-0 pays.
		name: "spill from a swamped cache replica",
		req:  Request{Hash: 5, PromptTokens: 1000, OutputTokens: 100, Last: 1, CachedTokens: 300},
		setup: func(v *View) {
			v.Rows[1].Load = Load{Requests: 20, Tokens: 20000}
			v.Rows[1].Match = 300
		},
		want:   [3]pred{{6, 10, 5, 24}, {97, 3.5, 2.5, 0}, {0, 12.5, 5, 30}},
		winner: 0, reason: Spill, charge: 1100,
	}, {
		// The first case after 32,768 tokens were routed to llm-1 since
		// the conversation's last answer (cache_tokens 65,536): belief
		// 1 − 32768/65536 = 0.5, held = 0.5 × 900 = 450.
		// llm-1: own 550+100 = 650; 1 sharing, min(300, 650) = 300 tok →
		//        1.5 s; prefill 550/200 = 2.75 s; decode 2.5 s → 6.75 s.
		// llm-0: 6 + 10 + 5 + move 8 × 450/100 = 36 → 57 s.
		// llm-2: 0 + 12.5 + 5 + move 8 × 450/80 = 45 → 62.5 s.
		name: "half-decayed cache: less to gain, less to leave behind",
		req:  Request{Hash: 5, PromptTokens: 1000, OutputTokens: 100, Last: 1, CachedTokens: 900, SentSince: 32768},
		setup: func(v *View) {
			v.Rows[1].Match = 900
		},
		want:   [3]pred{{6, 10, 5, 36}, {1.5, 2.75, 2.5, 0}, {0, 12.5, 5, 45}},
		winner: 1, reason: Cache, charge: 650,
	}, {
		// Cached on llm-1 (900 of 1000) but llm-1 is busy (6 requests,
		// 6000 tokens). Fresh (SentSince 0), the cache holds it:
		// llm-1: 3 to wait for × 1000 + 3 × min(1000, 200) = 3600 tok →
		// 18 s + 0.5 + 2.5 = 21 s; llm-0: 6 + 10 + 5 + 72 = 93 s.
		name: "busy replica, fresh cache: stays",
		req:  Request{Hash: 5, PromptTokens: 1000, OutputTokens: 100, Last: 1, CachedTokens: 900},
		setup: func(v *View) {
			v.Rows[1].Load = Load{Requests: 6, Tokens: 6000}
			v.Rows[1].Match = 900
		},
		want:   [3]pred{{6, 10, 5, 72}, {18, 0.5, 2.5, 0}, {0, 12.5, 5, 90}},
		winner: 1, reason: Cache, charge: 200,
	}, {
		// The same after 65,536 tokens routed to llm-1 since: belief 0,
		// the cache is most likely gone (its Match, placement memory's
		// undecayed figure, is not believed either); the conversation is
		// placed like a new one and moving is free. llm-1: own 1100:
		// 3 × 1000 + 3 × 1000 = 6000 tok → 30 s + 1000/200 = 5 + 2.5 =
		// 37.5 s; home llm-0: 6 + 10 + 5 = 21 s; llm-2: 12.5 + 5 = 17.5 s.
		// 21 − 17.5 = 3.5 > 0.1 × 21 + 0.25 = 2.35 → llm-2.
		name: "busy replica, cache most likely gone: moves for free",
		req:  Request{Hash: 5, PromptTokens: 1000, OutputTokens: 100, Last: 1, CachedTokens: 900, SentSince: 65536},
		setup: func(v *View) {
			v.Rows[1].Load = Load{Requests: 6, Tokens: 6000}
			v.Rows[1].Match = 900
		},
		want:   [3]pred{{6, 10, 5, 0}, {30, 5, 2.5, 0}, {0, 12.5, 5, 0}},
		winner: 2, reason: Faster, charge: 1100,
	}, {
		// llm-2 has not answered yet: it is assumed like the replicas
		// that have, at their mean rates: prefill (100+200)/2 = 150,
		// decode (20+40)/2 = 30. New conversation, 400 + 50 tokens:
		// llm-2: 400/150 = 2.667 + 50/30 = 1.667 → 4.333 s; llm-1:
		// min(300, 450)/200 = 1.5 + 2 + 50/40 = 1.25 → 4.75 s; home llm-0:
		// 600/100 = 6 + 4 + 2.5 = 12.5 s → llm-2.
		name:   "a replica that has not answered is assumed like the others",
		req:    Request{Hash: 5, PromptTokens: 400, OutputTokens: 50, Last: -1},
		setup:  func(v *View) { v.Rows[2].Speed = Speed{} },
		want:   [3]pred{{6, 4, 2.5, 0}, {1.5, 2, 1.25, 0}, {0, 400.0 / 150, 50.0 / 30, 0}},
		winner: 2, reason: Faster, charge: 450,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v := handView()
			tc.setup(v)
			v.Recount()
			req := tc.req
			d := pickOnce(DefaultPredictive(), &req, v)
			if d.Replica != tc.winner || d.Reason != tc.reason || d.Charge != tc.charge {
				t.Errorf("decision %s (%s) charge %d, want %s (%s) charge %d\n%s",
					v.Names[d.Replica], d.Reason, d.Charge, v.Names[tc.winner], tc.reason, tc.charge, d.Format())
			}
			if d.Trace.NCands != 3 {
				t.Fatalf("trace has %d candidates, want 3", d.Trace.NCands)
			}
			for _, c := range d.Trace.Cands[:3] {
				w := tc.want[c.Replica]
				got := pred{c.V[pqQueue], c.V[pqPrefill], c.V[pqDecode], c.V[pqMove]}
				if !near(got.queue, w.queue) || !near(got.prefill, w.prefill) || !near(got.decode, w.decode) || !near(got.move, w.move) {
					t.Errorf("%s: predicted %+v, hand computation %+v", v.Names[c.Replica], got, w)
				}
			}
		})
	}
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// TestPredictiveTrace: the trace text of the first hand-computed decision.
func TestPredictiveTrace(t *testing.T) {
	v := handView()
	v.Rows[1].Match = 900
	req := Request{Hash: 5, PromptTokens: 1000, OutputTokens: 100, Last: 1, CachedTokens: 900}
	d := pickOnce(DefaultPredictive(), &req, v)
	want := `predictive → llm-1 (cache)
  request: prompt=1000 output=100; cache on llm-1: 900 tokens of it; home llm-0; preferred llm-1
  llm-1: queue 1.00s + prefill 0.50s (100 new @ 200 tok/s) + decode 2.50s (100 @ 40.0 tok/s) + move 0.00s = 4.00s
  llm-0: queue 6.00s + prefill 10.00s (1000 new @ 100 tok/s) + decode 5.00s (100 @ 20.0 tok/s) + move 72.00s = 93.00s
  llm-2: queue 0.00s + prefill 12.50s (1000 new @ 80 tok/s) + decode 5.00s (100 @ 20.0 tok/s) + move 90.00s = 107.50s
  fastest llm-1 4.00s; preferred llm-1 4.00s is within 0.65s (margin 0.1×4.00 + 0.25s) → cache`
	if got := d.Format(); got != want {
		t.Errorf("trace:\n%s\nwant:\n%s", got, want)
	}
}

// TestPredictiveNewGoesHome: with equal idle replicas a new conversation
// goes to its ring home, whatever its hash and size.
func TestPredictiveNewGoesHome(t *testing.T) {
	names := []string{"llm-0", "llm-1", "llm-2", "llm-3"}
	v := NewView(names, ring.New(names, 160, nil), make([]Load, len(names)))
	rng := rand.New(rand.NewPCG(12, 1))
	p := DefaultPredictive()
	for i := range 1000 {
		req := Request{Hash: rng.Uint64(), PromptTokens: 1 + rng.IntN(4000), OutputTokens: rng.IntN(512), Last: -1, Seq: uint64(i)}
		d := pickOnce(p, &req, v)
		if home := v.ringHome(req.Hash); d.Replica != home || d.Reason != Home {
			t.Fatalf("request %d went to %s (%s), home %s\n%s", i, names[d.Replica], d.Reason, names[home], d.Format())
		}
	}
}

// TestPredictiveCachedNeverMoves: a conversation cached on an idle replica
// stays there, however the other replicas (of the same speed) are loaded
// and whatever they hold of its prompt (at most what its cache holds).
func TestPredictiveCachedNeverMoves(t *testing.T) {
	names := []string{"llm-0", "llm-1", "llm-2"}
	rng := rand.New(rand.NewPCG(12, 2))
	p := DefaultPredictive()
	for i := range 2000 {
		v := NewView(names, ring.New(names, 160, nil), make([]Load, len(names)))
		last := rng.IntN(3)
		prompt := 1 + rng.IntN(4000)
		cached := 1 + rng.IntN(prompt)
		for r := range v.Rows {
			v.Rows[r].Speed = Speed{Prefill: 80, Decode: 20, Samples: 3}
			if r != last {
				n := rng.Int64N(6)
				v.Rows[r].Load = Load{Requests: n, Tokens: n * rng.Int64N(2000)}
				v.Rows[r].Match = rng.IntN(cached + 1)
			}
		}
		v.Rows[last].Match = cached
		v.Recount()
		req := Request{Hash: rng.Uint64(), PromptTokens: prompt, OutputTokens: rng.IntN(512), Last: last, CachedTokens: cached}
		if d := pickOnce(p, &req, v); d.Replica != last || d.Reason != Cache {
			t.Fatalf("case %d: cached on idle %s, went to %s (%s)\n%s", i, names[last], names[d.Replica], d.Reason, d.Format())
		}
	}
}

// TestPredictiveSlowReplicaGetsLessWork: over random request streams, a
// replica that learned to be twice as slow receives less work than each of
// the others. The replicas are fluid queues: each drains its in-flight
// tokens at its rate every 100 ms; requests arrive at 70 % of the fleet's
// capacity, new conversations with random keys and sizes.
func TestPredictiveSlowReplicaGetsLessWork(t *testing.T) {
	names := []string{"llm-0", "llm-1", "llm-2"}
	rates := []float64{100, 50, 100} // llm-1 is twice as slow
	p := DefaultPredictive()
	for seed := range uint64(5) {
		rng := rand.New(rand.NewPCG(seed, 3))
		v := NewView(names, ring.New(names, 160, nil), make([]Load, len(names)))
		for r := range v.Rows {
			v.Rows[r].Speed = Speed{Prefill: rates[r], Decode: rates[r] / 4, Samples: 10}
		}
		type job struct{ left, charge int64 }
		jobs := make([][]job, len(names))
		work := make([]int64, len(names))
		const dt = 0.1
		arrival := 0.7 * (100 + 50 + 100) * dt / 400 // requests per tick: mean work 400 tokens
		acc := 0.0
		for tick := range 20000 {
			for acc += arrival; acc >= 1; acc-- {
				req := Request{Hash: rng.Uint64(), PromptTokens: 100 + rng.IntN(400), OutputTokens: 100, Last: -1, Seq: uint64(tick)}
				d := pickOnce(p, &req, v)
				jobs[d.Replica] = append(jobs[d.Replica], job{d.Charge, d.Charge})
				v.Rows[d.Replica].Load.Requests++
				v.Rows[d.Replica].Load.Tokens += d.Charge
				work[d.Replica] += d.Charge
			}
			// Each replica shares its rate among its first 4 jobs.
			for r := range jobs {
				budget := rates[r] * dt
				for budget > 1e-9 && len(jobs[r]) > 0 {
					k := min(len(jobs[r]), 4)
					share := budget / float64(k)
					used := 0.0
					kept := jobs[r][:0]
					for i, j := range jobs[r] {
						if i < k {
							take := min(float64(j.left), math.Ceil(share))
							j.left -= int64(take)
							used += take
							if j.left <= 0 {
								v.Rows[r].Load.Requests--
								v.Rows[r].Load.Tokens -= j.charge
								continue
							}
						}
						kept = append(kept, j)
					}
					jobs[r] = kept
					budget -= used
				}
			}
			v.Recount()
		}
		t.Logf("seed %d: tokens of work per replica %v", seed, work)
		if !(work[1] < work[0] && work[1] < work[2]) {
			t.Errorf("seed %d: work %v: the slow llm-1 got as much as a fast one", seed, work)
		}
		if float64(work[1]) > 0.75*float64(work[0]+work[2])/2 {
			t.Errorf("seed %d: work %v: the slow llm-1 got more than 3/4 of a fast one's", seed, work)
		}
	}
}

// TestPredictiveNoAllocs: Pick does not allocate.
func TestPredictiveNoAllocs(t *testing.T) {
	for _, n := range []int{3, 1024} {
		names := make([]string, n)
		for i := range names {
			names[i] = fmt.Sprintf("llm-%d", i)
		}
		v := NewView(names, ring.New(names, 160, nil), make([]Load, n))
		for i := range v.Rows {
			v.Rows[i].Load = Load{Requests: int64(i % 7), Tokens: int64(300 * (i % 7))}
			v.Rows[i].Reported = Reported{Running: 4, Waiting: float64(i % 3), HasQueue: true}
		}
		v.Recount()
		p := DefaultPredictive()
		req := Request{Hash: 42, PromptTokens: 1200, OutputTokens: 128, Last: n / 2, CachedTokens: 1000}
		var d Decision
		if a := testing.AllocsPerRun(100, func() { p.Pick(&req, v, &d) }); a != 0 {
			t.Errorf("replicas=%d: %v allocations per Pick, want 0", n, a)
		}
		sink = d
	}
}

// TestPredictiveSettings: the registry row, its defaults, and errors that
// name the key.
func TestPredictiveSettings(t *testing.T) {
	sp, err := Lookup("predictive")
	if err != nil {
		t.Fatal(err)
	}
	if sp.Study {
		t.Error("predictive is marked as one of the study's policies")
	}
	def, err := sp.Decode(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if *def.(*Predictive) != *DefaultPredictive() {
		t.Errorf("defaults %+v, want %+v", def, DefaultPredictive())
	}
	got, err := sp.Decode(nil, []byte(`{"move_turns": 3, "slots": 8}`))
	if err != nil {
		t.Fatal(err)
	}
	if s := got.(*Predictive); s.MoveTurns != 3 || s.Slots != 8 || s.Margin != 0.1 {
		t.Errorf("partial update gave %+v", s)
	}
	for _, tc := range []struct{ raw, key string }{
		{`{"prior_prefill_tps": 0}`, "prior_prefill_tps"}, // a rate must be positive
		{`{"prior_decode_tps": -1}`, "prior_decode_tps"},  // a rate must be positive
		{`{"move_turns": -0.5}`, "move_turns"},            // no negative price
		{`{"margin": -1}`, "margin"},                      // no negative margin
		{`{"margin_s": 1e9}`, "margin_s"},                 // absurdly large
		{`{"slots": 0}`, "slots"},                         // a replica serves at least one
		{`{"stale_after_s": -2}`, "stale_after_s"},        // an age is not negative
		{`{"cache_tokens": 0}`, "cache_tokens"},           // a cache of no tokens holds nothing
		{`{"slots": 2.5}`, "slots"},                       // not an integer
		{`{"moveturns": 2}`, "moveturns"},                 // unknown key
	} {
		_, err := sp.Decode(nil, []byte(tc.raw))
		if err == nil || !strings.HasPrefix(err.Error(), tc.key+":") {
			t.Errorf("%s: err = %v, want one starting with %q", tc.raw, err, tc.key+":")
		}
	}
	if _, err := New("predictive", &Predictive{}); err == nil || !strings.Contains(err.Error(), "predictive.prior_prefill_tps") {
		t.Errorf("zero settings: err = %v, want one naming predictive.prior_prefill_tps", err)
	}
}

// TestPredictiveTraceBelief: the trace says how much of the cache is still
// believed in, and why (issue 12: a cache that can be gone).
func TestPredictiveTraceBelief(t *testing.T) {
	for _, tc := range []struct {
		sent int64
		want string
	}{
		{0, "; cache on llm-1: 900 tokens of it; home"},                                              // fresh
		{32768, "; cache on llm-1: 450 tokens of it (belief 0.50: 32768 tokens routed there since)"}, // half gone
		{70000, "; cache on llm-1 most likely gone (70000 tokens routed there since)"},               // gone
	} {
		v := handView()
		v.Rows[1].Match = 900
		req := Request{Hash: 5, PromptTokens: 1000, OutputTokens: 100, Last: 1, CachedTokens: 900, SentSince: tc.sent}
		d := pickOnce(DefaultPredictive(), &req, v)
		if got := d.Format(); !strings.Contains(got, tc.want) {
			t.Errorf("SentSince %d: trace\n%s\nwant it to contain %q", tc.sent, got, tc.want)
		}
	}
}
