package pool

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/llm-ring/llm-ring/internal/policy"
	"github.com/llm-ring/llm-ring/internal/replicaset"
	"github.com/llm-ring/llm-ring/internal/ring"
	"github.com/llm-ring/llm-ring/internal/state"
)

// tables builds each pool's table with least-loaded and records the order
// in which pools were created.
type tables struct {
	mu      sync.Mutex
	created []string
	fail    string // a model whose table cannot be built
}

func (tb *tables) new(model string) (*state.Table, error) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	if model == tb.fail && model != "" {
		return nil, errors.New("no table for " + model)
	}
	tb.created = append(tb.created, model)
	p, err := policy.New("least-loaded", nil)
	if err != nil {
		return nil, err
	}
	return state.New(state.Config{VirtualNodes: 16, CharsPerToken: 4, MaxEntries: 100, TTL: time.Minute}, p), nil
}

func newSet(t testing.TB, cfg Config) (*Set, *tables) {
	t.Helper()
	tb := &tables{}
	s, err := New(cfg, tb.new)
	if err != nil {
		t.Fatal(err)
	}
	return s, tb
}

// rep is a replica serving models: "m" a base model, "a@m" adapter a of
// base m; none at all means its models are unknown (nil).
func rep(name string, models ...string) replicaset.Replica {
	r := replicaset.Replica{Name: name, URL: "http://" + name}
	for _, m := range models {
		if a, base, ok := strings.Cut(m, "@"); ok {
			r.Models = append(r.Models, replicaset.Model{Name: a, Parent: base})
		} else {
			r.Models = append(r.Models, replicaset.Model{Name: m})
		}
	}
	return r
}

func members(p *Pool) []string {
	var out []string
	for _, r := range p.Table().Status().Replicas {
		out = append(out, r.Name)
	}
	return out
}

