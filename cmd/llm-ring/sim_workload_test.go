package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llm-ring/llm-ring/internal/analysis"
	"github.com/llm-ring/llm-ring/internal/traffic"
)

func TestSimWorkloadFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--workload", "nope"}, `workload "nope"`},
		{[]string{"--workload", "low-sharing", "--rates", "1,x"}, "--rates"},
		{[]string{"--workload", "low-sharing", "--rates", "0"}, "--rates"},
		{[]string{"--workload", "low-sharing", "--arrival", "zipf"}, "--arrival"},
		{[]string{"--workload", "low-sharing", "--workloads", "all"}, "give one"},
		{[]string{"--workload", "low-sharing", "--profile", "quick"}, "--profile and --workload"},
		{[]string{"--rates", "1,2"}, "only with --workload"},
		{[]string{"--workloads", "low-sharing,low-sharing"}, "given twice"},
		{[]string{"--engine", "tgi"}, "engine"},
	} {
		err := cmdSim(context.Background(), append(tc.args, "--out-dir", t.TempDir()), &bytes.Buffer{}, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want %q", tc.args, err, tc.want)
		}
	}
}

// The open-loop arena on the paged engine: every workload's stage table
// and charts.
func TestSimWorkloadsArena(t *testing.T) {
	dir := t.TempDir()
	var stdout bytes.Buffer
	err := cmdSim(context.Background(), []string{"--engine", "vllm", "--replica-preset", "vllm-l4-qwen0.5b", "--replicas", "2",
		"--policies", "round-robin,cache-aware", "--workloads", "all", "--rates", "2,4", "--stage-duration", "10s",
		"--warmup", "1s", "--seeds", "1-2", "--out-dir", dir}, &stdout, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"low-sharing", "multi-round", "shared-prefix"} {
		for _, f := range []string{"per_stage.csv", "per_run.csv", "field.md", "field_ttft_p90.png", "field_goodput.png"} {
			if _, err := os.Stat(filepath.Join(dir, w, f)); err != nil {
				t.Errorf("%s: %v", w, err)
			}
		}
		b, _ := os.ReadFile(filepath.Join(dir, w, "per_stage.csv"))
		// 2 policies × 2 stages × 2 seeds, and the header
		if n := strings.Count(string(b), "\n"); n != 9 {
			t.Errorf("%s: per_stage.csv has %d lines, want 9", w, n)
		}
	}
	if !strings.Contains(stdout.String(), "rate where TTFT p90 crosses") {
		t.Errorf("stdout %s", stdout.String())
	}
}

// A synthetic Mooncake-format trace (prompts of many 512-token blocks,
// a third of them repeating an earlier prefix) on the paged engine: the
// existing --trace replay runs it in seconds of model time, not hours.
func TestSimMooncakeTraceOnPagedEngine(t *testing.T) {
	dir := t.TempDir()
	var b strings.Builder
	for i := 0; i < 60; i++ {
		ids := []string{}
		shared := i / 5 // twelve families of prefixes, five requests each in a row
		for j := 0; j < 14; j++ {
			id := 1000*shared + j
			if j >= 8 {
				id = 100000 + 100*i + j // the request's own tail
			}
			ids = append(ids, fmt.Sprint(id))
		}
		fmt.Fprintf(&b, `{"timestamp": %d, "input_length": %d, "output_length": 64, "hash_ids": [%s]}`+"\n", i*500, 14*512, strings.Join(ids, ", "))
	}
	trace := filepath.Join(dir, "trace.jsonl")
	if err := os.WriteFile(trace, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	err := cmdSim(context.Background(), []string{"--engine", "vllm", "--replica-preset", "vllm-h100-8b", "--replicas", "8",
		"--shared-cpu=false", "--policies", "round-robin,cache-aware", "--trace", trace, "--out-dir", out}, &bytes.Buffer{}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	runs, err := analysis.Load(out)
	if err != nil {
		t.Fatal(err)
	}
	reqs, err := loadTrace(trace)
	if err != nil {
		t.Fatal(err)
	}
	ideal := traffic.IdealCachedShare(reqs)
	share := map[string]float64{}
	for _, f := range analysis.RunFields(runs, analysis.SLO{TTFTMS: 1000, TPOTMS: 100}) {
		if f.E2EP50 > 10000 {
			t.Errorf("%s: median latency %.0f ms: hours, not seconds", f.Policy, f.E2EP50)
		}
		share[f.Policy] = f.CachedShare
	}
	// 8 of 14 blocks are a family's prefix, seen before by all but the
	// first of each family.
	if math.Abs(ideal-float64(48*8)/float64(60*14)) > 1e-9 {
		t.Fatalf("ideal %v", ideal)
	}
	if !(share["cache-aware"] > share["round-robin"]+0.2 && share["cache-aware"] <= ideal+0.01) {
		t.Errorf("cached share: cache-aware %.3f, round-robin %.3f, ideal %.3f", share["cache-aware"], share["round-robin"], ideal)
	}
}

func TestSimAdmissionFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--admission-set", "queue_capacity=4"},
		{"--admission", "--admission-set", "queue_capacity"},
		{"--admission", "--admission-set", "nope=1"},
		{"--admission", "--admission-set", "order=lifo"},
		{"--admission", "--admission-high-share", "2"},
	} {
		if _, err := parseSimFlags(args, io.Discard); err == nil {
			t.Errorf("%v: accepted", args)
		}
	}
	o, err := parseSimFlags([]string{"--admission", "--admission-set", "queue_capacity=4", "--admission-set", "max_wait=2s",
		"--slo-ttft", "500ms", "--admission-tenants", "3"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	a := o.admission
	if a == nil || a.Settings.QueueCapacity != 4 || a.Settings.MaxWaitNs != 2e9 || a.SLOTTFT != 500*time.Millisecond || a.Tenants != 3 {
		t.Fatalf("admission %+v", a)
	}
}
