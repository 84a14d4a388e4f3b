package policy

import (
	"math/rand/v2"

	"github.com/llm-ring/llm-ring/internal/ring"

	"strings"
	"testing"
)

// TestLeastLoaded is the worked example's own test: fewest requests in
// flight wins; among equals, the first clockwise from the ring home, so a
// lone conversation stays home.
func TestLeastLoaded(t *testing.T) {
	p, err := New("least-loaded", nil)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		loads []Load
		want  string
	}{
		// All idle: key 5's home llm-0 (ring 10 → llm-0, 20 → llm-2, 30 → llm-1).
		{"idle goes home", []Load{{}, {}, {}}, "llm-0"},
		// Home busier: llm-1 and llm-2 tie at 1; clockwise from home llm-2 comes first.
		{"tie broken by ring order", []Load{{Requests: 3}, {Requests: 1}, {Requests: 1}}, "llm-2"},
		// A clear minimum wins wherever it is on the ring.
		{"fewest wins", []Load{{Requests: 3}, {Requests: 0}, {Requests: 2}}, "llm-1"},
		// Tokens do not count: llm-0 has one huge request, still the fewest.
		{"requests, not tokens", []Load{{Requests: 1, Tokens: 1 << 20}, {Requests: 2, Tokens: 10}, {Requests: 2, Tokens: 10}}, "llm-0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := seedView()
			for i, l := range tt.loads {
				v.Rows[i].Load = l
			}
			v.Recount()
			d := pickOnce(p, &Request{Hash: 5, Last: -1}, v)
			if v.Names[d.Replica] != tt.want || d.Reason != Fewest {
				t.Fatalf("got %s (%s), want %s (fewest)\n%s", v.Names[d.Replica], d.Reason, tt.want, d.Format())
			}
			if !strings.Contains(d.Format(), "in flight (requests): llm-0=") {
				t.Errorf("trace does not show the loads:\n%s", d.Format())
			}
		})
	}
}

