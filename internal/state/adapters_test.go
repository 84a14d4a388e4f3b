package state

import (
	"fmt"
	"testing"
	"time"

	"github.com/llm-ring/llm-ring/internal/policy"
)

// adapterTable is a table of replicas picked by least-loaded (fewest
// requests in flight, ties by ring order), with adapter affinity on or off.
func adapterTable(t testing.TB, affinity bool, names ...string) *Table {
	t.Helper()
	p, err := policy.New("least-loaded", nil)
	if err != nil {
		t.Fatal(err)
	}
	tb := New(Config{VirtualNodes: 16, CharsPerToken: 4, MaxEntries: 4096, TTL: time.Minute, AdapterAffinity: affinity}, p)
	tb.SetReplicas(replicas(names...))
	return tb
}

func adapters(max int, running, waiting []string) policy.Reported {
	return policy.Reported{Adapters: policy.Adapters{Running: running, Waiting: waiting, Max: max, Has: true}}
}

func withAdapter(key, adapter string) Input {
	i := in(key, 40, 10)
	i.Adapter = adapter
	return i
}

// load puts n requests without an adapter in flight on replica name.
func load(t *testing.T, tb *Table, name string, n int) {
	t.Helper()
	others := []string{}
	for _, r := range tb.Status().Replicas {
		if r.Name != name {
			others = append(others, r.Name)
		}
	}
	for i := range n {
		if tk, _, err := tb.Route(in(fmt.Sprint("load-", name, i), 40, 10), 0, others...); err != nil || tk.Replica.Name != name {
			t.Fatalf("loading %s: %s, %v", name, tk.Replica.Name, err)
		}
	}
}

// TestAdapterTiers: the preference order, hand-computed. For adapter x,
// each replica with two slots (Max 2):
//
//	a: x running                      → 1 resident
//	b: y running (1 of 2 slots used)  → 2 free slot
//	c: y, z running, x waiting (full) → 3 waiting
//	d: y, z running (full)            → 4 must evict
//
// Least-loaded alone would pick d, the only idle one (a, b, c have one
// request in flight each: a stays under the spill cap, ⌈2 × 4/4⌉ = 2 with
// this request): each step excludes the best one left (as a failover does)
// and gets the next tier, never d while another exists.
func TestAdapterTiers(t *testing.T) {
	tb := adapterTable(t, true, "a", "b", "c", "d")
	tb.SetReported("a", adapters(2, []string{"x"}, nil))
	tb.SetReported("b", adapters(2, []string{"y"}, nil))
	tb.SetReported("c", adapters(2, []string{"y", "z"}, []string{"x"}))
	tb.SetReported("d", adapters(2, []string{"y", "z"}, nil))
	load(t, tb, "a", 1)
	load(t, tb, "b", 1)
	load(t, tb, "c", 1)
	steps := []struct {
		exclude []string
		want    string
		tier    int
	}{
		{nil, "a", TierResident},
		{[]string{"a"}, "b", TierFreeSlot},
		{[]string{"a", "b"}, "c", TierWaiting},
		{[]string{"a", "b", "c"}, "d", TierEvict},
	}
	for _, st := range steps {
		// A fresh conversation each time: no placement memory in the way.
		tk, d, err := tb.Route(withAdapter(fmt.Sprint("conv-", st.want), "x"), 1, st.exclude...)
		if err != nil {
			t.Fatal(err)
		}
		if tk.Replica.Name != st.want || tk.AdapterTier != st.tier {
			t.Errorf("excluding %v: → %s (tier %d), want %s (tier %d)\n%s", st.exclude, tk.Replica.Name, tk.AdapterTier, st.want, st.tier, d.Format())
		}
		tb.Release(&tk, Outcome{OK: true}, 2)
	}
	// Without x anywhere: b has a free slot, the others are full; a
	// request for w goes to b even though d is idle.
	if tk, _, _ := tb.Route(withAdapter("conv-w", "w"), 3); tk.Replica.Name != "b" || tk.AdapterTier != TierFreeSlot {
		t.Errorf("adapter w: → %s (tier %d), want b (free slot)", tk.Replica.Name, tk.AdapterTier)
	}
}

