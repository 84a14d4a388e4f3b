package state

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/llm-ring/llm-ring/internal/policy"
	"github.com/llm-ring/llm-ring/internal/replicaset"
	"github.com/llm-ring/llm-ring/internal/ring"
)

func replicas(names ...string) []replicaset.Replica {
	out := make([]replicaset.Replica, len(names))
	for i, n := range names {
		out[i] = replicaset.Replica{Name: n, URL: "http://" + n}
	}
	return out
}

func newTable(t testing.TB, pol string) *Table {
	var set policy.Settings
	switch pol {
	case "bounded":
		set = &policy.Bounded{Epsilon: 0.25, Unit: policy.Tokens}
	case "llm-aware":
		set = &policy.LLMAware{Epsilon: 0.25, CacheAwareLoad: true,
			PlacementMemory: true, LongStickiness: true, LongPromptTokens: 800, LongCapFactor: 2}
	}
	p, err := policy.New(pol, set)
	if err != nil {
		t.Fatal(err)
	}
	return New(Config{VirtualNodes: 64, CharsPerToken: 4, MaxEntries: 1000, TTL: time.Minute}, p)
}

func in(key string, chars, maxTokens int) Input {
	return Input{Key: key, Hash: ring.HashString(key), Chars: chars, OutputTokens: maxTokens}
}

func TestNoReplica(t *testing.T) {
	tb := newTable(t, "llm-aware")
	if _, _, err := tb.Route(in("c", 10, 1), 0); !errors.Is(err, ErrNoReplica) {
		t.Fatalf("err = %v, want ErrNoReplica", err)
	}
	tb.SetReplicas(replicas("a"))
	if _, _, err := tb.Route(in("c", 10, 1), 0, "a"); !errors.Is(err, ErrNoReplica) {
		t.Fatalf("all excluded: err = %v, want ErrNoReplica", err)
	}
}

// TestLearnsTokens: the first turn is estimated from characters; after the
// replica reports real counts, the next turn is the reported prompt plus the
// new characters, and the cache is expected where it was served.
func TestLearnsTokens(t *testing.T) {
	tb := newTable(t, "llm-aware")
	tb.SetReplicas(replicas("a", "b", "c"))
	tk, d, err := tb.Route(in("conv", 400, 50), 0)
	if err != nil {
		t.Fatal(err)
	}
	if tk.EstPrompt != 100 || tk.Charge != 150 || tk.ExpectCached != 0 {
		t.Fatalf("turn 1: est %d charge %d expect %d, want 100 150 0", tk.EstPrompt, tk.Charge, tk.ExpectCached)
	}
	if st := tb.Status(); st.Replicas[tk.Index].Load != (policy.Load{Requests: 1, Tokens: 150}) {
		t.Fatalf("load after route = %+v", st.Replicas[tk.Index].Load)
	}
	// The replica counted 90 prompt tokens and answered 40.
	tb.Release(&tk, Outcome{OK: true, Known: true, CacheN: 0, PromptN: 90, PredictedN: 40}, 1)
	for _, r := range tb.Status().Replicas {
		if r.Load != (policy.Load{}) {
			t.Fatalf("load not released: %+v", r)
		}
	}
	// Turn 2 is 600 characters: 90 known tokens + 200 new characters / 4 = 140.
	tk2, d2, _ := tb.Route(in("conv", 600, 50), 2)
	if tk2.EstPrompt != 140 {
		t.Errorf("turn 2 estimate = %d, want 140", tk2.EstPrompt)
	}
	if !replicaset.Equal(tk2.Replica, tk.Replica) || tk2.ExpectCached != 130 {
		t.Errorf("turn 2 → %s expecting %d cached, want %s expecting 130\n%s", tk2.Replica.Name, tk2.ExpectCached, tk.Replica.Name, d2.Format())
	}
	// Cost there: max(1, 140−130) + 50 = 60.
	if tk2.Charge != 60 {
		t.Errorf("turn 2 charge = %d, want 60 (new tokens only)", tk2.Charge)
	}
	// The replica had lost the cache: it reused only 20 tokens.
	fb := tb.Release(&tk2, Outcome{OK: true, Known: true, CacheN: 20, PromptN: 125, PredictedN: 30}, 3)
	if !fb.CacheLost {
		t.Error("cache loss not reported")
	}
	_ = d
}

