package experiment

import (
	"context"
	"math"
	"testing"

	"github.com/llm-ring/llm-ring/internal/analysis"
	"github.com/llm-ring/llm-ring/internal/model"
	"github.com/llm-ring/llm-ring/internal/traffic"
	"github.com/llm-ring/llm-ring/profiles"
)

// TestWorkloadRunHasStages runs an open-loop workload live: every request
// of the seed's workload is sent, named by its stage, so that the analysis
// computes the field metrics per stage, with the workload's ideal cached
// share beside the measured one.
func TestWorkloadRunHasStages(t *testing.T) {
	data, ok := profiles.ReadWorkload("shared-prefix")
	if !ok {
		t.Fatal("no embedded workload shared-prefix")
	}
	w, err := traffic.ParseWorkload(data)
	if err != nil {
		t.Fatal(err)
	}
	spec := embeddedSpec(t, "cache-aware")
	spec.Profile = traffic.Profile{}
	spec.Workload = &w
	if spec.Model, err = model.Preset("vllm-h100-8b"); err != nil {
		t.Fatal(err)
	}
	spec.ReplicaPreset, spec.ReplicaAPI, spec.SharedCPU = "vllm-h100-8b", "vllm", false
	spec.Stages = traffic.Stages{Rates: []float64{1, 3}, StageS: 4, WarmupS: 1}
	results, err := Run(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	f, rows := readRun(t, results[0])
	want := w.Requests(traffic.OpenArrivals(spec.Stages, 1), 1)
	if f.Profile != "workload:shared-prefix" || len(rows) != len(want) || f.Errors != 0 {
		t.Logf("first row: %+v", rows[0])
		t.Fatalf("run: profile %q, %d rows (want %d), %d errors", f.Profile, len(rows), len(want), f.Errors)
	}
	names := map[string]bool{}
	for _, r := range want {
		names[r.Conversation] = true
	}
	for _, r := range rows {
		if !names[r.Conversation] {
			t.Fatalf("row %q is not a request of the workload", r.Conversation)
		}
	}
	all, by := traffic.IdealCachedShareByStage(want)
	if f.Metrics["sim_ideal_cached_share"] != all || len(by) != 2 {
		t.Fatalf("ideal cached share %v, want %v (stages %v)", f.Metrics["sim_ideal_cached_share"], all, by)
	}
	runs, err := analysis.Load(spec.OutDir)
	if err != nil {
		t.Fatal(err)
	}
	stages := analysis.StageFields(runs, analysis.SLO{TTFTMS: 1000, TPOTMS: 100})
	if len(stages) != 2 || stages[0].Rate != 1 || stages[1].Rate != 3 {
		t.Fatalf("stages %+v, want rates 1 and 3", stages)
	}
	for _, s := range stages {
		if s.Field.Requests == 0 || math.IsNaN(s.Field.TTFTP90) || math.IsNaN(s.Field.IdealCachedShare) {
			t.Errorf("stage %d: %+v", s.Stage, s.Field)
		}
	}
}
