package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"strings"
	"time"

	"github.com/llm-ring/llm-ring/internal/analysis"
	"github.com/llm-ring/llm-ring/internal/sim"
	"github.com/llm-ring/llm-ring/internal/simrun"
)

// specsOpen lists the runs of an open-loop workload: every seed × policy,
// each seed with its own arrivals (and so its own requests and ideal
// cached share).
func (o *simOptions) specsOpen(ol *openLoop) ([]sim.Spec, error) {
	var out []sim.Spec
	for _, seed := range o.seeds {
		p, src, ideal, err := ol.seedTraffic(seed)
		if err != nil {
			return nil, err
		}
		one := *o
		one.seeds = []int64{seed}
		one.source = src // a source per run, all sharing the seed's texts
		specs := one.specsFor(p)
		if err := o.applyPools(ol, specs); err != nil {
			return nil, err
		}
		for _, sp := range specs {
			sp.Order = len(out)
			sp.IdealCachedShare, sp.IdealByStage = ideal[0], ideal[1:]
			out = append(out, sp)
		}
	}
	return out, nil
}

// simOpen runs open-loop workloads: one (into --out-dir) or, with
// --workloads, the open-loop arena (each workload into OUT-DIR/<name>/),
// then each workload's field metrics: per_stage.csv, field_per_run.csv,
// field.md and its charts of TTFT p90 and goodput against the rate.
func simOpen(ctx context.Context, o *simOptions, stdout, stderr io.Writer) error {
	var jobs []simrun.Job
	dirs := map[string]string{}
	var names []string
	for _, ol := range o.open {
		dir := o.outDir
		if o.openArena {
			dir = filepath.Join(o.outDir, ol.w.Name)
		}
		dirs[ol.w.Name] = dir
		names = append(names, ol.w.Name)
		specs, err := o.specsOpen(ol)
		if err != nil {
			return usageError{err}
		}
		for _, sp := range specs {
			jobs = append(jobs, simrun.Job{Dir: dir, Spec: sp})
		}
	}
	fmt.Fprintf(stderr, "sim: open loop, %s (%s × %s × %s), engine %s → %s\n", simCount(len(jobs), "run"),
		simCount(len(o.policies), "policy"), simCount(len(o.open), "workload"), simCount(len(o.seeds), "seed"),
		engineName(o), o.outDir)
	start := time.Now()
	var requests, errs int
	if _, err := simrun.RunJobs(ctx, jobs, simrun.BatchOptions{Workers: o.workers, Force: o.force,
		Done: func(sp *sim.Spec, res *sim.Result) {
			requests += res.Info.Requests
			errs += res.Info.Errors
		}}); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "sim: %d runs, %d requests (%d errors) in %.2f s\n", len(jobs), requests, errs, time.Since(start).Seconds())
	if !o.analyze {
		fmt.Fprintf(stdout, "runs written to %s\n", o.outDir)
		return nil
	}
	for _, name := range names {
		if _, err := analysis.Write(dirs[name], dirs[name], analysis.Options{}); err != nil {
			return err
		}
		means, err := analysis.WriteField(dirs[name], dirs[name], fmt.Sprintf("%s (engine %s)", name, workloadEngine(o, name)), o.slo)
		if err != nil {
			return err
		}
		if err := writePoolsTable(stdout, dirs[name], name+": adapter loads, TTFT p90 and hit rate per policy and model"); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s: rate where TTFT p90 crosses %g ms\n", name, o.slo.TTFTMS)
		for _, pol := range o.policies {
			c := analysis.CrossingRate(means, pol, o.slo.TTFTMS)
			switch {
			case math.IsInf(c, 1):
				fmt.Fprintf(stdout, "  %-24s above every rate run\n", pol)
			case c == 0:
				fmt.Fprintf(stdout, "  %-24s below the first rate\n", pol)
			default:
				fmt.Fprintf(stdout, "  %-24s %.2f /s\n", pol, c)
			}
		}
	}
	fmt.Fprintf(stdout, "\nfield metrics in %s/{%s, %s, %s, %s, %s} (%s)\n", o.outDir, analysis.PerStageCSV,
		analysis.FieldPerRunCSV, analysis.FieldMD, analysis.FieldTTFTPNG, analysis.FieldGoodPNG, strings.Join(names, ", "))
	return nil
}

func engineName(o *simOptions) string {
	if o.model.Engine == "" {
		return "llamacpp"
	}
	return o.model.Engine
}

// writeTraceField writes a trace replay's field metrics (field_per_run.csv,
// field.md) and prints each policy's against the trace's ideal cached share.
func writeTraceField(stdout io.Writer, o *simOptions) error {
	runs, err := analysis.Load(o.outDir)
	if err != nil {
		return err
	}
	rows := analysis.RunFields(runs, o.slo)
	if err := analysis.WriteFile(filepath.Join(o.outDir, analysis.FieldPerRunCSV), func(w io.Writer) error {
		return analysis.WriteFieldCSV(w, rows)
	}); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\nfield metrics (%s), ideal cached share %.1f %%:\n", analysis.FieldPerRunCSV, 100*o.traceIdeal)
	for _, r := range rows {
		fmt.Fprintf(stdout, "  %-24s seed %d: TTFT p50 %.0f ms p90 %.0f ms, E2E p50 %.1f s, cached %.1f %%, goodput %.1f %%\n",
			r.Policy, r.Seed, r.TTFTP50, r.TTFTP90, r.E2EP50/1000, 100*r.CachedShare, 100*r.GoodShare)
	}
	return nil
}

// simAnalyzeOne analyses the runs of one folder (no sweep): the study's
// table, and a trace replay's field metrics.
func simAnalyzeOne(stdout io.Writer, o *simOptions) error {
	s, err := analysis.Write(o.outDir, o.outDir, analysis.Options{})
	if err != nil {
		return err
	}
	if err := analysis.WriteTable(stdout, s); err != nil {
		return err
	}
	if o.traceIdeal > 0 {
		if err := writeTraceField(stdout, o); err != nil {
			return err
		}
	}
	fmt.Fprintf(stdout, "\nruns and analysis in %s (%s, %s, %s)\n", o.outDir,
		analysis.SummaryMD, analysis.SummaryPNG, analysis.HitRateOverTimePNG)
	return nil
}