// TestStickyAfterRedirect: once a conversation is served away from its ring
// home, llm-aware keeps it there (placement memory).
func TestStickyAfterRedirect(t *testing.T) {
	tb := newTable(t, "llm-aware")
	tb.SetReplicas(replicas("a", "b", "c"))
	key := "sticky-conv"
	home, _, _ := tb.Route(in(key, 40, 10), 0)
	tb.Release(&home, Outcome{OK: true, Known: true, PromptN: 10, PredictedN: 10}, 0)
	// Fail over away from home: the answer comes from another replica.
	tk, _, _ := tb.Route(in(key, 80, 10), 1, home.Replica.Name)
	if replicaset.Equal(tk.Replica, home.Replica) {
		t.Fatal("excluded replica picked")
	}
	tb.Release(&tk, Outcome{OK: true, Known: true, CacheN: 0, PromptN: 20, PredictedN: 10}, 2)
	tk3, d3, _ := tb.Route(in(key, 120, 10), 3)
	if !replicaset.Equal(tk3.Replica, tk.Replica) || d3.Reason != policy.Sticky {
		t.Fatalf("turn 3 → %s (%s), want %s (sticky)\n%s", tk3.Replica.Name, d3.Reason, tk.Replica.Name, d3.Format())
	}
}

func TestMembershipKeepsLoad(t *testing.T) {
	tb := newTable(t, "consistent")
	tb.SetReplicas(replicas("a", "b", "c"))
	var tks []Ticket
	for i := range 30 {
		tk, _, _ := tb.Route(in(fmt.Sprint(i), 100, 10), 0)
		tks = append(tks, tk)
	}
	before := map[string]policy.Load{}
	for _, r := range tb.Status().Replicas {
		before[r.Name] = r.Load
	}
	if !tb.SetReplicas(replicas("a", "c", "d")) {
		t.Fatal("change not reported")
	}
	if tb.SetReplicas(replicas("d", "c", "a")) {
		t.Fatal("same set reported as a change")
	}
	for _, r := range tb.Status().Replicas {
		want := before[r.Name] // zero for the new replica d
		if r.Load != want {
			t.Errorf("%s load %+v, want %+v", r.Name, r.Load, want)
		}
	}
	// b comes back: its earlier tickets must not drive its new counters negative.
	tb.SetReplicas(replicas("a", "b", "c", "d"))
	for i := range tks {
		tb.Release(&tks[i], Outcome{}, 1)
	}
	for _, r := range tb.Status().Replicas {
		if r.Load != (policy.Load{}) {
			t.Errorf("%s load %+v after releasing everything, want zero", r.Name, r.Load)
		}
	}
}

func TestConcurrentRouteRelease(t *testing.T) {
	tb := newTable(t, "bounded")
	tb.SetReplicas(replicas("a", "b", "c", "d"))
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 500 {
				tk, _, err := tb.Route(in(fmt.Sprintf("%d-%d", g, i%20), 200+i, 16), int64(i))
				if err != nil {
					t.Error(err)
					return
				}
				if i%7 == 0 {
					tb.SetReplicas(replicas("a", "b", "c", "d")[:3+i%2])
				}
				tb.Release(&tk, Outcome{OK: true, Known: true, PromptN: 50, PredictedN: 16}, int64(i))
			}
		}()
	}
	wg.Wait()
	for _, r := range tb.Status().Replicas {
		if r.Load != (policy.Load{}) {
			t.Errorf("%s load %+v, want zero", r.Name, r.Load)
		}
	}
}

func TestPlacementMemoryLRUAndTTL(t *testing.T) {
	m := newMemory(3, 100, 4)
	for k := uint64(1); k <= 3; k++ {
		m.put(k, Place{Replica: uint32(k)}, 0)
	}
	m.get(1, 10)                    // 1 is now the most recently used
	m.put(4, Place{Replica: 4}, 10) // evicts 2, the least recently used
	if _, _, ok := m.get(2, 10); ok {
		t.Error("2 not evicted")
	}
	for _, k := range []uint64{1, 3, 4} {
		if _, _, ok := m.get(k, 20); !ok {
			t.Errorf("%d evicted", k)
		}
	}
	if _, _, ok := m.get(1, 200); ok {
		t.Error("1 outlived its TTL")
	}
	if m.len() != 2 {
		t.Errorf("len = %d, want 2", m.len())
	}
	// Reuse of freed slots keeps the list consistent.
	for k := uint64(10); k < 100; k++ {
		m.put(k, Place{}, 300)
	}
	if m.len() != 3 {
		t.Errorf("len = %d, want 3", m.len())
	}
}