// TestSettingsDecode: a registry row decodes its policy's settings
// strictly, over a base, naming the key in every error.
func TestSettingsDecode(t *testing.T) {
	sp, _ := Lookup("llm-aware")
	base, err := sp.Decode(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if a := base.(*LLMAware); a.Epsilon != 0.25 || !a.PlacementMemory || a.LongCapFactor != 2 {
		t.Fatalf("defaults = %+v", a)
	}
	// A partial update keeps the other keys, and does not change its base.
	got, err := sp.Decode(base, []byte(`{"epsilon": 0.5, "long_stickiness": false}`))
	if err != nil {
		t.Fatal(err)
	}
	if a := got.(*LLMAware); a.Epsilon != 0.5 || a.LongStickiness || !a.CacheAwareLoad || a.LongPromptTokens != 800 {
		t.Fatalf("partial update = %+v", a)
	}
	if base.(*LLMAware).Epsilon != 0.25 {
		t.Fatal("Decode changed its base")
	}
	for raw, want := range map[string]string{
		`{"epsilon": -1}`:               "epsilon: must be > 0",
		`{"epsilon": "big"}`:            "epsilon: must be a number",
		`{"placement_memory": 1}`:       "placement_memory: must be true or false",
		`{"long_prompt_tokens": 1.5}`:   "long_prompt_tokens: must be an integer",
		`{"cap": 1}`:                    "cap: unknown key (llm-aware has epsilon, cache_aware_load",
		`[1]`:                           "must be a mapping",
		`{"long_cap_factor": 0.5}`:      "long_cap_factor: must be ≥ 1",
		`{"long_prompt_tokens": 0}`:     "long_prompt_tokens: must be ≥ 1",
		`{"epsilon": 1e400}`:            "epsilon",
		`{"load_unit": "tokens"}`:       "load_unit: unknown key",
		`{"epsilon": null, "x": false}`: "x: unknown key",
	} {
		if _, err := sp.Decode(base, []byte(raw)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Decode(%s) error = %v, want %q", raw, err, want)
		}
	}
	b, _ := Lookup("bounded")
	if s, err := b.Decode(nil, []byte(`{"load_unit": "bytes"}`)); err == nil || !strings.Contains(err.Error(), "load_unit") {
		t.Errorf("bounded load_unit bytes: %v %v", s, err)
	}
	c, _ := Lookup("consistent")
	if _, err := c.Decode(nil, []byte(`{"epsilon": 1}`)); err == nil || !strings.Contains(err.Error(), "consistent takes no settings") {
		t.Errorf("consistent with settings: %v", err)
	}
	if s, err := c.Decode(nil, []byte(`{}`)); err != nil || s != nil {
		t.Errorf("consistent with {}: %v %v", s, err)
	}
}

// TestRegistryRows: every row has a name, a doc line and reason codes;
// names are unique; the study's five come first; a policy with settings
// validates its defaults, and SettingsOf gives back what it was built with.
func TestRegistryRows(t *testing.T) {
	seen := map[string]bool{}
	for i, sp := range Specs() {
		if sp.Name == "" || sp.Doc == "" || len(sp.Reasons) == 0 || sp.Make == nil {
			t.Errorf("row %d (%q) incomplete", i, sp.Name)
		}
		if seen[sp.Name] {
			t.Errorf("%s registered twice", sp.Name)
		}
		seen[sp.Name] = true
		if sp.Study != (i < 5) {
			t.Errorf("%s: Study = %v at position %d", sp.Name, sp.Study, i)
		}
		if sp.Defaults == nil {
			continue
		}
		if err := sp.Defaults().Validate(); err != nil {
			t.Errorf("%s: its defaults are invalid: %v", sp.Name, err)
		}
		p, err := New(sp.Name, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := SettingsMap(SettingsOf(p)); len(got) != len(SettingKeys(sp.Defaults())) {
			t.Errorf("%s: SettingsOf gives %v, want its %d keys", sp.Name, got, len(SettingKeys(sp.Defaults())))
		}
	}
}

// TestReadsMatch keeps each row's ReadsMatch honest: a policy that says it
// does not read Row.Match decides the same whatever the rows' matches are
// (so the routing state may skip the prefix lookup for it), and one that
// says it does changes some decision when they change.
func TestReadsMatch(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	names := []string{"llm-0", "llm-1", "llm-2", "llm-3", "llm-4"}
	rg := ring.New(names, 40, nil)
	for _, sp := range Specs() {
		p, err := New(sp.Name, nil)
		if err != nil {
			t.Fatal(err)
		}
		changed := 0
		for i := range 2000 {
			v := NewView(names, rg, make([]Load, len(names)))
			for r := range v.Rows {
				v.Rows[r].Load = Load{Requests: int64(rng.IntN(6)), Tokens: int64(rng.IntN(4000))}
				v.Rows[r].Reported = Reported{Running: float64(rng.IntN(4)), Waiting: float64(rng.IntN(3)), KVUse: rng.Float64(), HasQueue: true, HasKV: true}
			}
			v.Recount()
			req := Request{Hash: rng.Uint64(), Seq: uint64(i), PromptTokens: 100 + rng.IntN(3000), OutputTokens: 64, Last: -1, FirstUser: "hello there"}
			if rng.IntN(2) == 0 {
				req.Last, req.CachedTokens = rng.IntN(len(names)), rng.IntN(req.PromptTokens)
			}
			a := pickOnce(p, &req, v)
			for r := range v.Rows {
				v.Rows[r].Match = rng.IntN(req.PromptTokens + 1)
			}
			b := pickOnce(p, &req, v)
			if a.Replica != b.Replica || a.Reason != b.Reason || a.Charge != b.Charge {
				changed++
			}
		}
		if !sp.ReadsMatch && changed > 0 {
			t.Errorf("%s says it does not read Match, but %d of 2000 decisions changed with it", sp.Name, changed)
		}
		if sp.ReadsMatch && changed == 0 {
			t.Errorf("%s says it reads Match, but no decision changed with it", sp.Name)
		}
	}
}
