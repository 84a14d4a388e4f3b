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
)

// TestSimFlagErrors: every bad argument is a usage error naming the problem.
func TestSimFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--policies", "fastest"}, `unknown policy "fastest"`},
		{[]string{"--policies", "bounded", "bounded"}, `"bounded" given twice`},
		{[]string{"--policies", "all", "bounded"}, `"bounded" given twice`},
		{[]string{"--seeds", "1,x"}, "--seeds: "},
		{[]string{"--seeds", "3-1"}, "--seeds: "},
		{[]string{"--seed", "1", "--seeds", "2"}, "not both"},
		{[]string{"--profile", "nope"}, `profile "nope"`},
		{[]string{"--replicas", "0"}, "replicas: must be at least 1, got 0"},
		{[]string{"--routers", "65"}, "routers: must be between 1 and 64, got 65"},
		{[]string{"--load-delay", "-1s"}, "load-delay: must not be negative"},
		{[]string{"--gossip-batch", "-1ms"}, "gossip-batch: must not be negative"},
		{[]string{"--routers", "0"}, "--routers: must be between 1 and 64, got 0"},
		{[]string{"--set", "bounded.epsilon=0"}, "--set bounded.epsilon=0: policies.bounded.epsilon: must be > 0"},
		{[]string{"--set", "bounded.load_unit=bytes"}, "policies.bounded.load_unit"},
		{[]string{"--set", "policy.nope=1"}, "none of the policies"},
		{[]string{"--set", "epsilon=1"}, "want NAME.KEY=VALUE"},
		{[]string{"--policies", "consistent", "--set", "policy.epsilon=0.5"}, "none of the policies (consistent) has key"},
		{[]string{"--n-parallel", "0"}, "n_parallel"},
		{[]string{"--concurrency", "1000"}, "concurrency"},
		{[]string{"--scale-at", "-1"}, "--scale-at"},
		{[]string{"--sweep", "policy.epsilon"}, "want KEY=V1,V2"},
		{[]string{"--sweep", "nope=1,2"}, `no flag named "nope"`},
		{[]string{"--sweep", "seeds=1,2"}, "cannot be swept"},
		{[]string{"--sweep", "policy.epsilon=0.5,0.5"}, "given twice"},
		{[]string{"--config", "/nonexistent/router.yaml"}, "router.yaml"},
	} {
		var stderr bytes.Buffer
		err := cmdSim(context.Background(), joinArgs(tc.args, t.TempDir()), &bytes.Buffer{}, &stderr)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want one containing %q", tc.args, err, tc.want)
			continue
		}
		var ue usageError
		if !errors.As(err, &ue) {
			t.Errorf("%q: %v is not a usage error (exit code 2)", tc.args, err)
		}
	}
	// What sim.Spec.Validate refuses is refused before anything runs, as a
	// usage error: here a scenario's replica events on a shared CPU.
	err := cmdSim(context.Background(), []string{"--out-dir", t.TempDir(), "--profiles", "churn", "--shared-cpu"}, &bytes.Buffer{}, &bytes.Buffer{})
	var ue usageError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "replica events need a CPU per replica") {
		t.Errorf("churn on a shared CPU: error %v, want a usage error about replica events", err)
	}
	// A sweep value the flag rejects names the key and the value.
	err = cmdSim(context.Background(), []string{"--profile", "quick", "--out-dir", t.TempDir(), "--sweep", "policy.epsilon=0.5,-1"}, &bytes.Buffer{}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "--sweep policy.epsilon=-1") {
		t.Errorf("bad sweep value: error %v", err)
	}
}

func joinArgs(args []string, dir string) []string {
	return append([]string{"--out-dir", dir, "--profile", "quick"}, args...)
}

// TestSimCommand runs the command end to end on the quick profile: the runs'
// files, the analysis, the table on stdout; a second run into the same
// folder is refused; a sweep writes one folder per value plus its table and
// chart.
func TestSimCommand(t *testing.T) {
	dir := t.TempDir()
	var stdout, stderr bytes.Buffer
	args := []string{"--policies", "consistent", "llm-aware-no-memory", "--profile", "quick", "--seeds", "1-2", "--out-dir", dir}
	if err := cmdSim(context.Background(), args, &stdout, &stderr); err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	for _, f := range []string{"s1-consistent-sim.csv", "s2-llm-aware-no-memory-sim.json", analysis.SummaryMD, analysis.SummaryPNG} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("missing %s: %v", f, err)
		}
	}
	if !strings.Contains(stdout.String(), "| Metric | consistent | llm-aware-no-memory |") {
		t.Errorf("stdout has no summary table:\n%s", stdout.String())
	}
	if err := cmdSim(context.Background(), args, &stdout, &stderr); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Errorf("second run into the same folder: %v, want a refusal", err)
	}

	sweep := t.TempDir()
	stdout.Reset()
	if err := cmdSim(context.Background(), []string{"--policies", "bounded", "llm-aware", "--profile", "quick",
		"--seeds", "1,2", "--out-dir", sweep, "--sweep", "policy.epsilon=0.1,1"}, &stdout, &stderr); err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	for _, f := range []string{"sweep-policy.epsilon.md", "sweep-policy.epsilon.png", "policy.epsilon=0.1/s2-bounded-sim.csv", "policy.epsilon=1/summary.md"} {
		if _, err := os.Stat(filepath.Join(sweep, f)); err != nil {
			t.Errorf("missing %s: %v", f, err)
		}
	}
	for _, want := range []string{"| policy.epsilon | policy |", "| 0.1 | bounded | 2 |", "| 1 | llm-aware | 2 |"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("sweep table lacks %q:\n%s", want, stdout.String())
		}
	}
	// The swept value reached the runs.
	b, err := os.ReadFile(filepath.Join(sweep, "policy.epsilon=0.1", "s1-bounded-sim.json"))
	if err != nil || !strings.Contains(string(b), `"epsilon": 0.1`) {
		t.Errorf("epsilon=0.1 run JSON does not record epsilon 0.1: %v", err)
	}
}

// TestSimTraceRunsInParallel: a trace replayed by several policies at once
// gives each run its own source (a run's source caches block texts): under
// -race, a shared one was a concurrent map write (found running the
// README's --trace command).
func TestSimTraceRunsInParallel(t *testing.T) {
	var stdout, stderr bytes.Buffer
	err := cmdSim(context.Background(), []string{"--policies", "consistent,cache-aware,predictive", "--workers", "3",
		"--trace", filepath.Join("..", "..", "internal", "traffic", "testdata", "trace-small.jsonl"),
		"--shared-cpu=false", "--replica-preset", "gpu-h100-8b", "--out-dir", t.TempDir()}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "3 runs") {
		t.Errorf("stderr %q, want 3 runs", stderr.String())
	}
}
