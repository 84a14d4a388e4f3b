package simrun

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/llm-ring/llm-ring/internal/analysis"
	"github.com/llm-ring/llm-ring/internal/model"
	"github.com/llm-ring/llm-ring/internal/sim"
	"github.com/llm-ring/llm-ring/internal/traffic"
)

// arenaJobs are the golden arena's runs: 2 policies × 2 tiny scenarios
// (testdata/arena) × 2 seeds, 3 replicas with a CPU each, each scenario in a
// folder of its own under dir.
func arenaJobs(t *testing.T, dir string) ([]Job, []ArenaFolder) {
	var jobs []Job
	var folders []ArenaFolder
	for _, file := range []string{"tiny-chat.json", "tiny-docs.json"} {
		prof, err := traffic.LoadProfile(os.DirFS(filepath.Join("testdata", "arena")), file)
		if err != nil {
			t.Fatal(err)
		}
		sub := filepath.Join(dir, prof.Name)
		folders = append(folders, ArenaFolder{Name: prof.Name, Dir: sub})
		order := 0
		for _, seed := range []int64{1, 2} {
			for _, pol := range []string{"consistent", "llm-aware"} {
				jobs = append(jobs, Job{Dir: sub, Spec: sim.Spec{RunID: fmt.Sprintf("s%d-%s-sim", seed, pol), Policy: pol,
					Seed: seed, Order: order, Profile: prof, Replicas: 3, Model: model.DefaultConfig(), Router: sim.DefaultRouter()}})
				order++
			}
		}
	}
	return jobs, folders
}

// TestArenaGolden runs a tiny arena end to end: every run in one pool, each
// scenario analysed in its folder, then arena.md (equal to the golden file;
// go test -update rewrites it), a heat map per metric and a Pareto chart
// per scenario.
func TestArenaGolden(t *testing.T) {
	dir := t.TempDir()
	jobs, folders := arenaJobs(t, dir)
	if _, err := RunJobs(context.Background(), jobs, BatchOptions{Workers: 2}); err != nil {
		t.Fatal(err)
	}
	a, paths, err := AnalyzeArena(dir, folders, analysis.ArenaOptions{Setup: "Golden test: 3 replicas, a CPU each.", Focus: "llm-aware"}, 2)
	if err != nil {
		t.Fatal(err)
	}
	if want := 1 + len(a.Metrics) + len(folders); len(paths) != want {
		t.Errorf("%d files written, want %d: %v", len(paths), want, paths)
	}
	for _, p := range paths {
		if st, err := os.Stat(p); err != nil || st.Size() == 0 {
			t.Errorf("%s: missing or empty (%v)", p, err)
		}
	}
	// Each scenario keeps its own complete analysis.
	for _, f := range folders {
		for _, name := range []string{analysis.SummaryMD, analysis.PerRunCSV, analysis.SummaryPNG} {
			if _, err := os.Stat(filepath.Join(f.Dir, name)); err != nil {
				t.Errorf("scenario %s: %v", f.Name, err)
			}
		}
	}
	got, err := os.ReadFile(filepath.Join(dir, analysis.ArenaMD))
	if err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "golden", "arena.md")
	if *update {
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("arena.md differs from %s; if the change is intended, run go test -update and review the diff\n%s", golden, got)
	}
}

// TestArenaFolderName: a scenario's name must be usable as one folder.
func TestArenaFolderName(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"standard", true},     // an embedded profile's name
		{"tiny-chat.v2", true}, // dots inside are fine
		{"", false},            // no folder
		{".", false},           // the arena's own folder
		{"..", false},          // its parent
		{"a/b", false},         // a nested path
		{`a\b`, false},         // a Windows path
	} {
		if err := ArenaFolderName(tc.name); (err == nil) != tc.ok {
			t.Errorf("ArenaFolderName(%q) = %v, want ok %v", tc.name, err, tc.ok)
		}
	}
}
