package policy

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/llm-ring/llm-ring/internal/ring"
)

// fakeRing places virtual nodes at readable positions: label "v:name" is
// at pos[label]. Keys are given as hashes directly.
func fakeRing(names []string, vnodes int, pos map[string]uint64) *ring.Ring {
	return ring.New(names, vnodes, func(b []byte) uint64 {
		p, ok := pos[string(b)]
		if !ok {
			panic("no position for " + string(b))
		}
		return p
	})
}

// seedView is the situation of the study's two decision traces: three
// replicas, llm-0 busy with 2400 tokens in flight, the others with 900.
// On the ring, key 5 has home llm-0 (at 10), then llm-2 (20), then llm-1 (30).
func seedView() *View {
	names := []string{"llm-0", "llm-1", "llm-2"}
	return NewView(names,
		fakeRing(names, 1, map[string]uint64{"0:llm-0": 10, "0:llm-1": 30, "0:llm-2": 20}),
		[]Load{{Requests: 6, Tokens: 2400}, {Requests: 2, Tokens: 900}, {Requests: 2, Tokens: 900}})
}

func seedParams() *LLMAware {
	return &LLMAware{Epsilon: 0.25, CacheAwareLoad: true, PlacementMemory: true,
		LongStickiness: true, LongPromptTokens: 800, LongCapFactor: 2.0}
}

// seedSettings returns the study's settings for the named policy: the
// seed's llm-aware settings, bounded in tokens; nil (the documented
// defaults) for the others, the peers included.
func seedSettings(name string) Settings {
	switch name {
	case "llm-aware":
		return seedParams()
	case "bounded":
		return &Bounded{Epsilon: 0.25, Unit: Tokens}
	}
	return nil
}

// TestSeedTraceLLMAware reproduces the study's llm-aware trace with its
// numbers. Two words differ on purpose: placement memory holds the cached
// tokens (prompt and answer), so the line says "cached tokens"; and Go
// prints booleans in lower case.
func TestSeedTraceLLMAware(t *testing.T) {
	p, err := New("llm-aware", seedParams())
	if err != nil {
		t.Fatal(err)
	}
	req := &Request{Hash: 5, PromptTokens: 860, OutputTokens: 48, Last: 0, CachedTokens: 820}
	d := pickOnce(p, req, seedView())
	want := `llm-aware → llm-0 (home-long)
  placement memory: last served on llm-0 with 820 cached tokens → preferred=llm-0
  cost on llm-0: max(1, 860-820)=40 + 48 = 88 (new tokens only, cache hit)
  load (tokens): llm-0=2400 llm-1=900 llm-2=900; +88 → total=4288, avg=1429.3, cap=1786.7
  long stickiness: prompt_tokens=860 ≥ 800 and cache_likely=true → long_cap=2858.7
  llm-0: 2400+88=2488 ≤ long_cap=2858.7 (> normal cap=1786.7) → home-long`
	if got := d.Format(); got != want {
		t.Errorf("trace:\n%s\nwant:\n%s", got, want)
	}
	if d.Replica != 0 || d.Reason != HomeLong || d.Charge != 88 {
		t.Errorf("decision = %d %v charge %d, want 0 home-long 88", d.Replica, d.Reason, d.Charge)
	}
}

// TestSeedTraceBoundedTokens reproduces the study's bounded (token mode)
// trace: the same situation, the whole history charged everywhere.
func TestSeedTraceBoundedTokens(t *testing.T) {
	p, err := New("bounded", &Bounded{Epsilon: 0.25, Unit: Tokens})
	if err != nil {
		t.Fatal(err)
	}
	req := &Request{Hash: 5, PromptTokens: 860, OutputTokens: 48, Last: 0, CachedTokens: 820}
	d := pickOnce(p, req, seedView())
	want := `bounded (token mode) → llm-2 (overflow)
  load (tokens): llm-0=2400 llm-1=900 llm-2=900; with this request total=5108, cap=2128.3
  llm-0: 2400+908=3308 > 2128.3 → skip
  llm-2: 900+908=1808 ≤ 2128.3 → overflow`
	if got := d.Format(); got != want {
		t.Errorf("trace:\n%s\nwant:\n%s", got, want)
	}
	if d.Replica != 2 || d.Reason != Overflow || d.Charge != 908 {
		t.Errorf("decision = %d %v charge %d, want 2 overflow 908", d.Replica, d.Reason, d.Charge)
	}
}

