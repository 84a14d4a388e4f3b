package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/llm-ring/llm-ring/internal/analysis"
	"github.com/llm-ring/llm-ring/internal/config"
	"github.com/llm-ring/llm-ring/internal/sim"
	"github.com/llm-ring/llm-ring/internal/simrun"
	"github.com/llm-ring/llm-ring/internal/traffic"
	"github.com/llm-ring/llm-ring/profiles"
)

// parseProfileList reads --profiles: names of embedded profiles or JSON
// files, comma-separated; "all" is every embedded profile. Each scenario
// must have a distinct name (its folder), whether given twice as the same
// word or as two files of the same name.
func parseProfileList(list string) ([]traffic.Profile, error) {
	var words []string
	for _, w := range strings.Split(list, ",") {
		if w = strings.TrimSpace(w); w == "" {
			continue
		}
		if w == "all" {
			words = append(words, profiles.Names()...)
			continue
		}
		words = append(words, w)
	}
	if len(words) == 0 {
		return nil, errors.New("--profiles: name at least one profile (or all)")
	}
	var out []traffic.Profile
	from := map[string]string{} // scenario name → the word that gave it
	for _, w := range words {
		p, err := loadProfile(w)
		if err != nil {
			return nil, fmt.Errorf("--profiles: %w", err)
		}
		if prev, dup := from[p.Name]; dup {
			if prev == w {
				return nil, fmt.Errorf("--profiles: %q given twice", w)
			}
			return nil, fmt.Errorf("--profiles: %q and %q are both named %q (a scenario's name is its folder)", prev, w, p.Name)
		}
		if err := simrun.ArenaFolderName(p.Name); err != nil {
			return nil, fmt.Errorf("--profiles: %s: %w", w, err)
		}
		from[p.Name] = w
		out = append(out, p)
	}
	return out, nil
}

// arenaFocus chooses the policy of the arena's paired table: the one given
// (which must run), or else the router's default policy if it runs, or
// else none.
func arenaFocus(name string, given bool, policies []string) (string, error) {
	if given {
		if !slices.Contains(policies, name) {
			return "", fmt.Errorf("--arena-focus: %q is not one of the policies run (%s)", name, strings.Join(policies, ", "))
		}
		return name, nil
	}
	def, err := config.Default()
	if err != nil {
		return "", err
	}
	if slices.Contains(policies, def.Policy) {
		return def.Policy, nil
	}
	return "", nil
}

// simArena runs the arena: every policy × scenario × seed in one pool of
// workers, each scenario into a folder of its own with its own analysis,
// then the arena's tables and charts.
func simArena(ctx context.Context, o *simOptions, stdout, stderr io.Writer) error {
	var jobs []simrun.Job
	var folders []simrun.ArenaFolder
	var names []string
	for _, prof := range o.arena {
		dir := filepath.Join(o.outDir, prof.Name)
		folders = append(folders, simrun.ArenaFolder{Name: prof.Name, Dir: dir})
		names = append(names, prof.Name)
		for _, sp := range o.specsFor(prof) {
			jobs = append(jobs, simrun.Job{Dir: dir, Spec: sp})
		}
	}
	cpu := "each replica with a CPU of its own"
	if o.shared {
		cpu = "the replicas sharing one CPU (--shared-cpu)"
	}
	fmt.Fprintf(stderr, "sim: the arena, %s (%s × %s × %s), %s → %s\n", simCount(len(jobs), "run"),
		simCount(len(o.policies), "policy"), simCount(len(o.arena), "scenario"), simCount(len(o.seeds), "seed"), cpu, o.outDir)
	start := time.Now()
	var requests, errs int
	var events int64
	if _, err := simrun.RunJobs(ctx, jobs, simrun.BatchOptions{Workers: o.workers, Force: o.force,
		Done: func(sp *sim.Spec, res *sim.Result) {
			requests += res.Info.Requests
			errs += res.Info.Errors
			events += res.Events
		}}); err != nil {
		return err
	}
	wall := time.Since(start)
	fmt.Fprintf(stderr, "sim: %d runs, %d requests (%d errors), %d events in %.2f s (%.0f events/s)\n",
		len(jobs), requests, errs, events, wall.Seconds(), float64(events)/max(wall.Seconds(), 1e-9))
	if !o.analyze {
		fmt.Fprintf(stdout, "runs written to %s/{%s}\n", o.outDir, strings.Join(names, ","))
		return nil
	}
	start = time.Now()
	setup := fmt.Sprintf("Simulator (`llm-ring sim`), %s at the start, %s.", simCount(o.replicas, "replica"), cpu)
	a, paths, err := simrun.AnalyzeArena(o.outDir, folders, analysis.ArenaOptions{Setup: setup, Focus: o.focus}, o.workers)
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "sim: analysis and arena charts in %.2f s\n", time.Since(start).Seconds())
	for _, slug := range []string{"hit-rate", "p95"} {
		mi := a.MetricIndex(slug)
		fmt.Fprintf(stdout, "%s\n\n", a.Metrics[mi].Heading())
		if err := analysis.WriteArenaTable(stdout, &a, mi); err != nil {
			return err
		}
		fmt.Fprintln(stdout)
	}
	if o.focus != "" {
		fmt.Fprintf(stdout, "Paired: %s − the best other policy, same seeds (mean ± 95 %% CI)\n\n", o.focus)
		if err := analysis.WritePairedTable(stdout, &a, o.focus); err != nil {
			return err
		}
		fmt.Fprintln(stdout)
	}
	fmt.Fprintf(stdout, "the arena: %s (every metric's table), %s, %s; each scenario's runs and analysis in %s\n",
		paths[0], filepath.Join(o.outDir, "arena-*.png"), filepath.Join(o.outDir, "pareto-*.png"),
		filepath.Join(o.outDir, "<scenario>"))
	return nil
}
