package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/llm-ring/llm-ring/internal/analysis"
	"github.com/llm-ring/llm-ring/internal/experiment"
	"github.com/llm-ring/llm-ring/internal/traffic"
)

func TestGatherList(t *testing.T) {
	for _, tc := range []struct {
		in, want []string
	}{
		// Words after the flag join its value, up to the next flag.
		{[]string{"--policies", "bounded", "llm-aware", "--seed", "1"}, []string{"--policies=bounded,llm-aware", "--seed", "1"}},
		// One dash works too, and so does a list at the end.
		{[]string{"--seed", "2", "-policies", "mod-n", "consistent"}, []string{"--seed", "2", "--policies=mod-n,consistent"}},
		// An "=" value keeps the words that follow.
		{[]string{"--policies=bounded", "llm-aware"}, []string{"--policies=bounded,llm-aware"}},
		// A comma list passes as it is.
		{[]string{"--policies", "bounded,llm-aware"}, []string{"--policies=bounded,llm-aware"}},
		// No value: left for the flag package to report.
		{[]string{"--policies", "--seed", "1"}, []string{"--policies", "--seed", "1"}},
		// Other flags and their values are untouched; so is "--" and what follows.
		{[]string{"--profile", "quick", "--", "--policies", "x"}, []string{"--profile", "quick", "--", "--policies", "x"}},
		// A flag whose name only starts like it is another flag.
		{[]string{"--policies-file", "a", "b"}, []string{"--policies-file", "a", "b"}},
	} {
		if got := gatherList(tc.in, "policies"); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("gatherList(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// Command-line mistakes stop the command before anything runs, with exit
// code 2 and a message that names the problem.
func TestRunFlagErrors(t *testing.T) {
	out := t.TempDir()
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"unknown policy", []string{"run", "--policies", "bounded", "fastest", "--out-dir", out}, `unknown policy "fastest"`},
		{"policy twice", []string{"run", "--policies", "bounded", "bounded", "--out-dir", out}, `"bounded" listed twice`},
		{"bad seeds", []string{"run", "--seeds", "5-1", "--out-dir", out}, `--seeds: seed list "5-1": range "5-1" goes down`},
		{"seeds not numbers", []string{"run", "--seeds", "one,two", "--out-dir", out}, `"one" is not a seed`},
		{"seed and seeds", []string{"run", "--seed", "1", "--seeds", "1-5", "--out-dir", out}, "give --seed or --seeds, not both"},
		{"unknown profile", []string{"run", "--profile", "enormous", "--out-dir", out}, `profile "enormous": no such file`},
		{"negative scale-at", []string{"run", "--scale-at", "-5", "--out-dir", out}, "--scale-at: must be between 0"},
		{"zero speed", []string{"run", "--speed", "0", "--out-dir", out}, "speed must be a positive number"},
		{"scale-cmd without router", []string{"run", "--scale-cmd", "kubectl scale statefulset/llm --replicas=4", "--out-dir", out},
			"--scale-cmd applies to an external router only"},
		{"router-config with router", []string{"run", "--router", "http://127.0.0.1:1", "--router-config", "x.yaml", "--out-dir", out},
			"--router-config applies to embedded replicas and router"},
		{"bad router URL", []string{"run", "--router", "127.0.0.1:8080", "--admin", "http://127.0.0.1:9090", "--out-dir", out}, "must be an absolute http(s) URL"},
		{"router without admin", []string{"run", "--router", "http://127.0.0.1:8080", "--out-dir", out}, "--admin: the router's admin.listen"},
		{"admin without router", []string{"run", "--admin", "http://127.0.0.1:9090", "--out-dir", out}, "--admin applies to an external router only"},
		{"missing router config", []string{"run", "--router-config", filepath.Join(out, "none.yaml"), "--out-dir", out}, "--router-config"},
		{"unknown replica api", []string{"run", "--replica-api", "tgi", "--out-dir", out}, `--replica-api: must be one of llamacpp, vllm, sglang, got "tgi"`},
		{"replica api with router", []string{"run", "--router", "http://127.0.0.1:8080", "--admin", "http://127.0.0.1:9090", "--replica-api", "vllm", "--out-dir", out},
			"--replica-api applies to embedded replicas"},
		{"stray argument", []string{"run", "--seed", "1", "bounded", "--out-dir", out}, `unexpected argument "bounded"`},
		{"workload and profile", []string{"run", "--workload", "shared-prefix", "--profile", "standard", "--out-dir", out}, "--profile and --workload: give one"},
		{"rates without workload", []string{"run", "--rates", "1,2", "--out-dir", out}, "--rates: only with --workload"},
		{"unknown workload", []string{"run", "--workload", "nope", "--out-dir", out}, `--workload: `},
		{"bad rates", []string{"run", "--workload", "shared-prefix", "--rates", "1,x", "--out-dir", out}, `--rates: "x" is not a number`},
		{"demo unknown policy", []string{"demo", "--policies", "mod-n", "nope", "--out-dir", out}, `unknown policy "nope"`},
		{"demo zero replicas", []string{"demo", "--replicas", "0", "--out-dir", out}, "replicas must be between 1 and 1000"},
		{"replica unknown preset", []string{"replica", "--replica-preset", "tpu"}, `--replica-preset: replica preset "tpu": unknown (known: cpu-qwen0.5b, gpu-h100-8b, ollama-tiny-cpu, ollama-tiny-cpu-simtok, vllm-4xh100-70b, vllm-h100-8b, vllm-l4-qwen0.5b)`},
		{"sim unknown preset", []string{"sim", "--replica-preset=tpu", "--out-dir", out}, `--replica-preset: replica preset "tpu": unknown`},
	} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), tc.args, &stdout, &stderr)
		if code != 2 || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%s: exit %d, stderr %q; want exit 2 and %q", tc.name, code, stderr.String(), tc.want)
		}
	}
	if entries, _ := os.ReadDir(out); len(entries) != 0 {
		t.Errorf("a refused command left files: %v", entries)
	}
}

