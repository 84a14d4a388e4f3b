package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/llm-ring/llm-ring/internal/analysis"
	"github.com/llm-ring/llm-ring/profiles"
)

// tinyProfile writes a small profile named name into dir and returns its path.
func tinyProfile(t *testing.T, dir, name string) string {
	t.Helper()
	path := filepath.Join(dir, name+".json")
	body := `{"name": "` + name + `", "conversations": 6, "concurrency": 3, "ramp_s": 1, "turns_min": 2, "turns_max": 3,
	"doc_share": 0, "doc_words": 0, "user_words_min": 8, "user_words_max": 20, "think_s_min": 1, "think_s_max": 2,
	"max_tokens": 32, "max_context_tokens": 3500, "system_prompts": 2}`
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestSimArenaFlagErrors: every bad arena argument is a usage error naming
// the problem.
func TestSimArenaFlagErrors(t *testing.T) {
	dir := t.TempDir()
	a := tinyProfile(t, dir, "tiny")
	other := filepath.Join(dir, "other")
	if err := os.Mkdir(other, 0o755); err != nil {
		t.Fatal(err)
	}
	b := tinyProfile(t, other, "tiny") // another file, the same scenario name
	for _, tc := range []struct {
		args []string
		want string
	}{
		// An unknown name lists the embedded profiles.
		{[]string{"--profiles", "quick", "nope"}, `profile "nope": no such file, and no embedded profile of that name (embedded: ` + strings.Join(profiles.Names(), ", ")},
		{[]string{"--profiles", "quick", "quick"}, `--profiles: "quick" given twice`},
		{[]string{"--profiles", "all", "quick"}, `--profiles: "quick" given twice`},
		{[]string{"--profiles", "quick", "profiles/quick.json"}, `"quick" and "profiles/quick.json" are both named "quick"`},
		{[]string{"--profiles", a, b}, `are both named "tiny"`},
		{[]string{"--profiles", ","}, "name at least one profile"},
		{[]string{"--profile", "quick", "--profiles", "standard"}, "--profile and --profiles: give one"},
		{[]string{"--profiles", "quick", "--sweep", "replicas=2,3"}, "--sweep and --profiles: give one"},
		{[]string{"--profiles", "quick", "--policies", "consistent", "bounded", "--arena-focus", "llm-aware"},
			`--arena-focus: "llm-aware" is not one of the policies run (consistent, bounded)`},
		{[]string{"--arena-focus", "llm-aware"}, "--arena-focus: only with --profiles"},
		{[]string{"--profiles", "quick", "--concurrency", "1000"}, "profile quick (with --conversations/--concurrency)"},
	} {
		err := cmdSim(context.Background(), append([]string{"--out-dir", t.TempDir()}, tc.args...), &bytes.Buffer{}, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want one containing %q", tc.args, err, tc.want)
			continue
		}
		var ue usageError
		if !errors.As(err, &ue) {
			t.Errorf("%q: %v is not a usage error (exit code 2)", tc.args, err)
		}
	}
}

// TestSimArenaCommand runs a small arena end to end: an embedded profile
// and a file, two policies, two seeds. Each scenario gets its folder with
// its runs and analysis; the arena's files are written; stdout has the hit
// rate and p95 matrices and the paired table of the default policy; the
// replicas had a CPU each.
func TestSimArenaCommand(t *testing.T) {
	dir := t.TempDir()
	tiny := tinyProfile(t, t.TempDir(), "tiny")
	var stdout, stderr bytes.Buffer
	args := []string{"--policies", "consistent", "llm-aware", "--profiles", "quick", tiny, "--seeds", "1-2", "--out-dir", dir}
	if err := cmdSim(context.Background(), args, &stdout, &stderr); err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	for _, f := range []string{
		"quick/s1-consistent-sim.csv", "tiny/s2-llm-aware-sim.json", "quick/" + analysis.SummaryMD, "tiny/" + analysis.PerRunCSV,
		analysis.ArenaMD, analysis.HeatMapPNG("hit-rate"), analysis.HeatMapPNG("redirects"),
		analysis.ParetoPNG("quick"), analysis.ParetoPNG("tiny"),
	} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("missing %s: %v", f, err)
		}
	}
	for _, want := range []string{
		"Follow-up hit rate (%), higher is better", "p95 latency (s), lower is better",
		"| policy | quick | tiny |", "| consistent |",
		"Paired: llm-aware − the best other policy", "| quick |",
	} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout.String())
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, "tiny", "s1-consistent-sim.json"))
	if err != nil || !strings.Contains(string(b), `"shared_cpu": false`) {
		t.Errorf("the arena's runs should give each replica a CPU: %v\n%s", err, b)
	}
	md, err := os.ReadFile(filepath.Join(dir, analysis.ArenaMD))
	if err != nil || !strings.Contains(string(md), "each replica with a CPU of its own") {
		t.Errorf("arena.md does not say how the replicas ran: %v", err)
	}
}