func TestReasons(t *testing.T) {
	all := seedParams()
	noMemory := *all
	noMemory.PlacementMemory = false
	noLong := *all
	noLong.LongStickiness = false
	noCache := *all
	noCache.CacheAwareLoad = false
	idle := func(v *View) { v.Rows[0].Load = Load{} }
	light := func(v *View) { v.Rows[0].Load = Load{Requests: 1, Tokens: 100} }
	busy1 := func(v *View) { v.Rows[1].Load = Load{Requests: 9, Tokens: 5000} }
	allBusy := func(v *View) {
		v.Rows[0].Load = Load{Requests: 9, Tokens: 9000}
		v.Rows[1].Load = Load{Requests: 9, Tokens: 9000}
		v.Rows[2].Load = Load{Requests: 9, Tokens: 9000}
	}
	tests := []struct {
		name   string
		policy string
		params Settings
		req    Request
		setup  func(*View)
		want   string // replica name
		reason Reason
	}{
		// Rotation: request 4 of 3 replicas goes to index 1.
		{"round-robin rotates", "round-robin", nil, Request{Seq: 4, Last: -1}, nil, "llm-1", Rotate},
		// mod-n: hash 5 mod 3 = 2.
		{"mod-n hashes", "mod-n", nil, Request{Hash: 5, Last: -1}, nil, "llm-2", Hash},
		// consistent ignores load: key 5's home is llm-0 however busy.
		{"consistent goes home", "consistent", nil, Request{Hash: 5, Last: -1}, allBusy, "llm-0", Home},
		// Requests mode: loads 6,2,2 + 1 → total 11, cap ⌈1.25·11/3⌉ = 5; llm-0 has 6 → skip; llm-2 fits.
		{"bounded requests overflows", "bounded", &Bounded{Epsilon: 0.25}, Request{Hash: 5, Last: -1}, nil, "llm-2", Overflow},
		// An idle home always fits, even when the request alone exceeds the cap.
		{"bounded idle home fits", "bounded", &Bounded{Epsilon: 0.25, Unit: Tokens}, Request{Hash: 5, PromptTokens: 100000, Last: -1}, idle, "llm-0", Home},
		// Light home: 100+908 ≤ (1.25·(1900+908)/3=1170) → home.
		{"bounded home within cap", "bounded", &Bounded{Epsilon: 0.25, Unit: Tokens}, Request{Hash: 5, PromptTokens: 860, OutputTokens: 48, Last: -1}, light, "llm-0", Home},
		// Everyone far above the cap and busy: least loaded.
		{"bounded least loaded", "bounded", &Bounded{Epsilon: 0.01, Unit: Tokens}, Request{Hash: 5, PromptTokens: 20000, Last: -1}, allBusy, "llm-0", LeastLoaded},
		// Placement memory: last served on llm-1 (not home), light enough → sticky.
		{"llm-aware sticky", "llm-aware", all, Request{Hash: 5, PromptTokens: 500, OutputTokens: 48, Last: 1, CachedTokens: 450}, nil, "llm-1", Sticky},
		// Same, but memory off: preferred is home llm-0 (2400+548 > cap) → walk: llm-2 fits → overflow.
		{"llm-aware memory off goes home first", "llm-aware", &noMemory, Request{Hash: 5, PromptTokens: 500, OutputTokens: 48, Last: 1, CachedTokens: 450}, nil, "llm-2", Overflow},
		// Long conversation on busy llm-0 with its cache: home-long (the study's case).
		{"llm-aware home-long", "llm-aware", all, Request{Hash: 5, PromptTokens: 860, OutputTokens: 48, Last: 0, CachedTokens: 820}, nil, "llm-0", HomeLong},
		// Long stickiness off: llm-0 over the normal cap → walk → llm-2, checked against the cap
		// with its own (whole-prompt) cost: 900+908 ≤ 1.25·(4200+908)/3 = 2128.3.
		{"llm-aware long off", "llm-aware", &noLong, Request{Hash: 5, PromptTokens: 860, OutputTokens: 48, Last: 0, CachedTokens: 820}, nil, "llm-2", Overflow},
		// Sticky and long: last on llm-1, which is busy above the normal cap but within 2× avg.
		{"llm-aware sticky-long", "llm-aware", all, Request{Hash: 5, PromptTokens: 900, OutputTokens: 48, Last: 1, CachedTokens: 850}, func(v *View) { v.Rows[1].Load = Load{Requests: 5, Tokens: 2300} }, "llm-1", StickyLong},
		// Sticky replica full beyond the long cap: the walk starts at home, which fits → home.
		{"llm-aware sticky full, home fits", "llm-aware", all, Request{Hash: 5, PromptTokens: 900, OutputTokens: 48, Last: 1, CachedTokens: 850}, func(v *View) { light(v); busy1(v) }, "llm-0", Home},
		// Cache-aware load off: the cached home costs the whole prompt; 2400+908 is above even the long cap
		// (2.0·(4200+908)/3 = 3405.3)? No: 3308 ≤ 3405.3, so home-long still holds.
		{"llm-aware cache-aware off", "llm-aware", &noCache, Request{Hash: 5, PromptTokens: 860, OutputTokens: 48, Last: 0, CachedTokens: 820}, nil, "llm-0", HomeLong},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := New(tt.policy, tt.params)
			if err != nil {
				t.Fatal(err)
			}
			v := seedView()
			if tt.setup != nil {
				tt.setup(v)
				v.Recount()
			}
			req := tt.req
			d := pickOnce(p, &req, v)
			if v.Names[d.Replica] != tt.want || d.Reason != tt.reason {
				t.Errorf("got %s (%s), want %s (%s)\n%s", v.Names[d.Replica], d.Reason, tt.want, tt.reason, d.Format())
			}
			if !strings.HasPrefix(d.Format(), tt.policy) {
				t.Errorf("trace does not start with the policy name:\n%s", d.Format())
			}
		})
	}
}