// TestPlacementMemoryBytes: the budget is 128 bytes per conversation.
func TestPlacementMemoryBytes(t *testing.T) {
	const n = 200_000
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	m := newMemory(n, 1<<62, 4)
	for k := uint64(0); k < n; k++ {
		m.put(k*0x9e3779b97f4a7c15, Place{Replica: 1, Cached: 1000}, int64(k))
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	per := float64(after.HeapAlloc-before.HeapAlloc) / n
	t.Logf("placement memory: %.1f bytes per conversation", per)
	if per > 128 {
		t.Errorf("%.1f bytes per conversation, budget 128", per)
	}
	runtime.KeepAlive(m)
}

func BenchmarkRoute(b *testing.B) {
	for _, n := range []int{3, 64, 1024} {
		b.Run(fmt.Sprintf("replicas=%d", n), func(b *testing.B) {
			tb := newTable(b, "llm-aware")
			names := make([]string, n)
			for i := range names {
				names[i] = fmt.Sprintf("llm-%d", i)
			}
			tb.SetReplicas(replicas(names...))
			inputs := make([]Input, 1024)
			for i := range inputs {
				inputs[i] = in(fmt.Sprintf("conv-%d", i), 1000+i, 128)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				tk, _, _ := tb.Route(inputs[i&1023], int64(i))
				tb.Release(&tk, Outcome{OK: true, Known: true, PromptN: 300, PredictedN: 128}, int64(i))
			}
		})
	}
}

// TestUnhealthyTakesNoRequests (issue 10): a replica whose health checks
// fail stays on the ring but takes no new request; when every replica is
// unhealthy, Route says ErrNoReplica; a replica that recovers takes its
// conversations back.
func TestUnhealthyTakesNoRequests(t *testing.T) {
	tb := newTable(t, "consistent")
	tb.SetReplicas(replicas("a", "b", "c"))
	tk, _, err := tb.Route(in("conv", 40, 1), 0)
	if err != nil {
		t.Fatal(err)
	}
	tb.Release(&tk, Outcome{}, 0)
	home := tk.Replica.Name
	if !tb.SetHealthy(home, false) || tb.SetHealthy(home, false) {
		t.Fatal("SetHealthy must report a change exactly once")
	}
	for i := range 50 {
		tk2, _, err := tb.Route(in(fmt.Sprint("k", i), 40, 1), 0)
		if err != nil {
			t.Fatal(err)
		}
		if tk2.Replica.Name == home {
			t.Fatalf("request %d went to unhealthy %s", i, home)
		}
		tb.Release(&tk2, Outcome{}, 0)
	}
	if st := tb.Status(); st.Healthy() != 2 {
		t.Fatalf("healthy = %d, want 2", st.Healthy())
	}
	for _, n := range []string{"a", "b", "c"} {
		tb.SetHealthy(n, false)
	}
	if _, _, err := tb.Route(in("conv", 40, 1), 0); !errors.Is(err, ErrNoReplica) {
		t.Fatalf("all unhealthy: err = %v, want ErrNoReplica", err)
	}
	for _, n := range []string{"a", "b", "c"} {
		tb.SetHealthy(n, true)
	}
	tk, _, _ = tb.Route(in("conv", 40, 1), 0)
	if tk.Replica.Name != home {
		t.Fatalf("after recovery conv went to %s, want its home %s", tk.Replica.Name, home)
	}
	// Health survives a membership change, and a name not yet in the set is
	// remembered.
	tb.SetHealthy("d", false)
	tb.SetReplicas(replicas("a", "b", "c", "d"))
	if st := tb.Status(); st.Healthy() != 3 {
		t.Fatalf("healthy after d joined unhealthy = %d, want 3", st.Healthy())
	}
}

// TestLoadArithmeticSaturates (issue 10): whatever charges requests carry
// (huge max_tokens included), loads never overflow and never go negative,
// and return to zero when everything is released (property test).
func TestLoadArithmeticSaturates(t *testing.T) {
	tb := newTable(t, "bounded")
	tb.SetReplicas(replicas("a", "b", "c"))
	var open []Ticket
	sizes := []int{0, 1, 1 << 20, 1<<62 - 1, 1 << 40, 7}
	for i := range 2000 {
		if i%3 == 2 && len(open) > 0 {
			k := (i * 7919) % len(open)
			tb.Release(&open[k], Outcome{}, 0)
			open = append(open[:k], open[k+1:]...)
		} else {
			tk, _, err := tb.Route(in(fmt.Sprint("c", i%37), 100, sizes[i%len(sizes)]), 0)
			if err != nil {
				t.Fatal(err)
			}
			open = append(open, tk)
		}
		for _, r := range tb.Status().Replicas {
			if r.Load.Tokens < 0 || r.Load.Requests < 0 {
				t.Fatalf("step %d: negative load %+v on %s", i, r.Load, r.Name)
			}
		}
	}
	for k := range open {
		tb.Release(&open[k], Outcome{}, 0)
	}
	for _, r := range tb.Status().Replicas {
		if r.Load != (policy.Load{}) {
			t.Fatalf("after releasing everything %s has load %+v", r.Name, r.Load)
		}
	}
}

// TestLearnsSpeed (issue 12): each answer with counts teaches its replica's
// rates, from the replica's own times when it gives them, else from the
// measured time to first token and latency; the view's rows carry them.
func TestLearnsSpeed(t *testing.T) {
	tb := newTable(t, "consistent")
	tb.SetReplicas(replicas("a", "b", "c"))
	tk, _, _ := tb.Route(in("conv", 400, 50), 0)
	// llama.cpp timings: 1,000 tokens in 500 ms, 100 tokens in 2 s.
	tb.Release(&tk, Outcome{OK: true, Known: true, PromptN: 1000, PredictedN: 100,
		PromptTime: 500 * time.Millisecond, PredictedTime: 2 * time.Second, TTFT: 9 * time.Second, Latency: 20 * time.Second}, 0)
	sp := tb.Speed(tk.Replica.Name)
	if sp.Prefill != 2000 || sp.Decode != 50 || sp.Samples != 1 {
		t.Fatalf("after one answer: %+v, want prefill 2000/s decode 50/s (the replica's own times)", sp)
	}
	// No timings (an OpenAI-style answer): 1,000 tokens ÷ 1 s TTFT = 1000/s,
	// moving the mean by a fifth: 2000 + 0.2·(1000−2000) = 1800; decode 100
	// tokens in 4 s = 25/s → 50 + 0.2·(25−50) = 45.
	tk, _, _ = tb.Route(in("conv", 400, 50), 0)
	tb.Release(&tk, Outcome{OK: true, Known: true, PromptN: 1000, PredictedN: 100,
		TTFT: time.Second, Latency: 5 * time.Second}, 0)
	if sp = tb.Speed(tk.Replica.Name); math.Abs(sp.Prefill-1800) > 1e-9 || math.Abs(sp.Decode-45) > 1e-9 || sp.Samples != 2 {
		t.Fatalf("after two answers: %+v, want prefill 1800/s decode 45/s", sp)
	}
	// Too small to measure, failed, or without counts: nothing learned.
	for _, out := range []Outcome{
		{OK: true, Known: true, PromptN: 3, PredictedN: 2, TTFT: time.Second, Latency: 2 * time.Second},
		{OK: false, Known: true, PromptN: 1000, TTFT: time.Second},
		{OK: true, Known: false, TTFT: time.Second, Latency: 2 * time.Second},
	} {
		tk, _, _ = tb.Route(in("conv", 400, 50), 0)
		tb.Release(&tk, out, 0)
	}
	if got := tb.Speed(tk.Replica.Name); got != sp {
		t.Fatalf("unusable answers changed the speed: %+v → %+v", sp, got)
	}
	// The view's row carries it.
	var seen policy.Speed
	tb.SetPolicy(rowSpy{func(v *policy.View) { seen = v.Rows[tk.Index].Speed }})
	tk, _, _ = tb.Route(in("conv", 400, 50), 0)
	if seen != sp {
		t.Fatalf("row speed %+v, want %+v", seen, sp)
	}
}

// rowSpy is a policy that shows a test the view and picks replica 0.
type rowSpy struct{ see func(*policy.View) }

func (rowSpy) Name() string { return "spy" }
func (s rowSpy) Pick(req *policy.Request, v *policy.View, d *policy.Decision) {
	s.see(v)
	*d = policy.Decision{Replica: 0, Reason: "spy"}
}

// TestCacheBeliefAge (issue 12): a conversation's request says how old its
// placement is (time since its last use) and how many tokens were routed
// to its replica by others since its last answer there.
func TestCacheBeliefAge(t *testing.T) {
	tb := newTable(t, "consistent")
	tb.SetReplicas(replicas("a"))
	var seen policy.Request
	tb.SetPolicy(reqSpy{func(r *policy.Request) { seen = *r }})
	tk, _, _ := tb.Route(in("conv", 400, 50), 1000)
	tb.Release(&tk, Outcome{OK: true, Known: true, PromptN: 100, PredictedN: 20}, 2000)
	for i := range 3 { // others' traffic: charges of 100+50 estimated... each
		o, _, _ := tb.Route(in(fmt.Sprint("other", i), 400, 50), 3000)
		tb.Release(&o, Outcome{OK: true, Known: true, PromptN: 100, PredictedN: 20}, 4000)
	}
	tb.Route(in("conv", 480, 50), 9000)
	if seen.Last != 0 || seen.SentSince != 3*150 {
		t.Fatalf("request: last %d sent since %d, want 0, 450 tokens", seen.Last, seen.SentSince)
	}
}

// reqSpy is a policy that shows a test the request and picks replica 0.
type reqSpy struct{ see func(*policy.Request) }

func (reqSpy) Name() string { return "spy" }
func (s reqSpy) Pick(req *policy.Request, v *policy.View, d *policy.Decision) {
	s.see(req)
	*d = policy.Decision{Replica: 0, Reason: "spy", Charge: int64(req.PromptTokens + req.OutputTokens)}
}

// TestRouteWith: a request routed with a given policy ignores the
// configured one. Behind a consistent-hash table, requests for the same key
// would all land on its home; routed with policy.Least they go where the
// fewest are in flight, skip unhealthy and excluded replicas, and their
// release returns the load like any other.
func TestRouteWith(t *testing.T) {
	tb := newTable(t, "consistent")
	tb.SetReplicas(replicas("a", "b", "c"))
	var held []Ticket
	seen := map[string]int{}
	for range 3 {
		tk, d, err := tb.RouteWith(policy.Least{}, in("same", 10, 1), 0)
		if err != nil {
			t.Fatal(err)
		}
		if d.Trace.Policy != "least-loaded" {
			t.Errorf("decision by %q, want least-loaded", d.Trace.Policy)
		}
		seen[tk.Replica.Name]++
		held = append(held, tk)
	}
	if len(seen) != 3 {
		t.Errorf("three requests in flight with the same key went to %v, want one on each replica", seen)
	}
	// The configured policy is untouched: the same key still has one home.
	home, _, _ := tb.Route(in("same", 10, 1), 0)
	again, _, _ := tb.Route(in("same", 10, 1), 0)
	if home.Replica.Name != again.Replica.Name {
		t.Errorf("consistent routed one key to %s and %s", home.Replica.Name, again.Replica.Name)
	}
	tb.Release(&home, Outcome{}, 0)
	tb.Release(&again, Outcome{}, 0)
	for i := range held {
		tb.Release(&held[i], Outcome{}, 0)
	}
	for _, r := range tb.Status().Replicas {
		if r.Load.Requests != 0 || r.Load.Tokens != 0 {
			t.Errorf("%s: load %+v after every release, want zero", r.Name, r.Load)
		}
	}
	// Unhealthy and excluded replicas are skipped; with none left, ErrNoReplica.
	tb.SetHealthy("a", false)
	tk, _, err := tb.RouteWith(policy.Least{}, in("x", 10, 1), 0, "b")
	if err != nil || tk.Replica.Name != "c" {
		t.Fatalf("a unhealthy, b excluded: routed to %q (%v), want c", tk.Replica.Name, err)
	}
	tb.Release(&tk, Outcome{}, 0)
	if _, _, err := tb.RouteWith(policy.Least{}, in("x", 10, 1), 0, "b", "c"); !errors.Is(err, ErrNoReplica) {
		t.Fatalf("none left: err = %v, want ErrNoReplica", err)
	}
}

// TestCachedUnknownIsNotLost (issue 14): an answer that does not say how
// many prompt tokens were reused (vLLM without --enable-prompt-tokens-details)
// is not read as a lost cache; one that says 0 is.
func TestCachedUnknownIsNotLost(t *testing.T) {
	tb := newTable(t, "llm-aware")
	tb.SetReplicas(replicas("a", "b", "c"))
	tk, _, _ := tb.Route(in("conv", 400, 50), 0)
	tb.Release(&tk, Outcome{OK: true, Known: true, PromptN: 100, PredictedN: 30}, 1)
	for _, tc := range []struct {
		unknown, lost bool
	}{{true, false}, {false, true}} {
		tk, _, _ = tb.Route(in("conv", 480, 50), 2)
		if tk.ExpectCached == 0 {
			t.Fatal("turn 2 expects no cache")
		}
		fb := tb.Release(&tk, Outcome{OK: true, Known: true, PromptN: 150, PredictedN: 30, CachedUnknown: tc.unknown}, 3)
		if fb.CacheLost != tc.lost {
			t.Errorf("cached unknown %v: cache lost %v, want %v", tc.unknown, fb.CacheLost, tc.lost)
		}
	}
}
