package experiment

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/llm-ring/llm-ring/internal/config"
	"github.com/llm-ring/llm-ring/internal/traffic"
)

func TestPlan(t *testing.T) {
	ids := func(ps []Planned) []string {
		var out []string
		for i, p := range ps {
			if p.Order != i {
				t.Errorf("run %s has order %d, want %d", p.RunID, p.Order, i)
			}
			out = append(out, p.RunID)
		}
		return out
	}
	for _, tc := range []struct {
		name      string
		policies  []string
		seeds     []int64
		alternate bool
		mode      string
		want      []string
	}{
		// One seed: the policies in the given order.
		{"one seed", []string{"bounded", "llm-aware"}, []int64{1}, false, ModeEmbedded,
			[]string{"s1-bounded-live", "s1-llm-aware-live"}},
		// Without alternate every seed keeps the order.
		{"no alternate", []string{"bounded", "llm-aware"}, []int64{1, 2}, false, ModeEmbedded,
			[]string{"s1-bounded-live", "s1-llm-aware-live", "s2-bounded-live", "s2-llm-aware-live"}},
		// Alternate reverses the 2nd and 4th seeds' order, not the 1st, 3rd, 5th.
		{"alternate", []string{"bounded", "llm-aware"}, []int64{1, 2, 3, 4, 5}, true, ModeEmbedded,
			[]string{"s1-bounded-live", "s1-llm-aware-live", "s2-llm-aware-live", "s2-bounded-live",
				"s3-bounded-live", "s3-llm-aware-live", "s4-llm-aware-live", "s4-bounded-live",
				"s5-bounded-live", "s5-llm-aware-live"}},
		// Three policies are reversed as a whole; ids name the external mode.
		{"alternate three, external", []string{"mod-n", "consistent", "bounded"}, []int64{7, 8}, true, ModeExternal,
			[]string{"s7-mod-n-external", "s7-consistent-external", "s7-bounded-external",
				"s8-bounded-external", "s8-consistent-external", "s8-mod-n-external"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := append([]string(nil), tc.policies...)
			got := ids(Plan(tc.policies, tc.seeds, tc.alternate, tc.mode))
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Plan = %v\nwant %v", got, tc.want)
			}
			if !reflect.DeepEqual(in, tc.policies) {
				t.Errorf("Plan modified its policies argument: %v", tc.policies)
			}
		})
	}
}

