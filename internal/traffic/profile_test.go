package traffic

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/llm-ring/llm-ring/profiles"
)

// validProfile is a complete, valid profile as a JSON object.
func validProfile() map[string]any {
	return map[string]any{
		"name": "t", "conversations": 10, "concurrency": 5, "ramp_s": 2,
		"turns_min": 2, "turns_max": 4, "doc_share": 0.5, "doc_words": 300,
		"user_words_min": 5, "user_words_max": 20, "think_s_min": 1, "think_s_max": 2,
		"max_tokens": 64, "max_context_tokens": 2000, "system_prompts": 2,
	}
}

func TestParseProfileErrors(t *testing.T) {
	tests := []struct {
		name   string
		edit   func(m map[string]any)
		errHas string // the error must contain this (the key, and what is wrong)
	}{
		{"valid profile", func(m map[string]any) {}, ""},
		{"description is optional and allowed", func(m map[string]any) { m["description"] = "x" }, ""},
		{"missing key", func(m map[string]any) { delete(m, "think_s_max") }, "think_s_max: missing"},
		{"unknown key", func(m map[string]any) { m["turns"] = 3 }, "turns: unknown key"},
		{"misspelt key", func(m map[string]any) { m["doc_shares"] = 0.3 }, "doc_shares: unknown key"},
		{"string for an integer", func(m map[string]any) { m["turns_min"] = "3" }, "turns_min: must be an integer"},
		{"fraction for an integer", func(m map[string]any) { m["max_tokens"] = 1.5 }, "max_tokens: must be an integer"},
		{"string for a number", func(m map[string]any) { m["doc_share"] = "30%" }, "doc_share: must be a number"},
		{"empty name", func(m map[string]any) { m["name"] = " " }, "name: must not be empty"},
		{"no conversations", func(m map[string]any) { m["conversations"] = 0 }, "conversations: must be between 1"},
		{"more users than conversations", func(m map[string]any) { m["concurrency"] = 11 }, "concurrency: must be between 1 and 10"},
		{"negative ramp", func(m map[string]any) { m["ramp_s"] = -1 }, "ramp_s: must be between 0"},
		{"zero turns", func(m map[string]any) { m["turns_min"] = 0 }, "turns_min: must be between 1"},
		{"turns_min > turns_max", func(m map[string]any) { m["turns_min"] = 5 }, "turns_max: must be between 5"},
		{"share above 1", func(m map[string]any) { m["doc_share"] = 1.5 }, "doc_share: must be between 0 and 1"},
		{"negative share", func(m map[string]any) { m["doc_share"] = -0.1 }, "doc_share: must be between 0 and 1"},
		{"documents of no words", func(m map[string]any) { m["doc_words"] = 0 }, "doc_words: must be between 1"},
		{"no documents needs no words", func(m map[string]any) { m["doc_share"] = 0; m["doc_words"] = 0 }, ""},
		{"user words min > max", func(m map[string]any) { m["user_words_min"] = 30 }, "user_words_max: must be between 30"},
		{"think min > max", func(m map[string]any) { m["think_s_min"] = 3 }, "think_s_max: must be ≥ think_s_min"},
		{"negative think", func(m map[string]any) { m["think_s_min"] = -1 }, "think_s_min: must be between 0"},
		{"no answer tokens", func(m map[string]any) { m["max_tokens"] = 0 }, "max_tokens: must be between 1"},
		{"no system prompt", func(m map[string]any) { m["system_prompts"] = 0 }, "system_prompts: must be between 1"},
		{"context below the first turn", func(m map[string]any) { m["max_context_tokens"] = 400 }, "max_context_tokens: 400 is too small"},
		{"context bound counts max_tokens", func(m map[string]any) { m["max_tokens"] = 1900 }, "max_context_tokens: 2000 is too small"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := validProfile()
			tt.edit(m)
			data, err := json.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			_, err = ParseProfile(data)
			switch {
			case tt.errHas == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tt.errHas != "" && err == nil:
				t.Fatalf("no error, want one containing %q", tt.errHas)
			case tt.errHas != "" && !strings.Contains(err.Error(), tt.errHas):
				t.Fatalf("error %q does not contain %q", err, tt.errHas)
			}
		})
	}
}

func TestParseProfileNotAnObject(t *testing.T) {
	for _, in := range []string{`[1, 2]`, `{"name": `, `"quick"`} {
		if _, err := ParseProfile([]byte(in)); err == nil {
			t.Errorf("ParseProfile(%s): no error", in)
		}
	}
}