// TestMembership: a replica joins the pool of each base model it lists
// (several pools), an adapter makes it a member of its parent's pool, and a
// replica with unknown models joins the catch-all pool.
func TestMembership(t *testing.T) {
	s, tb := newSet(t, Config{})
	changed, err := s.SetReplicas([]replicaset.Replica{
		rep("d", "qwen"),
		rep("a"), // models unknown: serves anything
		rep("c", "llama", "sql@llama", "qwen"),
		rep("b", "chat@llama"), // only an adapter: still a member of llama's pool
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"", "llama", "qwen"}; !slices.Equal(changed, want) {
		t.Errorf("changed = %q, want %q", changed, want)
	}
	if want := []string{"", "llama", "qwen"}; !slices.Equal(tb.created, want) {
		t.Errorf("created = %q, want %q (catch-all at New, then in model order)", tb.created, want)
	}
	want := map[string][]string{"": {"a"}, "llama": {"b", "c"}, "qwen": {"c", "d"}}
	var got []string
	for _, p := range s.Pools() {
		got = append(got, p.Model())
		if m := members(p); !slices.Equal(m, want[p.Model()]) || p.Replicas() != len(want[p.Model()]) {
			t.Errorf("pool %q: members %q (Replicas %d), want %q", p.Model(), m, p.Replicas(), want[p.Model()])
		}
	}
	if !slices.Equal(got, []string{"", "llama", "qwen"}) {
		t.Errorf("Pools() = %q, want the catch-all first, then by model", got)
	}
	wantModels := []ModelInfo{{ID: "chat", Parent: "llama", Replicas: 1}, {ID: "llama", Replicas: 2},
		{ID: "qwen", Replicas: 2}, {ID: "sql", Parent: "llama", Replicas: 1}}
	if m := s.Models(); !slices.Equal(m, wantModels) {
		t.Errorf("Models() = %+v, want %+v", m, wantModels)
	}
	// The same set again changes nothing; c dropping qwen changes qwen only.
	if changed, _ := s.SetReplicas([]replicaset.Replica{rep("a"), rep("b", "chat@llama"),
		rep("c", "llama", "sql@llama", "qwen"), rep("d", "qwen")}); len(changed) != 0 {
		t.Errorf("same set: changed = %q", changed)
	}
	// c's entry itself changes (its model list), so llama's table sees a new c.
	changed, _ = s.SetReplicas([]replicaset.Replica{rep("a"), rep("b", "chat@llama"), rep("c", "llama", "sql@llama"), rep("d", "qwen")})
	if !slices.Equal(changed, []string{"llama", "qwen"}) {
		t.Errorf("c leaves qwen: changed = %q, want [llama qwen]", changed)
	}
	if m := members(s.Pool("qwen")); !slices.Equal(m, []string{"d"}) {
		t.Errorf("qwen members %q, want [d]", m)
	}
	// An empty list (not nil): the replica serves nothing, in no pool.
	none := replicaset.Replica{Name: "e", URL: "http://e", Models: []replicaset.Model{}}
	s.SetReplicas([]replicaset.Replica{rep("a"), none})
	for _, p := range s.Pools() {
		if slices.Contains(members(p), "e") {
			t.Errorf("a replica serving nothing is a member of pool %q", p.Model())
		}
	}
}

// TestEmptyPoolKept: a pool whose replicas all leave is kept (its memory
// survives a rollout) but no longer served.
func TestEmptyPoolKept(t *testing.T) {
	s, _ := newSet(t, Config{})
	s.SetReplicas([]replicaset.Replica{rep("x", "llama"), rep("y", "qwen")})
	p := s.Pool("llama")
	in := state.Input{Key: "c1", Hash: ring.HashString("c1"), Chars: 400, OutputTokens: 10}
	tk, _, err := p.Table().Route(in, 0)
	if err != nil {
		t.Fatal(err)
	}
	p.Table().Release(&tk, state.Outcome{OK: true, Known: true, PromptN: 100, PredictedN: 10}, 1)
	s.SetReplicas([]replicaset.Replica{rep("y", "qwen")})
	if s.Pool("llama") != p || p.Replicas() != 0 {
		t.Fatalf("llama pool after its replicas left: %p with %d, want the same pool, empty", s.Pool("llama"), p.Replicas())
	}
	var unknown *UnknownModelError
	if _, err := s.Resolve("llama", 0); !errors.As(err, &unknown) || !slices.Equal(unknown.Served, []string{"qwen"}) {
		t.Fatalf("Resolve(llama) with an empty pool: %v, want unknown model, served [qwen]", err)
	}
	s.SetReplicas([]replicaset.Replica{rep("x", "llama"), rep("y", "qwen")})
	if st := p.Table().Status(); st.Memory != 1 {
		t.Errorf("placement memory after the rollout: %d conversations, want 1", st.Memory)
	}
	s.Reset()
	if st := p.Table().Status(); st.Memory != 0 {
		t.Errorf("placement memory after Reset: %d conversations, want 0", st.Memory)
	}
}

func TestResolve(t *testing.T) {
	cfg := Config{
		Aliases:  map[string]string{"llama": "llama-8b", "old": "gpt-4o"},
		Rewrites: []Rewrite{{From: "gpt-4o", Targets: []Target{{Model: "llama-8b", Weight: 1}}}},
		Adapters: map[string]string{"sql": "llama-8b", "orphan": "mistral"},
	}
	s, _ := newSet(t, cfg)
	s.SetReplicas([]replicaset.Replica{rep("a", "llama-8b", "chat@llama-8b"), rep("b", "qwen"), rep("z")})
	catch, llama, qwen := s.Pool(""), s.Pool("llama-8b"), s.Pool("qwen")
	tests := []struct {
		ask  string
		want Route
	}{
		// No model, no default: the catch-all pool has a replica.
		{"", Route{Pool: catch}},
		{"qwen", Route{Pool: qwen, Model: "qwen", Requested: "qwen"}},
		// An alias: the driver rewrites the body to the model.
		{"llama", Route{Pool: llama, Model: "llama-8b", Requested: "llama", Rewritten: true}},
		// A rewrite with one target: a retired name kept working.
		{"gpt-4o", Route{Pool: llama, Model: "llama-8b", Requested: "gpt-4o", Rewritten: true}},
		// An alias of a rewritten name: alias, then rewrite.
		{"old", Route{Pool: llama, Model: "llama-8b", Requested: "old", Rewritten: true}},
		// A configured adapter and one a replica lists: the base pool.
		{"sql", Route{Pool: llama, Model: "sql", Adapter: "sql", Requested: "sql"}},
		{"chat", Route{Pool: llama, Model: "chat", Adapter: "chat", Requested: "chat"}},
		// An adapter whose base nobody serves, and an unknown model: the
		// catch-all pool (z serves anything), the name untouched.
		{"orphan", Route{Pool: catch, Model: "orphan", Adapter: "orphan", Requested: "orphan"}},
		{"mixtral", Route{Pool: catch, Model: "mixtral", Requested: "mixtral"}},
	}
	for _, tt := range tests {
		got, err := s.Resolve(tt.ask, 7)
		if err != nil || got != tt.want {
			t.Errorf("Resolve(%q) = %+v, %v; want %+v", tt.ask, got, err, tt.want)
		}
	}
	// Without the catch-all replica, an unknown model is an error listing
	// the models served.
	s.SetReplicas([]replicaset.Replica{rep("a", "llama-8b", "chat@llama-8b"), rep("b", "qwen")})
	for _, ask := range []string{"mixtral", "orphan", ""} {
		_, err := s.Resolve(ask, 7)
		var unknown *UnknownModelError
		if !errors.As(err, &unknown) || unknown.Model != ask {
			t.Fatalf("Resolve(%q) = %v, want *UnknownModelError{Model: %q}", ask, err, ask)
		}
		if want := []string{"chat", "llama-8b", "qwen", "sql"}; !slices.Equal(unknown.Served, want) {
			t.Errorf("Resolve(%q): served %q, want %q", ask, unknown.Served, want)
		}
		if !strings.Contains(err.Error(), "chat, llama-8b, qwen, sql") {
			t.Errorf("error text %q does not list the models served", err)
		}
	}
}

// TestResolveNoModel: a request naming no model gets the default, else
// the catch-all pool, else the only pool, else an error; with nothing
// served at all, the empty catch-all pool (the driver answers 503).
func TestResolveNoModel(t *testing.T) {
	s, _ := newSet(t, Config{})
	rt, err := s.Resolve("", 0)
	if err != nil || rt.Pool != s.Pool("") {
		t.Fatalf("nothing served: %+v, %v; want the catch-all pool", rt, err)
	}
	if _, _, err := rt.Pool.Table().Route(state.Input{Key: "k"}, 0); !errors.Is(err, state.ErrNoReplica) {
		t.Fatalf("route in the empty catch-all pool: %v, want ErrNoReplica", err)
	}
	if rt, err := s.Resolve("anything", 0); err != nil || rt.Pool != s.Pool("") || rt.Model != "anything" {
		t.Fatalf("nothing served, a model named: %+v, %v; want the catch-all pool", rt, err)
	}
	s.SetReplicas([]replicaset.Replica{rep("a", "llama")})
	if rt, err := s.Resolve("", 0); err != nil || rt.Pool != s.Pool("llama") || rt.Model != "llama" || !rt.Rewritten {
		t.Fatalf("one pool: %+v, %v; want llama, rewritten", rt, err)
	}
	s.SetReplicas([]replicaset.Replica{rep("a", "llama"), rep("b", "qwen")})
	var unknown *UnknownModelError
	if _, err := s.Resolve("", 0); !errors.As(err, &unknown) || unknown.Model != "" {
		t.Fatalf("two pools, no default: %v, want UnknownModelError{Model: \"\"}", err)
	}
	d, _ := newSet(t, Config{Default: "q", Aliases: map[string]string{"q": "qwen"}})
	d.SetReplicas([]replicaset.Replica{rep("a", "llama"), rep("b", "qwen")})
	if rt, err := d.Resolve("", 0); err != nil || rt.Pool != d.Pool("qwen") || rt.Model != "qwen" || rt.Requested != "" {
		t.Fatalf("default through an alias: %+v, %v; want qwen", rt, err)
	}
	d.SetReplicas([]replicaset.Replica{rep("a", "llama")})
	if _, err := d.Resolve("", 0); !errors.As(err, &unknown) || unknown.Model != "q" {
		t.Fatalf("default not served: %v, want UnknownModelError{Model: q}", err)
	}
}

// TestLegacy: no models configured, no model lists: one catch-all pool,
// every request goes there whatever its model says, body untouched.
func TestLegacy(t *testing.T) {
	s, _ := newSet(t, Config{})
	s.SetReplicas([]replicaset.Replica{rep("a"), rep("b"), rep("c")})
	for _, ask := range []string{"", "llama", "gpt-4o"} {
		rt, err := s.Resolve(ask, 99)
		if err != nil || rt.Pool != s.Pool("") || rt.Rewritten || rt.Model != ask || rt.Adapter != "" {
			t.Errorf("Resolve(%q) = %+v, %v; want the catch-all pool, untouched", ask, rt, err)
		}
	}
	if len(s.Pools()) != 1 || s.Pool("").Replicas() != 3 || len(s.Models()) != 0 {
		t.Errorf("pools %d, catch-all members %d, models %v; want 1, 3, none", len(s.Pools()), s.Pool("").Replicas(), s.Models())
	}
}

// TestRewriteWeights: over 10,000 conversations each target's share is its
// weight's within 1.5 points, for sequential and hashed conversation keys.
func TestRewriteWeights(t *testing.T) {
	targets := []Target{{"v1", 70}, {"v2", 20}, {"v3", 10}}
	s, _ := newSet(t, Config{Rewrites: []Rewrite{{From: "chat", Targets: targets}}})
	s.SetReplicas([]replicaset.Replica{rep("a", "v1"), rep("b", "v2"), rep("c", "v3")})
	for _, keys := range []struct {
		name string
		hash func(i int) uint64
	}{
		{"sequential", func(i int) uint64 { return uint64(i) }},
		{"hashed", func(i int) uint64 { return ring.HashString(fmt.Sprintf("conversation-%d", i)) }},
	} {
		const n = 10000
		count := map[string]int{}
		for i := range n {
			rt, err := s.Resolve("chat", keys.hash(i))
			if err != nil {
				t.Fatal(err)
			}
			if rt.Pool.Model() != rt.Model {
				t.Fatalf("target %s routed to pool %s", rt.Model, rt.Pool.Model())
			}
			count[rt.Model]++
		}
		for _, tg := range targets {
			share := float64(count[tg.Model]) / n
			if math.Abs(share-tg.Weight/100) > 0.015 {
				t.Errorf("%s keys: %s got %.3f of conversations, want %.2f ± 0.015", keys.name, tg.Model, share, tg.Weight/100)
			}
		}
	}
}

// TestRewriteSticky: a conversation keeps its target across turns, across
// membership changes and in another Set built from the same configuration
// (another router instance, or the simulator).
func TestRewriteSticky(t *testing.T) {
	cfg := Config{Rewrites: []Rewrite{{From: "chat", Targets: []Target{{"v1", 50}, {"v2", 50}}}}}
	s, _ := newSet(t, cfg)
	other, _ := newSet(t, cfg)
	rs := []replicaset.Replica{rep("a", "v1"), rep("b", "v2")}
	s.SetReplicas(rs)
	other.SetReplicas(rs)
	seen := map[string]int{}
	for i := range 200 {
		conv := ring.HashString(fmt.Sprint("c", i))
		first, _ := s.Resolve("chat", conv)
		seen[first.Model]++
		for turn := range 5 {
			if turn == 2 {
				s.SetReplicas(append(rs, rep("c", "v1")))
			}
			got, _ := s.Resolve("chat", conv)
			there, _ := other.Resolve("chat", conv)
			if got.Model != first.Model || there.Model != first.Model {
				t.Fatalf("conversation %d turn %d: %s here, %s on the other set, first %s", i, turn, got.Model, there.Model, first.Model)
			}
		}
	}
	if seen["v1"] == 0 || seen["v2"] == 0 {
		t.Fatalf("a 50/50 split sent 200 conversations %v", seen)
	}
}

// TestLabels: the first MaxLabels pools created get their model as label,
// later ones "other"; the catch-all is "".
func TestLabels(t *testing.T) {
	s, _ := newSet(t, Config{MaxLabels: 2})
	s.SetReplicas([]replicaset.Replica{rep("a", "m2"), rep("b", "m1")})
	s.SetReplicas([]replicaset.Replica{rep("a", "m2"), rep("b", "m1"), rep("c", "m0", "m3")})
	want := map[string]string{"": "", "m0": OtherLabel, "m1": "m1", "m2": "m2", "m3": OtherLabel}
	for _, p := range s.Pools() {
		if p.Label() != want[p.Model()] {
			t.Errorf("pool %q: label %q, want %q", p.Model(), p.Label(), want[p.Model()])
		}
	}
	d, _ := newSet(t, Config{})
	var rs []replicaset.Replica
	for i := range 20 {
		rs = append(rs, rep(fmt.Sprint("r", i), fmt.Sprintf("m%02d", i)))
	}
	d.SetReplicas(rs)
	labels := map[string]bool{}
	for _, p := range d.Pools() {
		labels[p.Label()] = true
	}
	if len(labels) != DefaultMaxLabels+2 { // 16 models, "other", the catch-all ""
		t.Errorf("20 models: %d distinct labels, want %d", len(labels), DefaultMaxLabels+2)
	}
}

// TestReportsAndHealth: a replica in two pools is reported and marked in
// both; a pool it joins later learns its last state.
func TestReportsAndHealth(t *testing.T) {
	s, _ := newSet(t, Config{})
	s.SetReplicas([]replicaset.Replica{rep("a", "m1", "m2"), rep("b", "m1")})
	rp := policy.Reported{Running: 3, HasQueue: true}
	s.SetReported("a", rp)
	if !s.SetHealthy("a", false) || s.SetHealthy("a", false) {
		t.Fatal("SetHealthy: first call must report a change, the repeat none")
	}
	if !s.SetHealthy("later", false) {
		t.Fatal("SetHealthy of a replica in no pool yet: want a change (remembered)")
	}
	s.SetReplicas([]replicaset.Replica{rep("a", "m1", "m2", "m3"), rep("b", "m1"), rep("later", "m3")})
	for _, model := range []string{"m1", "m2", "m3"} {
		for _, r := range s.Pool(model).Table().Status().Replicas {
			wantHealthy := r.Name == "b"
			if r.Healthy != wantHealthy {
				t.Errorf("pool %s: %s healthy=%v, want %v", model, r.Name, r.Healthy, wantHealthy)
			}
			if r.Name == "a" && r.Reported.Running != 3 {
				t.Errorf("pool %s: a's report %+v, want Running 3", model, r.Reported)
			}
		}
	}
	if !s.SetHealthy("a", true) {
		t.Fatal("SetHealthy(a, true): want a change")
	}
	if st := s.Pool("m3").Table().Status(); st.Healthy() != 1 {
		t.Errorf("m3 after a recovers: %d healthy, want 1 (later is still down)", st.Healthy())
	}
}

// TestAdapterThroughPool: an adapter resolves to its base model's pool,
// and the pool's table prefers the replica the set reported it resident
// on; the adapter name handed out is the set's own string.
func TestAdapterThroughPool(t *testing.T) {
	tb := &tables{}
	s, err := New(Config{}, func(model string) (*state.Table, error) {
		p, _ := policy.New("least-loaded", nil)
		tb.created = append(tb.created, model)
		return state.New(state.Config{VirtualNodes: 16, CharsPerToken: 4, MaxEntries: 100, TTL: time.Minute, AdapterAffinity: true}, p), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	s.SetReplicas([]replicaset.Replica{rep("a", "llama"), rep("b", "llama", "sql@llama"), rep("c", "qwen")})
	// b reports its queue empty: it keeps sql, however many in flight.
	s.SetReported("b", policy.Reported{HasQueue: true, Adapters: policy.Adapters{Running: []string{"sql"}, Max: 2, Has: true}})
	asked := string([]byte("sql")) // as a request's parsed body would hold it
	rt, err := s.Resolve(asked, 1)
	if err != nil || rt.Pool != s.Pool("llama") || rt.Adapter != "sql" {
		t.Fatalf("Resolve(sql) = %+v, %v; want llama's pool, adapter sql", rt, err)
	}
	if unsafe.StringData(rt.Adapter) == unsafe.StringData(asked) {
		t.Error("Route.Adapter is the request's string, want the set's own")
	}
	for i := range 3 {
		tk, _, err := rt.Pool.Table().Route(state.Input{Key: "k", Hash: uint64(i), Chars: 40, Adapter: rt.Adapter}, int64(i))
		if err != nil || tk.Replica.Name != "b" || tk.AdapterTier != state.TierResident {
			t.Fatalf("request %d for sql → %s (tier %d), %v; want b (resident)", i, tk.Replica.Name, tk.AdapterTier, err)
		}
	}
}

// TestNewTableFails: a pool that cannot be built fails SetReplicas and
// changes nothing.
func TestNewTableFails(t *testing.T) {
	tb := &tables{fail: "bad"}
	s, err := New(Config{}, tb.new)
	if err != nil {
		t.Fatal(err)
	}
	s.SetReplicas([]replicaset.Replica{rep("a", "good")})
	if _, err := s.SetReplicas([]replicaset.Replica{rep("a", "good"), rep("b", "bad"), rep("c", "new")}); err == nil || !strings.Contains(err.Error(), `pool "bad"`) {
		t.Fatalf("err = %v, want one naming pool \"bad\"", err)
	}
	if s.Pool("new") != nil || s.Pool("good").Replicas() != 1 {
		t.Fatalf("a failed SetReplicas changed the set: pools %d", len(s.Pools()))
	}
}

func TestValidate(t *testing.T) {
	w := func(m string, weight float64) Target { return Target{Model: m, Weight: weight} }
	tests := []struct {
		cfg  Config
		want string
	}{
		{Config{Rewrites: []Rewrite{{From: "a", Targets: []Target{w("b", 1), w("c", 0)}}}}, "rewrites[0].to[1].weight: must be > 0"},
		{Config{Rewrites: []Rewrite{{From: "a", Targets: []Target{w("b", math.NaN())}}}}, "rewrites[0].to[0].weight: must be > 0"},
		{Config{Rewrites: []Rewrite{{From: "a"}}}, "rewrites[0].to: must list at least one target"},
		{Config{Rewrites: []Rewrite{{Targets: []Target{w("b", 1)}}}}, "rewrites[0].from: must not be empty"},
		{Config{Rewrites: []Rewrite{{From: "a", Targets: []Target{w("b", 1)}}, {From: "a", Targets: []Target{w("c", 1)}}}},
			`rewrites[1].from: "a" is already rewritten by rewrites[0]`},
		{Config{Rewrites: []Rewrite{{From: "a", Targets: []Target{w("b", 1), w("b", 2)}}}}, `rewrites[0].to[1].model: "b" is listed twice`},
		{Config{Rewrites: []Rewrite{{From: "a", Targets: []Target{w("", 1)}}}}, "rewrites[0].to[0].model: must not be empty"},
		// A target that is an alias, a cycle (a → b → a), a chain.
		{Config{Aliases: map[string]string{"x": "b"}, Rewrites: []Rewrite{{From: "a", Targets: []Target{w("x", 1)}}}},
			`rewrites[0].to[0].model: "x" is an alias`},
		{Config{Rewrites: []Rewrite{{From: "a", Targets: []Target{w("b", 1)}}, {From: "b", Targets: []Target{w("a", 1)}}}},
			`rewrites[0].to[0].model: "b" is itself rewritten (rewrites[1])`},
		{Config{Aliases: map[string]string{"a": "m"}, Rewrites: []Rewrite{{From: "a", Targets: []Target{w("b", 1)}}}},
			`rewrites[0].from: "a" is an alias`},
		{Config{Aliases: map[string]string{"x": "y", "y": "x"}}, `aliases.x: "y" is itself an alias`},
		{Config{Aliases: map[string]string{"x": ""}}, "aliases.x: must name a model"},
		{Config{Adapters: map[string]string{"a": "b", "b": "c"}}, `adapters.a: its base "b" is itself an adapter`},
		{Config{Aliases: map[string]string{"a": "m"}, Adapters: map[string]string{"a": "b"}}, `adapters.a: "a" is also an alias`},
		{Config{MaxLabels: -1}, "max_model_labels: must be ≥ 0"},
	}
	for _, tt := range tests {
		err := tt.cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%+v: err = %v, want %q", tt.cfg, err, tt.want)
		}
		if _, err := New(tt.cfg, (&tables{}).new); err == nil {
			t.Errorf("%+v: New accepted an invalid configuration", tt.cfg)
		}
	}
	ok := Config{Default: "llama", Aliases: map[string]string{"llama": "llama-8b"}, Adapters: map[string]string{"sql": "llama-8b"},
		Rewrites: []Rewrite{{From: "gpt-4o", Targets: []Target{w("llama-8b", 90), w("llama-70b", 10)}}}}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid configuration: %v", err)
	}
}

// TestResolveAllocs: Resolve allocates nothing on the hot path (alias,
// rewrite, adapter, catch-all fallback).
func TestResolveAllocs(t *testing.T) {
	s, _ := newSet(t, Config{
		Aliases:  map[string]string{"llama": "llama-8b"},
		Rewrites: []Rewrite{{From: "chat", Targets: []Target{{"llama-8b", 9}, {"qwen", 1}}}},
	})
	s.SetReplicas([]replicaset.Replica{rep("a", "llama-8b", "sql@llama-8b"), rep("b", "qwen"), rep("z")})
	asks := []string{"", "llama", "chat", "sql", "qwen", "unknown"}
	var conv uint64
	allocs := testing.AllocsPerRun(1000, func() {
		conv++
		if _, err := s.Resolve(asks[conv%uint64(len(asks))], conv); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("Resolve: %.1f allocations per call, want 0", allocs)
	}
}

// TestConcurrent: resolving and routing while membership, reports and
// health change (run with -race).
func TestConcurrent(t *testing.T) {
	s, _ := newSet(t, Config{Rewrites: []Rewrite{{From: "chat", Targets: []Target{{"m1", 1}, {"m2", 1}}}}})
	sets := [][]replicaset.Replica{
		{rep("a", "m1"), rep("b", "m2"), rep("c")},
		{rep("a", "m1", "m2"), rep("b", "m2", "x@m2")},
		{rep("c")},
	}
	s.SetReplicas(sets[0])
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 500 {
				rt, err := s.Resolve([]string{"chat", "m1", "x", ""}[i%4], uint64(g*1000+i))
				if err != nil {
					continue // between sets a model may be gone
				}
				tk, _, err := rt.Pool.Table().Route(state.Input{Key: "k", Hash: uint64(i), Chars: 40, Adapter: rt.Adapter}, int64(i))
				if err == nil {
					rt.Pool.Table().Release(&tk, state.Outcome{OK: true}, int64(i))
				}
				_ = s.Models()
				_ = rt.Pool.Label()
			}
		})
	}
	wg.Go(func() {
		for i := range 300 {
			if _, err := s.SetReplicas(sets[i%len(sets)]); err != nil {
				t.Error(err)
			}
			s.SetReported("a", policy.Reported{Running: float64(i), HasQueue: true})
			s.SetHealthy("b", i%2 == 0)
			_ = s.Pools()
		}
	})
	wg.Wait()
}

