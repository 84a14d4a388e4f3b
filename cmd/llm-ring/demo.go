package main

import (
	"context"
	"flag"
	"fmt"
	"github.com/llm-ring/llm-ring/internal/policy"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/llm-ring/llm-ring/internal/analysis"
	"github.com/llm-ring/llm-ring/internal/experiment"
	"github.com/llm-ring/llm-ring/internal/traffic"
	"github.com/llm-ring/llm-ring/profiles"
)

// Demo defaults: the quick profile (about 6 minutes of model time per
// policy) at 50× takes about 7 s of wall time per policy, so the five
// policies and the analysis finish in well under a minute on 2 cores (see
// docs/notes/experiment.md); the extra replica arrives in the middle of
// each run, so the scale-up metrics have something to show.
const (
	demoSpeed     = 50
	demoScaleAtS  = 120
	demoLoadDelay = 20 * time.Second
)

// cmdDemo runs the whole study on embedded simulated replicas: every policy
// on the same traffic, then the analysis, and prints the comparison.
func cmdDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("demo", stderr)
	outDir := fs.String("out-dir", "", "folder for the runs (runs/) and the analysis (default: a new folder under the OS temp dir)")
	profile := fs.String("profile", "quick", "traffic profile: an embedded name ("+strings.Join(profiles.Names(), ", ")+") or a JSON file")
	policies := fs.String("policies", "study", "policies to compare, space- or comma-separated; study = the study's five ("+strings.Join(policy.StudyNames(), ", ")+"); all = every registered policy")
	seed := fs.Int64("seed", 1, "traffic seed")
	replicas := fs.Int("replicas", 3, "simulated replicas at the start")
	speed := fs.Float64("speed", demoSpeed, "model time runs this many times faster than wall time")
	scaleAt := fs.Float64("scale-at", demoScaleAtS, "add a replica at this many seconds of model time into each run (0: no scale-up)")
	loadDelay := fs.Duration("load-delay", demoLoadDelay, "model time the extra replica takes to load its model")
	noHeaders := fs.Bool("no-headers", false, "send OpenAI-style bodies only (the router detects conversations itself)")
	force := fs.Bool("force", false, "overwrite runs already in --out-dir")
	if err := parseFlags(fs, gatherList(args, "policies")); err != nil {
		return err
	}
	spec := experiment.Spec{
		Seeds:     []int64{*seed},
		Replicas:  *replicas,
		Speed:     *speed,
		LoadDelay: *loadDelay,
		NoHeaders: *noHeaders,
		SharedCPU: true,
		Force:     *force,
	}
	var err error
	if spec.Policies, err = parsePolicies(*policies); err != nil {
		return usageError{err}
	}
	if spec.ScaleAt, err = modelSeconds("scale-at", *scaleAt); err != nil {
		return usageError{err}
	}
	if spec.Profile, err = loadProfile(*profile); err != nil {
		return usageError{err}
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	profileDefaults(&spec, set)
	dir := *outDir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "llm-ring-demo-"); err != nil {
			return err
		}
	}
	spec.OutDir = filepath.Join(dir, "runs")
	if err := spec.Validate(); err != nil {
		return usageError{err}
	}
	spec.Progress, spec.Terminal = stderr, isTerminal(stderr)
	if err := announceDemo(stdout, &spec, *seed, dir); err != nil {
		return err
	}
	if _, err := experiment.Run(ctx, spec); err != nil {
		return err
	}
	s, err := analysis.Write(spec.OutDir, dir, analysis.Options{})
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout)
	if err := analysis.WriteTable(stdout, s); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\nTimes are model seconds. Definitions: %s\n", filepath.Join(dir, analysis.SummaryMD))
	fmt.Fprintf(stdout, "charts: %s\n        %s\n", filepath.Join(dir, analysis.SummaryPNG), filepath.Join(dir, analysis.HitRateOverTimePNG))
	fmt.Fprintf(stdout, "runs (one CSV row per request, one JSON per run): %s\n", spec.OutDir)
	return nil
}

// announceDemo says what the demo is about to run.
func announceDemo(stdout io.Writer, spec *experiment.Spec, seed int64, dir string) error {
	convs, err := traffic.Generate(spec.Profile, seed)
	if err != nil {
		return err
	}
	turns := 0
	for _, c := range convs {
		turns += len(c.Turns)
	}
	fmt.Fprintf(stdout, "llm-ring demo: %s on the same traffic (profile %s, seed %d: %d conversations, up to %d requests)\n",
		strings.Join(spec.Policies, ", "), spec.Profile.Name, seed, len(convs), turns)
	cpu := "sharing one CPU"
	if !spec.SharedCPU {
		cpu = "each with a CPU of its own"
	}
	fmt.Fprintf(stdout, "%d simulated replicas %s, model time %g× faster than the clock", spec.Replicas, cpu, spec.Speed)
	if spec.ScaleAt > 0 {
		fmt.Fprintf(stdout, "; a replica is added at %g s (model time), loading for %v", spec.ScaleAt.Seconds(), spec.LoadDelay)
	}
	fmt.Fprintf(stdout, "\nresults: %s\n\n", dir)
	return nil
}