// The replicas' per-slot context (LLAMA_ARG_CTX_SIZE / LLAMA_ARG_N_PARALLEL).
const replicaSlotContext = 4096

func TestShippedProfiles(t *testing.T) {
	names := profiles.Names()
	if want := "agents,bursty,churn,hetero,hot,light,overload,quick,rag,standard"; strings.Join(names, ",") != want {
		t.Fatalf("embedded profiles %v, want %s", names, want)
	}
	for _, name := range names {
		p := mustLoad(t, name)
		if p.Name != name {
			t.Errorf("%s.json: name %q, want %q", name, p.Name, name)
		}
		if len(p.Description) < 40 {
			t.Errorf("%s.json: description %q: say what real workload it stands for and what it stresses", name, p.Description)
		}
		// Every first turn fits the context budget, for a few seeds.
		for seed := int64(1); seed <= 3; seed++ {
			cs := mustGenerate(t, p, seed)
			for i := range cs {
				if !Fits(p, &cs[i], 0, 0) {
					t.Fatalf("%s seed %d: %s: first turn does not fit max_context_tokens", name, seed, cs[i].ID)
				}
			}
		}
		// The generator estimates prompt sizes: keep ≥ 10 % of the slot free.
		if p.MaxContextTokens > replicaSlotContext*9/10 {
			t.Errorf("%s: max_context_tokens %d leaves less than 10%% of the %d-token slot as margin",
				name, p.MaxContextTokens, replicaSlotContext)
		}
		// The embedded bytes are the files in profiles/.
		disk, err := os.ReadFile(filepath.Join("..", "..", "profiles", name+".json"))
		if err != nil {
			t.Fatal(err)
		}
		if emb, _ := profiles.Read(name); string(emb) != string(disk) {
			t.Errorf("embedded %s differs from profiles/%s.json", name, name)
		}
	}
	std := mustLoad(t, "standard")
	if std.Concurrency != 50 || std.DocShare != 0.3 || std.DocWords != 600 || std.TurnsMin != 5 || std.TurnsMax != 10 {
		t.Errorf("standard profile drifted from the study's shape: %+v", std)
	}
}

func TestLoadProfile(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "mine.json")
	data, _ := json.Marshal(validProfile())
	if err := os.WriteFile(good, data, 0o644); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"name": "x"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		arg      string
		wantName string // "" when an error is expected
		errHas   string
	}{
		{"quick", "quick", ""},                     // embedded, by name
		{"standard.json", "standard", ""},          // embedded, file name
		{"profiles/quick.json", "quick", ""},       // embedded, repository path (no such file here)
		{"mine.json", "t", ""},                     // a file
		{"nosuch", "", "embedded: agents, bursty"}, // lists what exists
		{"profiles/x.json", "", `profile "profiles/x.json": no such file`},
		{"bad.json", "", "bad.json: conversations: missing"}, // names the file and the key
		{".", "", "profile: read"},                           // a directory is not a profile
	}
	for _, tt := range tests {
		p, err := LoadProfile(os.DirFS(dir), tt.arg)
		switch {
		case tt.wantName != "" && err != nil:
			t.Errorf("LoadProfile(%q): %v", tt.arg, err)
		case tt.wantName != "" && p.Name != tt.wantName:
			t.Errorf("LoadProfile(%q): name %q, want %q", tt.arg, p.Name, tt.wantName)
		case tt.wantName == "" && (err == nil || !strings.Contains(err.Error(), tt.errHas)):
			t.Errorf("LoadProfile(%q): error %v, want one containing %q", tt.arg, err, tt.errHas)
		}
	}
}

// A profile written back as JSON (as run records and tests do) parses
// again: the optional keys are left out when unset.
func TestProfileRoundTrip(t *testing.T) {
	for _, name := range profiles.Names() {
		p := mustLoad(t, name)
		b, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		q, err := ParseProfile(b)
		if err != nil {
			t.Fatalf("%s written back: %v\n%s", name, err, b)
		}
		if a, b := fmt.Sprintf("%+v", render(p, 1, mustGenerate(t, p, 1))), fmt.Sprintf("%+v", render(q, 1, mustGenerate(t, q, 1))); a != b {
			t.Errorf("%s written back generates other conversations", name)
		}
	}
}