func TestExcludeFailover(t *testing.T) {
	for _, name := range Names() {
		t.Run(name, func(t *testing.T) {
			p, _ := New(name, seedSettings(name))
			v := seedView()
			req := Request{Hash: 5, Seq: 0, PromptTokens: 10, OutputTokens: 5, Last: 0, CachedTokens: 8}
			first := pickOnce(p, &req, v)
			v.Exclude = []uint64{1 << uint(first.Replica)}
			second := pickOnce(p, &req, v)
			if second.Replica == first.Replica {
				t.Fatalf("picked excluded replica %d again", first.Replica)
			}
			v.Exclude = []uint64{1<<uint(first.Replica) | 1<<uint(second.Replica)}
			third := pickOnce(p, &req, v)
			if third.Replica == first.Replica || third.Replica == second.Replica {
				t.Fatalf("picked an excluded replica: %d after %d, %d", third.Replica, first.Replica, second.Replica)
			}
		})
	}
}

// TestBoundedNeverAboveCap drives bounded and llm-aware through long random
// sequences of acquire and release: no decision may put a replica above the
// cap it was checked against unless the trace says least-loaded.
func TestBoundedNeverAboveCap(t *testing.T) {
	for _, tc := range []struct {
		policy string
		params Settings
		unit   Unit
		eps    float64
		long   float64
	}{
		{"bounded", &Bounded{Epsilon: 0.25, Unit: Requests}, Requests, 0.25, 0},
		{"bounded", &Bounded{Epsilon: 0.1, Unit: Tokens}, Tokens, 0.1, 0},
		{"llm-aware", seedParams(), Tokens, 0.25, 2},
		{"llm-aware", &LLMAware{Epsilon: 0.5, CacheAwareLoad: true, PlacementMemory: true, LongPromptTokens: 1, LongCapFactor: 1}, Tokens, 0.5, 1},
	} {
		t.Run(fmt.Sprintf("%s/%s/eps=%g", tc.policy, tc.unit, tc.eps), func(t *testing.T) {
			p, _ := New(tc.policy, tc.params)
			rng := rand.New(rand.NewPCG(1, 2))
			names := []string{"a", "b", "c", "d", "e"}
			v := NewView(names, ring.New(names, 40, nil), make([]Load, len(names)))
			type flight struct {
				r      int
				charge int64
			}
			var inflight []flight
			last := map[uint64]int{}
			counts := map[Reason]int{}
			for i := range 20000 {
				if len(inflight) > 0 && rng.IntN(2) == 0 {
					k := rng.IntN(len(inflight))
					f := inflight[k]
					v.Rows[f.r].Load.Requests--
					v.Rows[f.r].Load.Tokens -= f.charge
					inflight = append(inflight[:k], inflight[k+1:]...)
					continue
				}
				key := uint64(rng.IntN(200))
				req := Request{Hash: ring.HashString(strconv.FormatUint(key, 10)), Seq: uint64(i),
					PromptTokens: 50 + rng.IntN(3000), OutputTokens: 64, Last: -1}
				if r, ok := last[key]; ok {
					req.Last, req.CachedTokens = r, req.PromptTokens*rng.IntN(10)/10
				}
				v.Recount()
				d := pickOnce(p, &req, v)
				counts[d.Reason]++
				tr := &d.Trace
				load := v.Rows[d.Replica].Load
				unitLoad := load.Tokens
				if tr.Unit == Requests {
					unitLoad = load.Requests
				}
				var cost int64 = 1
				if tr.Unit == Tokens {
					cost = d.Charge
				}
				// The limit, computed independently of the trace: (1+ε)·avg with
				// this request's cost on the chosen replica, or the long cap.
				var sum int64
				for _, row := range v.Rows {
					l := row.Load
					if tr.Unit == Requests {
						sum += l.Requests
					} else {
						sum += l.Tokens
					}
				}
				avg := float64(sum+cost) / float64(len(names))
				limit := (1 + tc.eps) * avg
				if tr.Unit == Requests {
					limit = math.Ceil(limit - 1e-9)
				}
				if d.Reason == HomeLong || d.Reason == StickyLong {
					limit = tc.long * avg
				}
				if d.Reason != LeastLoaded && load.Requests > 0 && float64(unitLoad+cost) > limit+1e-9 {
					t.Fatalf("step %d: %s put %s at %d > limit %.1f\n%s", i, d.Reason, names[d.Replica], unitLoad+cost, limit, d.Format())
				}
				v.Rows[d.Replica].Load.Requests++
				v.Rows[d.Replica].Load.Tokens += d.Charge
				inflight = append(inflight, flight{d.Replica, d.Charge})
				last[key] = d.Replica
			}
			if counts[Overflow] == 0 {
				t.Errorf("the sequence never overflowed (%v): the test exercises nothing", counts)
			}
		})
	}
}