// TestAdapterSpill: when every resident replica is queueing (reports
// requests waiting, or no queue) and one more request would put it over
// ⌈spill × the mean requests in flight (this one counted)⌉, the free-slot
// replicas join the pick; never one that must evict. Replicas a (x
// resident), b (a free slot), c (full: evict):
func TestAdapterSpill(t *testing.T) {
	noQueue := policy.Reported{}
	idle := policy.Reported{HasQueue: true, Waiting: 0}
	busy := policy.Reported{HasQueue: true, Waiting: 3}
	for _, tt := range []struct {
		name         string
		spill        float64
		queue        policy.Reported // a's queue report
		loadA, loadB int
		want         string
		tier         int
	}{
		// cap ⌈2 × (2+1)/3⌉ = 2, a would have 2: stays.
		{"under the cap", 0, noQueue, 1, 1, "a", TierResident},
		// cap ⌈2 × (5+1)/3⌉ = 4, a would have 5: b (c is idle but full).
		{"over the cap", 0, noQueue, 4, 1, "b", TierFreeSlot},
		{"over the cap, queueing", 0, busy, 4, 1, "b", TierFreeSlot},
		// a reports nothing waiting: it keeps x, however many in flight.
		{"over the cap, not queueing", 0, idle, 9, 1, "a", TierResident},
		// factor 3: cap ⌈3 × 6/3⌉ = 6, a would have 5: stays.
		{"factor 3", 3, noQueue, 4, 1, "a", TierResident},
		// The tiers strictly: a, however loaded.
		{"never", -1, busy, 9, 0, "a", TierResident},
	} {
		p, _ := policy.New("least-loaded", nil)
		tb := New(Config{VirtualNodes: 16, CharsPerToken: 4, MaxEntries: 100, TTL: time.Minute, AdapterAffinity: true, AdapterSpill: tt.spill}, p)
		tb.SetReplicas(replicas("a", "b", "c"))
		ra := tt.queue
		ra.Adapters = policy.Adapters{Running: []string{"x"}, Max: 2, Has: true}
		tb.SetReported("a", ra)
		tb.SetReported("b", adapters(2, nil, nil))
		tb.SetReported("c", adapters(1, []string{"y"}, nil))
		load(t, tb, "a", tt.loadA)
		load(t, tb, "b", tt.loadB)
		tk, d, _ := tb.Route(withAdapter("k", "x"), 1)
		if tk.Replica.Name != tt.want || tk.AdapterTier != tt.tier {
			t.Errorf("%s (a=%d b=%d): x → %s (tier %d), want %s (tier %d)\n%s", tt.name, tt.loadA, tt.loadB, tk.Replica.Name, tk.AdapterTier, tt.want, tt.tier, d.Format())
		}
	}
	// Two replicas, b idle, a with k in flight: the default cap
	// ⌈2 × (k+1)/2⌉ = k+1 is never passed (a keeps x); with factor 1.5,
	// ⌈1.5 × (k+1)/2⌉ is 3 for k = 2 (a stays) and for k = 3 (b).
	for _, tt := range []struct {
		spill float64
		k     int
		want  string
	}{{0, 5, "a"}, {1.5, 2, "a"}, {1.5, 3, "b"}} {
		p, _ := policy.New("least-loaded", nil)
		tb := New(Config{VirtualNodes: 16, CharsPerToken: 4, MaxEntries: 100, TTL: time.Minute, AdapterAffinity: true, AdapterSpill: tt.spill}, p)
		tb.SetReplicas(replicas("a", "b"))
		tb.SetReported("a", adapters(2, []string{"x"}, nil))
		load(t, tb, "a", tt.k)
		if tk, _, _ := tb.Route(withAdapter("k", "x"), 1); tk.Replica.Name != tt.want {
			t.Errorf("two replicas, spill %g, a with %d in flight: x → %s, want %s", tt.spill, tt.k, tk.Replica.Name, tt.want)
		}
	}
}

// TestAdapterTierWithinPolicy: among the replicas of the best tier the
// policy picks as usual (least loaded of the two holding x).
func TestAdapterTierWithinPolicy(t *testing.T) {
	tb := adapterTable(t, true, "a", "b", "c")
	tb.SetReported("a", adapters(4, []string{"x"}, nil))
	tb.SetReported("b", adapters(4, []string{"x"}, nil))
	load(t, tb, "a", 2)
	load(t, tb, "b", 1)
	if tk, _, _ := tb.Route(withAdapter("k", "x"), 1); tk.Replica.Name != "b" {
		t.Fatalf("x → %s, want b (resident and less loaded than a; c idle but without x)", tk.Replica.Name)
	}
}