func BenchmarkResolve(b *testing.B) {
	s, _ := newSet(b, Config{
		Aliases:  map[string]string{"llama": "llama-8b"},
		Rewrites: []Rewrite{{From: "chat", Targets: []Target{{"llama-8b", 9}, {"qwen", 1}}}},
	})
	s.SetReplicas([]replicaset.Replica{rep("a", "llama-8b", "sql@llama-8b"), rep("b", "qwen")})
	asks := [...]string{"llama", "chat", "sql", "qwen"}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if _, err := s.Resolve(asks[i&3], uint64(i)); err != nil {
			b.Fatal(err)
		}
	}
}

// TestImplicitTag: Ollama lists "tiny:latest" and serves a request for
// "tiny" with it; the router does the same (the request keeps its name),
// unless "tiny" is a model of its own. A tag that is not :latest is not
// implied, and a name is never stripped of its tag.
func TestImplicitTag(t *testing.T) {
	s, _ := newSet(t, Config{})
	s.SetReplicas([]replicaset.Replica{rep("a", "tiny:latest"), rep("b", "qwen:0.5b"), rep("c", "phi:latest"), rep("d", "phi")})
	tiny, phi := s.Pool("tiny:latest"), s.Pool("phi")
	for _, tt := range []struct {
		ask  string
		want *Pool
	}{
		{"tiny", tiny}, {"tiny:latest", tiny}, {"phi", phi}, {"phi:latest", s.Pool("phi:latest")},
	} {
		got, err := s.Resolve(tt.ask, 1)
		if err != nil || got.Pool != tt.want || got.Model != tt.ask || got.Rewritten {
			t.Errorf("Resolve(%q) = %+v, %v; want pool %s, the name kept", tt.ask, got, err, tt.want.Model())
		}
	}
	for _, ask := range []string{"qwen", "tiny:0.5b", "qwen:0.5b:latest"} {
		if _, err := s.Resolve(ask, 1); err == nil {
			t.Errorf("Resolve(%q) succeeded, want an unknown model", ask)
		}
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = s.Resolve("tiny", 1) }); n != 0 {
		t.Errorf("Resolve of an untagged name: %v allocations, want 0", n)
	}
}

// TestAnyModel: a replica whose engine ignores the model's name is in its
// models' pools and in the catch-all pool: a request for a model no pool
// has goes there, not to a 404.
func TestAnyModel(t *testing.T) {
	s, _ := newSet(t, Config{})
	l := rep("l", "qwen")
	l.AnyModel = true
	s.SetReplicas([]replicaset.Replica{l, rep("v", "llama-8b")})
	if got := members(s.Pool("")); !slices.Equal(got, []string{"l"}) {
		t.Errorf("catch-all members %v, want [l]", got)
	}
	for ask, want := range map[string]*Pool{"qwen": s.Pool("qwen"), "llama-8b": s.Pool("llama-8b"), "gpt-3.5-turbo": s.Pool("")} {
		if got, err := s.Resolve(ask, 1); err != nil || got.Pool != want {
			t.Errorf("Resolve(%q) = %+v, %v; want pool %q", ask, got, err, want.Model())
		}
	}
}
