package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/llm-ring/llm-ring/internal/analysis"
	"github.com/llm-ring/llm-ring/internal/sim"
)

// Many models in the simulator (issue 23): a workload that names models
// (profiles/workloads/multi-model.json, lora.json) brings its fleet (how
// many replicas of which preset serve each model), and its runs route
// through pools (sim.Spec.Pools). Each such workload's folder gets the
// pools table: pools.tsv (per run and model) and pools.md (per policy and
// model, over the seeds).

// Files of the pools table, beside the analysis (tab-separated: every
// *.csv of a results folder is read as a run).
const (
	poolsTSV = "pools.tsv"
	poolsMD  = "pools.md"
)

// definePoolFlags defines the pools flags; the result is read by
// applyPools.
func definePoolFlags(fs *flag.FlagSet) *bool {
	return fs.Bool("adapter-affinity", true, "with a workload naming LoRA adapters: routing prefers replicas with the adapter resident, "+
		"then a free adapter slot (state's adapter tiers); false: routing ignores adapters (the baseline of docs/notes/pools.md); "+
		"default: --config's models.adapter_affinity, true when absent")
}

// applyPools gives the specs of ol's workload its pools (no change for a
// workload naming no models). Its fleet replaces --replicas and
// --replica-preset: given with --workload, --replicas is an error; in the
// open-loop arena (--workloads) it applies to the other workloads.
func (o *simOptions) applyPools(ol *openLoop, specs []sim.Spec) error {
	w := &ol.w
	affinity := o.router.Models.AdapterAffinityOn() // --config's models.adapter_affinity, true when absent
	if ol.affinity != nil {
		affinity = *ol.affinity
	}
	p, err := sim.WorkloadPools(w, affinity, o.model.Seed)
	if p == nil || err != nil {
		return err
	}
	// --config's models section (default, aliases, rewrites, adapters),
	// the workload's adapters added.
	cfg := o.router.PoolConfig()
	for a, base := range p.Config.Adapters {
		if cfg.Adapters == nil {
			cfg.Adapters = map[string]string{}
		}
		cfg.Adapters[a] = base
	}
	p.Config = cfg
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("workload %s with --config's models: %w", w.Name, err)
	}
	if o.replicasSet && !o.openArena { // in the arena, --replicas is for the workloads without a fleet
		return fmt.Errorf("--replicas: workload %s names its fleet (%d replicas); leave --replicas out", w.Name, len(p.Fleet))
	}
	for i := range specs {
		specs[i].Pools = p
		specs[i].Replicas = len(p.Fleet)
	}
	return nil
}

// writePoolsTable writes dir's pools table (pools.tsv, pools.md) if its
// runs used pools, and prints where.
func writePoolsTable(stdout io.Writer, dir, title string) error {
	runs, err := analysis.Load(dir)
	if err != nil {
		return err
	}
	var stats []sim.PoolStat
	pools := false
	for _, r := range runs {
		if _, ok := r.Info.Config["pools"]; ok {
			pools = true
		}
		stats = append(stats, sim.PoolStats(r.Requests, r.Info.Metrics)...)
	}
	if !pools {
		return nil
	}
	write := func(name string, f func(io.Writer) error) error {
		fh, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		if err := f(fh); err != nil {
			fh.Close()
			return err
		}
		return fh.Close()
	}
	if err := write(poolsTSV, func(w io.Writer) error { return sim.WritePoolStats(w, stats) }); err != nil {
		return err
	}
	if err := write(poolsMD, func(w io.Writer) error { return sim.WritePoolsSummary(w, title, stats) }); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "pools table in %s/{%s, %s}\n", dir, poolsTSV, poolsMD)
	return nil
}

// workloadEngine names the engine of workload name's runs: its fleet's
// presets when it names models, else the command line's engine.
func workloadEngine(o *simOptions, name string) string {
	for _, ol := range o.open {
		if ol.w.Name != name || len(ol.w.Models) == 0 {
			continue
		}
		var ps []string
		for _, m := range ol.w.Models {
			ps = append(ps, fmt.Sprintf("%d × %s", m.Replicas, m.Preset))
		}
		return strings.Join(ps, ", ")
	}
	return engineName(o)
}