// TestAdapterOptimisticMemory: between reports, the router's own requests
// in flight and its recent routing count as resident; after AdapterTTL
// idle the memory no longer holds; a replica that leaves forgets it.
func TestAdapterOptimisticMemory(t *testing.T) {
	tb := adapterTable(t, true, "a", "b") // no reports at all: slots unknown, every replica tier 2
	load(t, tb, "a", 1)
	t0 := int64(time.Second)
	first, _, _ := tb.Route(withAdapter("c1", "x"), t0)
	if first.Replica.Name != "b" || first.AdapterTier != TierFreeSlot {
		t.Fatalf("first x → %s (tier %d), want b (least loaded, free slot)", first.Replica.Name, first.AdapterTier)
	}
	load(t, tb, "b", 2) // b: 3 in flight, a: 1
	// In flight there: resident, although least-loaded prefers a.
	second, _, _ := tb.Route(withAdapter("c2", "x"), t0+1)
	if second.Replica.Name != "b" || second.AdapterTier != TierResident {
		t.Fatalf("second x → %s (tier %d), want b (x in flight there)", second.Replica.Name, second.AdapterTier)
	}
	tb.Release(&first, Outcome{OK: true}, t0+2)
	tb.Release(&second, Outcome{OK: true}, t0+3)
	if e := tb.adapterEntry(second.id, "x"); e == nil || e.inflight != 0 {
		t.Fatalf("after both releases: entry %+v, want x idle", e)
	}
	// Idle, routed recently: still resident.
	third, _, _ := tb.Route(withAdapter("c3", "x"), t0+3+int64(AdapterTTL)/2)
	if third.Replica.Name != "b" || third.AdapterTier != TierResident {
		t.Fatalf("x soon after → %s (tier %d), want b (recently routed)", third.Replica.Name, third.AdapterTier)
	}
	tb.Release(&third, Outcome{OK: true}, t0+4+int64(AdapterTTL)/2)
	// Idle longer than the TTL: forgotten, least-loaded picks a.
	late := t0 + 5 + int64(AdapterTTL)*2
	if tk, _, _ := tb.Route(withAdapter("c4", "x"), late); tk.Replica.Name != "a" || tk.AdapterTier != TierFreeSlot {
		t.Fatalf("x after the TTL → %s (tier %d), want a (free slot, least loaded)", tk.Replica.Name, tk.AdapterTier)
	}
	// Reset (a new experiment run) forgets idle adapters, keeps those in
	// flight.
	tb.Reset()
	if tb.adapterEntry(tb.idOf["b"], "x") != nil || tb.adapterEntry(tb.idOf["a"], "x") == nil {
		t.Fatal("Reset: want b's idle x forgotten, a's x in flight kept")
	}
	// a holds x now (in flight); it leaves and comes back: forgotten.
	tb.SetReplicas(replicas("b"))
	tb.SetReplicas(replicas("a", "b"))
	if e := tb.adapterEntry(tb.idOf["a"], "x"); e != nil {
		t.Fatalf("a left and rejoined: its adapter memory still holds %+v", e)
	}
}

// TestAdapterMemoryBound: at most Max idle adapters are remembered per
// replica (AdapterMemory when Max is unknown); adapters in flight are
// never dropped.
func TestAdapterMemoryBound(t *testing.T) {
	tb := adapterTable(t, true, "a", "b")
	tb.SetReported("a", adapters(3, nil, nil))
	var held Ticket
	for i := range 10 {
		tk, _, _ := tb.Route(withAdapter(fmt.Sprint("c", i), fmt.Sprint("ad", i)), int64(i), "b")
		if i == 0 {
			held = tk // ad0 stays in flight
			continue
		}
		tb.Release(&tk, Outcome{OK: true}, int64(i))
	}
	id := tb.idOf["a"]
	if got := len(tb.adapters[id]); got != 4 {
		t.Fatalf("a remembers %d adapters, want 4 (ad0 in flight + the 3 most recent)", got)
	}
	for _, name := range []string{"ad0", "ad7", "ad8", "ad9"} {
		if tb.adapterEntry(id, name) == nil {
			t.Errorf("%s forgotten", name)
		}
	}
	tb.Release(&held, Outcome{OK: true}, 10)
	tb.SetReported("b", adapters(0, nil, nil)) // Max unknown: AdapterMemory
	for i := range 20 {
		tk, _, _ := tb.Route(withAdapter(fmt.Sprint("d", i), fmt.Sprint("bd", i)), int64(20+i), "a")
		tb.Release(&tk, Outcome{OK: true}, int64(20+i))
	}
	if got := len(tb.adapters[tb.idOf["b"]]); got != AdapterMemory {
		t.Fatalf("b (slots unknown) remembers %d adapters, want %d", got, AdapterMemory)
	}
}

// TestAdapterInFlightFillsSlots: this router's requests in flight for
// other adapters use slots the last report does not show yet.
func TestAdapterInFlightFillsSlots(t *testing.T) {
	tb := adapterTable(t, true, "a", "b")
	tb.SetReported("a", adapters(2, []string{"y"}, nil)) // one free slot by the report
	tb.SetReported("b", adapters(2, []string{"y", "z"}, nil))
	// A request for v takes a's free slot (in flight, not yet reported).
	if tk, _, _ := tb.Route(withAdapter("c1", "v"), 0); tk.Replica.Name != "a" || tk.AdapterTier != TierFreeSlot {
		t.Fatalf("v → %s (tier %d), want a (free slot)", tk.Replica.Name, tk.AdapterTier)
	}
	// Now a is full too: w must evict somewhere; least-loaded picks b.
	if tk, _, _ := tb.Route(withAdapter("c2", "w"), 1); tk.Replica.Name != "b" || tk.AdapterTier != TierEvict {
		t.Fatalf("w → %s (tier %d), want b (every replica full, b less loaded)", tk.Replica.Name, tk.AdapterTier)
	}
}

