package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSimPoolsFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--workload", "lora", "--replicas", "2"}, "names its fleet"},
		{[]string{"--adapter-affinity=false"}, "only with --workload"},
	} {
		err := cmdSim(context.Background(), append(tc.args, "--out-dir", t.TempDir()), &bytes.Buffer{}, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want %q", tc.args, err, tc.want)
		}
	}
}

// The lora workload with and without adapter affinity: each folder gets
// the pools table, one row per run and model and one for all.
func TestSimPoolsTable(t *testing.T) {
	for _, aff := range []string{"true", "false"} {
		dir := t.TempDir()
		var stdout bytes.Buffer
		err := cmdSim(context.Background(), []string{"--workload", "lora", "--adapter-affinity=" + aff, "--policies", "round-robin,llm-aware",
			"--rates", "4", "--stage-duration", "10s", "--warmup", "1s", "--seeds", "1-2", "--out-dir", dir}, &stdout, &bytes.Buffer{})
		if err != nil {
			t.Fatal(err)
		}
		tsv, err := os.ReadFile(filepath.Join(dir, poolsTSV))
		if err != nil {
			t.Fatal(err)
		}
		// 2 policies × 2 seeds × (the model, all), and the header
		if n := strings.Count(string(tsv), "\n"); n != 9 || !strings.HasPrefix(string(tsv), "run_id\tpolicy\tseed\tmodel\t") {
			t.Errorf("affinity %s: pools.tsv has %d lines:\n%s", aff, n, tsv)
		}
		md, _ := os.ReadFile(filepath.Join(dir, poolsMD))
		if !strings.Contains(string(md), "| llm-aware | llama-3.1-8b-instruct | 2 |") {
			t.Errorf("pools.md:\n%s", md)
		}
		js, _ := os.ReadFile(filepath.Join(dir, "s1-llm-aware-sim.json"))
		if !strings.Contains(string(js), `"adapter_affinity": `+aff) {
			t.Errorf("affinity %s not recorded", aff)
		}
	}
}

// --config's models.adapter_affinity is the default of --adapter-affinity.
func TestSimPoolsAffinityFromConfig(t *testing.T) {
	dir := t.TempDir()
	base, err := os.ReadFile(filepath.Join("..", "..", "config", "router.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "router.yaml")
	if err := os.WriteFile(cfg, append(base, "\nmodels:\n  adapter_affinity: false\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		flag, want string
	}{{"", "false"}, {"--adapter-affinity=true", "true"}} {
		out := filepath.Join(dir, "out"+tc.want)
		args := []string{"--config", cfg, "--workload", "lora", "--policies", "round-robin", "--rates", "2",
			"--stage-duration", "5s", "--warmup", "1s", "--analyze=false", "--out-dir", out}
		if tc.flag != "" {
			args = append(args, tc.flag)
		}
		if err := cmdSim(context.Background(), args, &bytes.Buffer{}, &bytes.Buffer{}); err != nil {
			t.Fatal(err)
		}
		js, _ := os.ReadFile(filepath.Join(out, "s1-round-robin-sim.json"))
		if !strings.Contains(string(js), `"adapter_affinity": `+tc.want) {
			t.Errorf("%q: affinity %s not recorded", tc.flag, tc.want)
		}
	}
}
