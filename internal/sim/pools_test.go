package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/llm-ring/llm-ring/internal/config"
	"github.com/llm-ring/llm-ring/internal/model"
	"github.com/llm-ring/llm-ring/internal/policy"
	"github.com/llm-ring/llm-ring/internal/pool"
	"github.com/llm-ring/llm-ring/internal/record"
	"github.com/llm-ring/llm-ring/internal/replicaset"
	"github.com/llm-ring/llm-ring/internal/traffic"
)

// poolRun is one open-loop run of an embedded workload naming models, set
// up as llm-ring sim --workload does it.
type poolRun struct {
	rows   rowsOf
	res    Result
	reqs   []traffic.WorkloadRequest
	spec   Spec
	target map[string]traffic.Target // by conversation
}

func runPools(t *testing.T, workload, pol string, seed int64, affinity bool, rates ...float64) *poolRun {
	t.Helper()
	w, err := traffic.LoadWorkload(fstest.MapFS{}, workload)
	if err != nil {
		t.Fatal(err)
	}
	st := traffic.Stages{Rates: rates, StageS: 30, WarmupS: 5, Poisson: true}
	pr := &poolRun{reqs: w.Requests(traffic.OpenArrivals(st, seed), seed), target: map[string]traffic.Target{}}
	for _, r := range pr.reqs {
		pr.target[r.Conversation] = r.Target
	}
	prof, src, err := WorkloadRun(w.Name, pr.reqs)
	if err != nil {
		t.Fatal(err)
	}
	pools, err := WorkloadPools(&w, affinity, 1)
	if err != nil {
		t.Fatal(err)
	}
	pr.spec = Spec{RunID: "r", Policy: pol, Seed: seed, Profile: prof, Replicas: len(pools.Fleet), Model: model.DefaultConfig(),
		Router: DefaultRouter(), Source: src(), Pools: pools}
	if pr.res, err = Run(context.Background(), pr.spec, &pr.rows); err != nil {
		t.Fatal(err)
	}
	if len(pr.rows) != len(pr.reqs) {
		t.Fatalf("%d rows for %d requests", len(pr.rows), len(pr.reqs))
	}
	return pr
}

// Every request of the multi-model workload is served by a replica of its
// model, under every policy: pools keep models apart whatever the policy.
func TestPoolsMultiModelRoutesToItsModel(t *testing.T) {
	for _, pol := range []string{"round-robin", "consistent", "least-loaded", "llm-aware", "cache-aware"} {
		pr := runPools(t, "multi-model", pol, 1, true, 6)
		serves := map[string]string{} // replica -> model
		for i, r := range pr.spec.Pools.Fleet {
			serves[ReplicaName(i)] = r.Models[0].Name
		}
		seen := map[string]int{}
		for _, r := range pr.rows {
			base, tag, ok := ParsePoolTag(r.Conversation)
			want := pr.target[base]
			switch {
			case !ok:
				t.Fatalf("%s: row without a pool tag: %q", pol, r.Conversation)
			case r.Status != 200:
				t.Fatalf("%s: %s failed: %s", pol, base, r.Error)
			case tag.Model != want.Model || serves[r.Replica] != want.Model:
				t.Fatalf("%s: %s asks for %s, served as %s by %s (which serves %s)", pol, base, want.Model, tag.Model, r.Replica, serves[r.Replica])
			}
			seen[tag.Model]++
		}
		if len(seen) != 3 {
			t.Fatalf("%s: models served %v, want all three", pol, seen)
		}
	}
}

// The same spec gives the same rows and result; another seed other rows.
func TestPoolsDeterministic(t *testing.T) {
	a := runPools(t, "lora", "llm-aware", 3, true, 6)
	b := runPools(t, "lora", "llm-aware", 3, true, 6)
	if !reflect.DeepEqual(a.rows, b.rows) || a.res.Events != b.res.Events || !reflect.DeepEqual(a.res.Info, b.res.Info) {
		t.Fatal("two runs of the same spec differ")
	}
	if c := runPools(t, "lora", "llm-aware", 4, true, 6); reflect.DeepEqual(a.rows, c.rows) {
		t.Fatal("seeds 3 and 4 gave the same rows")
	}
}