// TestAdapterAffinityOff: with AdapterAffinity false the adapter is
// ignored: the policy alone picks, no tier is recorded.
func TestAdapterAffinityOff(t *testing.T) {
	tb := adapterTable(t, false, "a", "b")
	tb.SetReported("a", adapters(2, []string{"x"}, nil))
	load(t, tb, "a", 1)
	tk, _, _ := tb.Route(withAdapter("c", "x"), 0)
	if tk.Replica.Name != "b" || tk.AdapterTier != 0 || tk.adapter != "" {
		t.Fatalf("affinity off: → %s (tier %d), want b (least loaded), tier 0", tk.Replica.Name, tk.AdapterTier)
	}
	tb.Release(&tk, Outcome{OK: true}, 1)
	if len(tb.adapters[tb.idOf["b"]]) != 0 {
		t.Fatal("affinity off: the adapter memory learned a request")
	}
}

// TestAdapterCandidates: the failover list follows the tiers too.
func TestAdapterCandidates(t *testing.T) {
	tb := adapterTable(t, true, "a", "b", "c")
	tb.SetReported("a", adapters(1, []string{"y"}, nil)) // full: evict
	tb.SetReported("b", adapters(1, nil, []string{"x"})) // waiting
	tb.SetReported("c", adapters(1, []string{"x"}, nil)) // resident
	in := withAdapter("k", "x")
	tk, _, _ := tb.Route(in, 0)
	if tk.Replica.Name != "c" {
		t.Fatalf("x → %s, want c", tk.Replica.Name)
	}
	got := tb.Candidates(nil, in, &tk, 0, 2)
	if len(got) != 2 || got[0].Name != "b" || got[1].Name != "a" {
		t.Fatalf("candidates %v, want [b a] (waiting, then evict)", got)
	}
}

// TestRouteAllocs: a pick allocates nothing, with or without an adapter
// (the adapter's memory entry is made once).
func TestRouteAllocs(t *testing.T) {
	tb := adapterTable(t, true, "a", "b", "c")
	tb.SetReported("b", adapters(2, []string{"x"}, []string{"y"}))
	for _, adapter := range []string{"", "x", "z"} {
		inputs := []Input{withAdapter("c1", adapter), withAdapter("c2", adapter), withAdapter("c3", adapter)}
		var i int64
		allocs := testing.AllocsPerRun(300, func() {
			i++
			tk, _, err := tb.Route(inputs[i%3], i)
			if err != nil {
				t.Fatal(err)
			}
			tb.Release(&tk, Outcome{OK: true, Known: true, PromptN: 10, PredictedN: 10}, i)
		})
		if allocs != 0 {
			t.Errorf("adapter %q: %.1f allocations per route and release, want 0", adapter, allocs)
		}
	}
	// Churn: 12 adapters through 2 remembered slots per replica, entries
	// dropped and made all the time.
	tb.SetReported("a", adapters(2, nil, nil))
	tb.SetReported("c", adapters(2, nil, nil))
	var churn []Input
	for i := range 12 {
		churn = append(churn, withAdapter(fmt.Sprint("k", i), fmt.Sprint("ad", i)))
	}
	var i int64
	allocs := testing.AllocsPerRun(600, func() {
		i++
		tk, _, _ := tb.Route(churn[i%12], i)
		tb.Release(&tk, Outcome{OK: true}, i)
	})
	if allocs != 0 {
		t.Errorf("adapter churn: %.1f allocations per route and release, want 0", allocs)
	}
}

func BenchmarkRouteAdapter(b *testing.B) {
	for _, n := range []int{3, 64} {
		b.Run(fmt.Sprintf("replicas=%d", n), func(b *testing.B) {
			names := make([]string, n)
			for i := range names {
				names[i] = fmt.Sprintf("llm-%d", i)
			}
			tb := adapterTable(b, true, names...)
			for i, name := range names {
				tb.SetReported(name, adapters(4, []string{fmt.Sprint("ad", i%8)}, nil))
			}
			inputs := make([]Input, 1024)
			for i := range inputs {
				inputs[i] = withAdapter(fmt.Sprintf("conv-%d", i), fmt.Sprint("ad", i%16))
			}
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				tk, _, _ := tb.Route(inputs[i&1023], int64(i))
				tb.Release(&tk, Outcome{OK: true, Known: true, PromptN: 300, PredictedN: 128}, int64(i))
			}
		})
	}
}