func TestDeterministic(t *testing.T) {
	for _, name := range Names() {
		p1, _ := New(name, seedSettings(name))
		p2, _ := New(name, seedSettings(name))
		for i := range 100 {
			req := Request{Hash: uint64(i) * 0x9e3779b97f4a7c15, Seq: uint64(i), PromptTokens: i * 37, OutputTokens: 32, Last: i % 4, CachedTokens: i * 20}
			if req.Last == 3 {
				req.Last = -1
			}
			r1, r2 := req, req
			d1, d2 := pickOnce(p1, &r1, seedView()), pickOnce(p2, &r2, seedView())
			if d1.Replica != d2.Replica || d1.Reason != d2.Reason || d1.Format() != d2.Format() {
				t.Fatalf("%s: request %d decided differently:\n%s\n%s", name, i, d1.Format(), d2.Format())
			}
		}
	}
}

func TestNewErrors(t *testing.T) {
	if _, err := New("random", nil); err == nil || !strings.Contains(err.Error(), "unknown policy") {
		t.Errorf("unknown policy: err = %v", err)
	}
	if _, err := New("bounded", &Bounded{Epsilon: 0}); err == nil || !strings.Contains(err.Error(), "bounded.epsilon") {
		t.Errorf("bounded with epsilon 0: err = %v, want one naming bounded.epsilon", err)
	}
	if _, err := New("llm-aware", &LLMAware{Epsilon: 0.2, LongStickiness: true, LongCapFactor: 0.5, LongPromptTokens: 10}); err == nil {
		t.Error("llm-aware with long_cap_factor < 1 accepted")
	}
	if _, err := New("bounded", seedParams()); err == nil {
		t.Error("bounded built from llm-aware's settings")
	}
}

var sink Decision

// firstUsers are the benchmark's first user messages: a few shared system
// prompts longer than prefix-hash's 100 characters, and short questions.
var firstUsers = []string{
	strings.Repeat("You are a helpful assistant. Answer briefly and cite sources. ", 4),
	strings.Repeat("Résumé du document suivant, en français s'il vous plaît : ", 3),
	"What is the capital of France?",
	"Write a haiku about routers.",
}

func BenchmarkPick(b *testing.B) {
	for _, name := range Names() {
		for _, n := range []int{3, 64, 1024} {
			b.Run(fmt.Sprintf("%s/replicas=%d", name, n), func(b *testing.B) {
				p, _ := New(name, seedSettings(name))
				names := make([]string, n)
				for i := range names {
					names[i] = fmt.Sprintf("llm-%d", i)
				}
				v := NewView(names, ring.New(names, 160, nil), make([]Load, n))
				rng := rand.New(rand.NewPCG(7, 7))
				for i := range v.Rows {
					v.Rows[i].Load = Load{Requests: int64(1 + rng.IntN(8)), Tokens: int64(500 + rng.IntN(4000))}
					// Every signal filled in, so that the peers take their
					// full paths: a match on a quarter of the replicas, and
					// reports from all.
					if rng.IntN(4) == 0 {
						v.Rows[i].Match = rng.IntN(3000)
					}
					v.Rows[i].Reported = Reported{Running: float64(rng.IntN(8)), Waiting: float64(rng.IntN(6)),
						KVUse: rng.Float64(), HasQueue: true, HasKV: true}
				}
				v.Recount()
				const pool = 1024
				reqs := make([]Request, pool)
				for i := range reqs {
					reqs[i] = Request{Hash: rng.Uint64(), Seq: uint64(i), PromptTokens: 100 + rng.IntN(3000), OutputTokens: 128, Last: rng.IntN(n), CachedTokens: rng.IntN(2000),
						FirstUser: firstUsers[i%len(firstUsers)]}
				}
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					p.Pick(&reqs[i&(pool-1)], v, &sink)
				}
			})
		}
	}
}