// The rows' adapter-load flags count the loads the replica model made
// (Stats.AdapterLoads, in the run's metrics) within 2 %: a flag is the
// routing's foresight (not resident, none on its way), and an adapter
// evicted between routing and the request's start is a load it missed. Every
// row names the adapter its conversation asked for, and its pick's adapter
// tier (none without affinity).
func TestPoolsLoadFlagsMatchModel(t *testing.T) {
	for _, pol := range []string{"round-robin", "llm-aware"} {
		for _, aff := range []bool{true, false} {
			pr := runPools(t, "lora", pol, 2, aff, 4, 8)
			flags := 0
			for _, r := range pr.rows {
				base, tag, _ := ParsePoolTag(r.Conversation)
				if tag.Adapter != pr.target[base].Adapter || tag.Adapter == "" {
					t.Fatalf("%s: row asks for %q, its conversation %q", base, tag.Adapter, pr.target[base].Adapter)
				}
				if tag.Load {
					flags++
				}
				if (aff && (tag.Tier < 1 || tag.Tier > 4)) || (!aff && tag.Tier != 0) {
					t.Fatalf("%s affinity %v: %s picked in adapter tier %d", pol, aff, base, tag.Tier)
				}
			}
			loads := pr.res.Info.Metrics[`sim_adapter_loads_total{model="llama-3.1-8b-instruct"}`]
			if math.Abs(float64(flags)-loads) > 0.02*loads || loads == 0 {
				t.Errorf("%s affinity %v: %d rows flagged, the model loaded %v adapters", pol, aff, flags, loads)
			}
		}
	}
}

// A model no replica serves is the router's 404, and the conversation ends.
func TestPoolsUnknownModel(t *testing.T) {
	p := tinyProfile(2, 2)
	p.TurnsMin, p.TurnsMax = 1, 1
	src := fixed{
		{ID: "c0", Turns: []traffic.Turn{{User: "hello", MaxTokens: 4}}, Model: "a"},
		{ID: "c1", Turns: []traffic.Turn{{User: "hello", MaxTokens: 4}}, Model: "nope"},
	}
	fleet := []FleetReplica{{Models: []replicaset.Model{{Name: "a"}}, Model: tinyModel(0)}}
	var rows rowsOf
	_, err := Run(context.Background(), Spec{RunID: "r", Policy: "round-robin", Seed: 1, Profile: p, Replicas: 1, Model: tinyModel(0),
		Router: DefaultRouter(), Source: src, Pools: &Pools{Fleet: fleet}}, &rows)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, r := range rows {
		base, _, _ := ParsePoolTag(r.Conversation)
		got[base] = r.Replica + " " + r.Error
	}
	if got["c0"] != "llm-0 " || !strings.HasPrefix(got["c1"], " HTTP 404: ") || !strings.Contains(got["c1"], `"nope"`) {
		t.Fatalf("rows %q", got)
	}
}

func TestPoolsSpecErrors(t *testing.T) {
	fleet := []FleetReplica{{Models: []replicaset.Model{{Name: "a"}}, Model: tinyModel(0)}}
	for _, tc := range []struct {
		edit func(*Spec)
		want string
	}{
		{func(s *Spec) { s.Replicas = 2 }, "the fleet has 1 replicas, the spec 2"},
		{func(s *Spec) { s.Routers = 2 }, "one router instance"},
		{func(s *Spec) { s.Pools.Fleet = []FleetReplica{{Model: tinyModel(0)}} }, "serves no model"},
		{func(s *Spec) { s.Pools.Config.Aliases = map[string]string{"x": ""} }, "pools:"},
	} {
		s := Spec{RunID: "r", Policy: "round-robin", Seed: 1, Profile: tinyProfile(1, 1), Replicas: 1, Model: tinyModel(0),
			Router: DefaultRouter(), Pools: &Pools{Fleet: fleet}}
		tc.edit(&s)
		if err := s.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %v, want %q", err, tc.want)
		}
	}
}