func TestParseSeeds(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    []int64
		wantErr string // substring of the error; "" for success
	}{
		{"1-5", []int64{1, 2, 3, 4, 5}, ""},             // a range, inclusive
		{"1,2,3", []int64{1, 2, 3}, ""},                 // a list
		{"1-3, 7", []int64{1, 2, 3, 7}, ""},             // both, spaces allowed
		{"42", []int64{42}, ""},                         // one seed
		{"4-4", []int64{4}, ""},                         // a one-seed range
		{"0", []int64{0}, ""},                           // zero is a seed
		{"", nil, "empty seed list"},                    // nothing
		{"1,,2", nil, "empty item"},                     // a hole in the list
		{"a", nil, `"a" is not a seed`},                 // not a number
		{"1-x", nil, `"1-x" is not a seed`},             // half a range
		{"-3", nil, `"-3" is not a seed`},               // negative seeds are not accepted
		{"5-1", nil, `range "5-1" goes down`},           // backwards
		{"1-3,2", nil, "seed 2 listed twice"},           // overlap
		{"1-100000", nil, "more than 1000 seeds"},       // a typing mistake
		{"1-600,700-1300", nil, "more than 1000 seeds"}, // too many in all
	} {
		got, err := ParseSeeds(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParseSeeds(%q) error = %v, want one containing %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParseSeeds(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func TestValidateNamesTheProblem(t *testing.T) {
	good := func() Spec {
		return Spec{Policies: []string{"bounded"}, Seeds: []int64{1}, Profile: tinyProfile(), Replicas: 3, Speed: 10, OutDir: "x"}
	}
	if err := (&Spec{}).Validate(); err == nil {
		t.Fatal("the zero Spec is valid")
	}
	if s := good(); s.Validate() != nil {
		t.Fatalf("good spec: %v", s.Validate())
	}
	for _, tc := range []struct {
		name   string
		change func(*Spec)
		want   string
	}{
		{"unknown policy", func(s *Spec) { s.Policies = []string{"bounded", "fastest"} }, `unknown policy "fastest"`},
		{"policy twice", func(s *Spec) { s.Policies = []string{"bounded", "bounded"} }, `policy "bounded" listed twice`},
		{"no policy", func(s *Spec) { s.Policies = nil }, "no policy"},
		{"no seed", func(s *Spec) { s.Seeds = nil }, "no seed"},
		{"seed twice", func(s *Spec) { s.Seeds = []int64{3, 3} }, "seed 3 listed twice"},
		{"zero speed", func(s *Spec) { s.Speed = 0 }, "speed must be a positive number"},
		{"negative scale-at", func(s *Spec) { s.ScaleAt = -time.Second }, "scale-at must not be negative"},
		{"no replica", func(s *Spec) { s.Replicas = 0 }, "replicas must be between 1 and 1000"},
		{"bad profile", func(s *Spec) { s.Profile.TurnsMin = 0 }, "turns_min"},
		{"no output", func(s *Spec) { s.OutDir = "" }, "no output folder"},
		{"scale command without router", func(s *Spec) { s.ScaleCmd = "true" }, "external router only"},
		{"bad router URL", func(s *Spec) { s.RouterURL = "localhost:8080" }, "must be an absolute http(s) URL"},
		// The admin API has its own listener: external mode needs its URL.
		{"router without admin URL", func(s *Spec) { s.RouterURL = "http://127.0.0.1:1" }, "needs its admin API's URL"},
		{"bad admin URL", func(s *Spec) { s.RouterURL, s.AdminURL = "http://127.0.0.1:1", "127.0.0.1:2" }, `admin URL "127.0.0.1:2"`},
		// Active-active instances (issue 13): one admin API per instance.
		{"fewer admin URLs than routers", func(s *Spec) {
			s.RouterURL, s.AdminURL = "http://127.0.0.1:1,http://127.0.0.1:3", "http://127.0.0.1:2"
		}, "2 router URLs but 1 admin URLs"},
		{"bad second router URL", func(s *Spec) {
			s.RouterURL, s.AdminURL = "http://127.0.0.1:1,127.0.0.1:3", "http://127.0.0.1:2,http://127.0.0.1:4"
		}, `router URL "127.0.0.1:3"`},
		{"external scale-up without unscale", func(s *Spec) {
			s.RouterURL, s.AdminURL, s.ScaleAt, s.ScaleCmd = "http://127.0.0.1:1", "http://127.0.0.1:2", time.Second, "true"
		}, "needs both a scale command and an unscale command"},
		{"prepare without commands", func(s *Spec) { s.RouterURL, s.AdminURL, s.Prepare = "http://127.0.0.1:1", "http://127.0.0.1:2", true }, "prepare needs both"},
	} {
		s := good()
		tc.change(&s)
		if err := s.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Validate() = %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
}

// The embedded router's defaults are config/router.yaml's values, so that
// "llm-ring run" and "llm-ring router --config config/router.yaml" route
// alike.
func TestDefaultRouterConfigIsTheShippedFile(t *testing.T) {
	file, err := config.Load("../../config/router.yaml")
	if err != nil {
		t.Fatal(err)
	}
	def := DefaultRouterConfig()
	if err := def.Validate(); err != nil {
		t.Fatalf("DefaultRouterConfig is invalid: %v", err)
	}
	def.Listen = file.Listen // the embedded router takes a free loopback port
	if !reflect.DeepEqual(def, file) {
		t.Errorf("DefaultRouterConfig differs from config/router.yaml:\n got %+v\nwant %+v", def, file)
	}
}

// tinyProfile is a profile small enough for end-to-end tests: a handful of
// short conversations with short answers.
func tinyProfile() traffic.Profile {
	return traffic.Profile{
		Name:             "tiny",
		Conversations:    6,
		Concurrency:      3,
		RampS:            1,
		TurnsMin:         2,
		TurnsMax:         3,
		UserWordsMin:     5,
		UserWordsMax:     12,
		ThinkSMin:        1,
		ThinkSMax:        2,
		MaxTokens:        8,
		MaxContextTokens: 3500,
		SystemPrompts:    2,
	}
}