// writeTinyProfile writes a profile small enough to run every policy in a
// test.
func writeTinyProfile(t *testing.T) string {
	p := traffic.Profile{
		Name: "tiny", Conversations: 6, Concurrency: 3, RampS: 1, TurnsMin: 2, TurnsMax: 3,
		UserWordsMin: 5, UserWordsMax: 12, ThinkSMin: 1, ThinkSMax: 2, MaxTokens: 8,
		MaxContextTokens: 3500, SystemPrompts: 2,
	}
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "tiny.json")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// The demo runs all five policies, analyses them and prints the table and
// where the charts are.
func TestDemo(t *testing.T) {
	dir := t.TempDir()
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"demo", "--profile", writeTinyProfile(t), "--speed", "100",
		"--scale-at", "2", "--load-delay", "1s", "--out-dir", dir}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}
	out := stdout.String()
	if !strings.Contains(out, "| Metric | round-robin | mod-n | consistent | bounded | llm-aware |") ||
		!strings.Contains(out, "| **Errors** (check first) | 0 | 0 | 0 | 0 | 0 |") {
		t.Errorf("the table lacks the five policies or shows errors:\n%s", out)
	}
	for _, f := range []string{analysis.SummaryMD, analysis.PerRunCSV, analysis.SummaryPNG, analysis.HitRateOverTimePNG} {
		path := filepath.Join(dir, f)
		if _, err := os.Stat(path); err != nil {
			t.Errorf("%s not written: %v", f, err)
		}
		if f != analysis.PerRunCSV && !strings.Contains(out, path) {
			t.Errorf("stdout does not say where %s is", f)
		}
	}
	runs, err := analysis.Load(filepath.Join(dir, "runs"))
	if err != nil || len(runs) != 5 {
		t.Errorf("runs folder: %d runs, %v", len(runs), err)
	}
	// A second demo into the same folder refuses to overwrite it.
	stdout.Reset()
	stderr.Reset()
	if code := run(context.Background(), []string{"demo", "--profile", writeTinyProfile(t), "--out-dir", dir}, &stdout, &stderr); code != 1 ||
		!strings.Contains(stderr.String(), "already exists") {
		t.Errorf("second demo: exit %d, stderr %q", code, stderr.String())
	}
}

// run records one policy into a folder and tells what to do next.
func TestRunRecords(t *testing.T) {
	dir := t.TempDir()
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"run", "--policies", "consistent", "--profile", writeTinyProfile(t),
		"--seeds", "1,2", "--speed", "100", "--no-headers", "--out-dir", dir}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}
	for _, id := range []string{"s1-consistent-live", "s2-consistent-live"} {
		if !strings.Contains(stdout.String(), id+": ") {
			t.Errorf("stdout does not report %s:\n%s", id, stdout.String())
		}
	}
	if !strings.Contains(stdout.String(), "llm-ring analyze --results-dir "+dir) {
		t.Errorf("stdout does not suggest the analysis:\n%s", stdout.String())
	}
	if !strings.Contains(stderr.String(), "[consistent seed 2] ") {
		t.Errorf("no progress on stderr:\n%s", stderr.String())
	}
	if runs, err := analysis.Load(dir); err != nil || len(runs) != 2 {
		t.Errorf("%d runs, %v", len(runs), err)
	}
}

// A profile's replica keys set the flags left at their defaults (issue #11).
func TestProfileDefaults(t *testing.T) {
	churn, err := traffic.LoadProfile(os.DirFS("."), "churn")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		set        map[string]bool // flags given on the command line
		wantRepl   int
		wantShared bool
		wantScale  time.Duration
	}{
		{"defaults follow the profile", map[string]bool{}, 3, false, 0},
		{"explicit flags win", map[string]bool{"replicas": true, "shared-cpu": true, "scale-at": true}, 5, true, time.Second},
	}
	for _, tt := range tests {
		spec := experiment.Spec{Profile: churn, Replicas: 5, SharedCPU: true, ScaleAt: time.Second}
		profileDefaults(&spec, tt.set)
		if spec.Replicas != tt.wantRepl || spec.SharedCPU != tt.wantShared || spec.ScaleAt != tt.wantScale {
			t.Errorf("%s: replicas %d shared %v scale-at %v, want %d %v %v", tt.name,
				spec.Replicas, spec.SharedCPU, spec.ScaleAt, tt.wantRepl, tt.wantShared, tt.wantScale)
		}
	}
}