func TestPoolTagRoundTrip(t *testing.T) {
	tag := PoolTag{Model: "m", Adapter: "m-lora-01", Load: true, Tier: 2}
	base, got, ok := ParsePoolTag(tag.Append("stage0@4/1.0") + "#band=0#flow=t0#wait_ms=0.000")
	if !ok || base != "stage0@4/1.0" || got != tag {
		t.Fatalf("%q %+v %v", base, got, ok)
	}
	if _, _, ok := ParsePoolTag("stage0@4/1.0"); ok {
		t.Fatal("a tag found in an untagged conversation")
	}
}

func TestPoolStats(t *testing.T) {
	row := func(conv string, status int, ttft float64, cache, prompt int) record.Request {
		return record.Request{RunID: "r", Policy: "p", Seed: 1, Conversation: conv, Status: status, TTFTMS: ttft, CacheN: cache, PromptN: prompt}
	}
	a := PoolTag{Model: "a", Adapter: "a-lora-01", Load: true}
	b := PoolTag{Model: "b"}
	rows := []record.Request{
		row(a.Append("warmup/0.0"), 200, 999, 0, 100), // left out
		row(a.Append("stage0@1/1.0"), 200, 10, 50, 50),
		row(PoolTag{Model: "a"}.Append("stage0@1/2.0"), 200, 20, 100, 0),
		row(b.Append("stage0@1/3.0"), 502, 0, 0, 0),
		row(b.Append("stage0@1/4.0"), 200, 40, 0, 100),
	}
	got := PoolStats(rows, map[string]float64{`sim_adapter_loads_total{model="a"}`: 3})
	if len(got) != 3 || got[0].Model != "a" || got[1].Model != "b" || got[2].Model != "*" {
		t.Fatalf("stats %+v", got)
	}
	if s := got[0]; s.Requests != 2 || s.Loads != 1 || s.LoadsPer1k != 500 || s.TTFTP90 != 19 || s.HitRate != 0.75 || s.ModelLoads != 3 {
		t.Errorf("a: %+v", s)
	}
	if s := got[1]; s.Requests != 2 || s.Errors != 1 || s.TTFTP90 != 40 || s.HitRate != 0 || !math.IsNaN(s.ModelLoads) {
		t.Errorf("b: %+v", s)
	}
	if s := got[2]; s.Requests != 4 || s.Loads != 1 || s.LoadsPer1k != 250 || s.HitRate != 0.5 || s.ModelLoads != 3 {
		t.Errorf("*: %+v", s)
	}
}

// With adapter affinity, a policy that spreads load without looking at
// the adapter (round-robin, least-loaded, p2c) loads adapters less often
// than the same policy without it, on every seed: without it each popular
// adapter ends up resident on every replica and the 28 rarer ones evict
// each other from the 16 slots; with it an adapter's requests go where it
// is resident. (Policies that already keep a prompt's prefix on one
// replica, and with it its adapter, gain little or nothing:
// docs/notes/pools.md.)
func TestPoolsAdapterAffinityLoadsLess(t *testing.T) {
	loads := func(pr *poolRun) int {
		n := 0
		for _, r := range pr.rows {
			if _, tag, _ := ParsePoolTag(r.Conversation); tag.Load {
				n++
			}
		}
		return n
	}
	for _, pol := range []string{"round-robin", "least-loaded", "p2c"} {
		for seed := int64(1); seed <= 4; seed++ {
			on, off := loads(runPools(t, "lora", pol, seed, true, 6)), loads(runPools(t, "lora", pol, seed, false, 6))
			t.Logf("%s seed %d: %d loads with affinity, %d without", pol, seed, on, off)
			if !(on < off) {
				t.Errorf("%s seed %d: %d adapter loads with affinity, %d without", pol, seed, on, off)
			}
		}
	}
}

