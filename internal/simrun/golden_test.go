package simrun

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/llm-ring/llm-ring/internal/analysis"
	"github.com/llm-ring/llm-ring/internal/model"
	"github.com/llm-ring/llm-ring/internal/sim"
	"github.com/llm-ring/llm-ring/internal/traffic"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/golden")

// goldenSpecs are the runs of the golden test (the simulator's golden
// files: the study's policies' results must not change): the quick profile, seed 1,
// bounded and llm-aware on 3 replicas with a scale-up at 30 s.
func goldenSpecs(t *testing.T) []sim.Spec {
	prof, err := traffic.LoadProfile(os.DirFS("."), "quick")
	if err != nil {
		t.Fatal(err)
	}
	var specs []sim.Spec
	for i, pol := range []string{"bounded", "llm-aware"} {
		specs = append(specs, sim.Spec{RunID: "s1-" + pol + "-sim", Policy: pol, Seed: 1, Order: i, Profile: prof,
			Replicas: 3, Model: model.DefaultConfig(), Router: sim.DefaultRouter(),
			ScaleAt: 30 * time.Second, LoadDelay: 20 * time.Second})
	}
	return specs
}

// TestGolden: the same arguments give byte-identical files (CSV and JSON),
// equal to the golden ones; run with -update after an intended change and
// review the diff.
func TestGolden(t *testing.T) {
	dir := t.TempDir()
	if _, err := RunAll(context.Background(), dir, goldenSpecs(t), BatchOptions{Workers: 2}); err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "golden")
	for _, sp := range goldenSpecs(t) {
		for _, ext := range []string{".csv", ".json"} {
			name := sp.RunID + ext
			got, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(golden, name)
			if *update {
				if err := os.MkdirAll(golden, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
				continue
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test -update to create it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s differs from %s (%d vs %d bytes); if the change is intended, run go test -update and review the diff",
					name, path, len(got), len(want))
			}
		}
	}
	// The analysis reads the folder as it reads live runs.
	runs, err := analysis.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	s := analysis.Summarize(runs, analysis.Options{})
	if len(s.Policies) != 2 || s.Policies[0].Errors != 0 || s.Policies[1].Errors != 0 {
		t.Fatalf("analysis: %+v", s.Policies)
	}
	for _, m := range s.Runs {
		if !m.ScaleUp || m.Mode != sim.Mode {
			t.Fatalf("%s: scale-up %v mode %q, want a scale-up and mode sim", m.RunID, m.ScaleUp, m.Mode)
		}
	}
}

// TestWorkersDoNotMatter: one worker or several, the files are the same.
func TestWorkersDoNotMatter(t *testing.T) {
	specs := goldenSpecs(t)
	for i := range specs {
		specs[i].Seed = 7
	}
	a, b := t.TempDir(), t.TempDir()
	if _, err := RunAll(context.Background(), a, specs, BatchOptions{Workers: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := RunAll(context.Background(), b, specs, BatchOptions{Workers: 4}); err != nil {
		t.Fatal(err)
	}
	for _, sp := range specs {
		for _, ext := range []string{".csv", ".json"} {
			x, _ := os.ReadFile(filepath.Join(a, sp.RunID+ext))
			y, _ := os.ReadFile(filepath.Join(b, sp.RunID+ext))
			if len(x) == 0 || !bytes.Equal(x, y) {
				t.Fatalf("%s%s: %d bytes with 1 worker, %d with 4, or they differ", sp.RunID, ext, len(x), len(y))
			}
		}
	}
}

// TestRunAllRefusesToOverwrite: existing run files stop the batch before
// anything runs, unless Force.
func TestRunAllRefusesToOverwrite(t *testing.T) {
	dir := t.TempDir()
	specs := goldenSpecs(t)[:1]
	path := filepath.Join(dir, specs[0].RunID+".json")
	if err := os.WriteFile(path, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := RunAll(context.Background(), dir, specs, BatchOptions{}); err == nil || !bytes.Contains([]byte(err.Error()), []byte(path)) {
		t.Fatalf("err = %v, want one naming %s", err, path)
	}
	if _, err := os.Stat(filepath.Join(dir, specs[0].RunID+".csv")); err == nil {
		t.Fatal("the CSV was written although the batch was refused")
	}
	if _, err := RunAll(context.Background(), dir, specs, BatchOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
}

// TestCancel: a cancelled context stops a run with the context's error and
// leaves no JSON (so the analysis refuses the partial CSV).
func TestCancel(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	specs := goldenSpecs(t)
	_, err := RunAll(ctx, dir, specs, BatchOptions{})
	if err == nil {
		t.Fatal("no error from a cancelled batch")
	}
	for _, sp := range specs {
		if _, err := os.Stat(filepath.Join(dir, sp.RunID+".json")); err == nil {
			t.Fatalf("%s.json written by a cancelled run", sp.RunID)
		}
	}
}