// An alias and a rewrite resolve as in the router: "x" is split 50/50
// between models a and b per conversation, so both turns of a conversation
// are served by one model, and both models get conversations; "alias"
// names a.
func TestPoolsRewriteAndAlias(t *testing.T) {
	p := tinyProfile(40, 4)
	p.TurnsMin, p.TurnsMax = 2, 2
	var src fixed
	for i := range 40 {
		m := "x"
		if i%10 == 0 {
			m = "alias"
		}
		src = append(src, traffic.Conversation{ID: fmt.Sprintf("c%d", i), Model: m,
			Turns: []traffic.Turn{{User: "hello", MaxTokens: 4}, {User: "more", MaxTokens: 4}}})
	}
	fleet := []FleetReplica{
		{Models: []replicaset.Model{{Name: "a"}}, Model: tinyModel(0)},
		{Models: []replicaset.Model{{Name: "b"}}, Model: tinyModel(0)},
	}
	cfg := pool.Config{Aliases: map[string]string{"alias": "a"},
		Rewrites: []pool.Rewrite{{From: "x", Targets: []pool.Target{{Model: "a", Weight: 50}, {Model: "b", Weight: 50}}}}}
	var rows rowsOf
	_, err := Run(context.Background(), Spec{RunID: "r", Policy: "round-robin", Seed: 1, Profile: p, Replicas: 2, Model: tinyModel(0),
		Router: DefaultRouter(), Source: src, Pools: &Pools{Fleet: fleet, Config: cfg}}, &rows)
	if err != nil {
		t.Fatal(err)
	}
	conv := map[string]string{}
	count := map[string]int{}
	for _, r := range rows {
		base, tag, _ := ParsePoolTag(r.Conversation)
		if r.Status != 200 || (tag.Model == "a") != (r.Replica == "llm-0") {
			t.Fatalf("%s turn %d: status %d, model %s on %s", base, r.Turn, r.Status, tag.Model, r.Replica)
		}
		if prev, ok := conv[base]; ok && prev != tag.Model {
			t.Fatalf("%s: turns on %s and %s", base, prev, tag.Model)
		}
		conv[base] = tag.Model
		count[tag.Model]++
	}
	for i := 0; i < 40; i += 10 {
		if m := conv[fmt.Sprintf("c%d", i)]; m != "a" {
			t.Errorf("c%d (alias) on %s", i, m)
		}
	}
	if len(rows) != 80 || count["a"] < 20 || count["b"] < 20 {
		t.Errorf("%d rows, per model %v", len(rows), count)
	}
}

// TestPoolsTakeTheirSettingsAndFacts: each pool's table runs the run's
// policy with models.pools.MODEL.policies settings of it on top, and the
// engine facts of the pool's own replicas (a 70B pool is not an 8B one).
func TestPoolsTakeTheirSettingsAndFacts(t *testing.T) {
	big, err := model.Preset(model.PresetH100Llama70B)
	if err != nil {
		t.Fatal(err)
	}
	small := tinyModel(0)
	fleet := []FleetReplica{
		{Models: []replicaset.Model{{Name: "a"}}, Model: small},
		{Models: []replicaset.Model{{Name: "b"}}, Model: big},
	}
	r := DefaultRouter()
	r.Models.Pools = map[string]config.ModelPool{"a": {Policies: map[string]json.RawMessage{"predictive": json.RawMessage(`{"margin": 0.3}`)}}}
	spec := Spec{RunID: "r", Policy: "predictive", Seed: 1, Profile: tinyProfile(2, 2), Replicas: 2, Model: small,
		Router: r, Source: fixed{}, Pools: &Pools{Fleet: fleet}}
	s, err := newSim(&spec, &rowsOf{})
	if err != nil {
		t.Fatal(err)
	}
	s.set.SetReplicas([]replicaset.Replica{{Name: "llm-0", URL: "sim://0", Models: fleet[0].Models}, {Name: "llm-1", URL: "sim://1", Models: fleet[1].Models}})
	pa := policy.SettingsOf(s.set.Pool("a").Table().Policy()).(*policy.Predictive)
	pb := policy.SettingsOf(s.set.Pool("b").Table().Policy()).(*policy.Predictive)
	if pa.Margin != 0.3 || pb.Margin != policy.DefaultPredictive().Margin {
		t.Errorf("margins a %v, b %v: want 0.3 (the pool's setting) and the default", pa.Margin, pb.Margin)
	}
	if pa.Slots != small.NParallel || pb.Slots != big.NParallel || pb.CacheTokens != big.Facts().CacheTokens {
		t.Errorf("facts: a %d slots, b %d slots %v cache; want %d, %d, %v", pa.Slots, pb.Slots, pb.CacheTokens,
			small.NParallel, big.NParallel, big.Facts().CacheTokens)
	}
}
