package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"github.com/llm-ring/llm-ring/internal/analysis"
	"github.com/llm-ring/llm-ring/internal/config"
	"github.com/llm-ring/llm-ring/internal/model"
	"github.com/llm-ring/llm-ring/internal/sim"
	"github.com/llm-ring/llm-ring/internal/simrun"
	"github.com/llm-ring/llm-ring/internal/traffic"
)

// simOptions is one parse of the sim command line.
type simOptions struct {
	policies []string
	profile  traffic.Profile
	// arena: one scenario (profile) per entry, each run into a folder of
	// its own (--profiles); nil without --profiles.
	arena    []traffic.Profile
	focus    string // the arena's paired-table policy ("": none)
	seeds    []int64
	replicas int
	// routers, gossip, gossipDelay: several router instances (issue 13).
	routers     int
	gossip      bool
	gossipDelay time.Duration
	gossipBatch time.Duration
	shared      bool
	scaleAt     time.Duration
	loadDelay   time.Duration
	outDir      string
	force       bool
	workers     int
	analyze     bool
	router      config.Router
	model       model.Config
	sweepKey    string
	source      func() sim.Source // a trace's requests, a source per run (nil: the profile's generator)
	replicasSet bool              // --replicas was given (else a profile's replica count wins)
	sweepVals   []string
	cpuProf     string
	open        []*openLoop    // --workload(s): open-loop loads (nil: closed loop)
	traceIdeal  float64        // --trace: the trace's ideal cached share
	openArena   bool           // --workloads: each workload into a folder of its own
	slo         analysis.SLO   // --slo-ttft, --slo-tpot
	admission   *sim.Admission // --admission (nil: off)
}

// cmdSim runs the study in virtual time: the same policies, load
// accounting, placement memory and replica model as the live path, driven
// by a discrete-event loop, every run writing the same records as
// `llm-ring run`.
func cmdSim(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	args = gatherList(gatherList(args, "policies"), "profiles")
	o, err := parseSimFlags(args, stderr)
	if err != nil {
		return err
	}
	if o.cpuProf != "" {
		stop, err := startCPUProfile(o.cpuProf)
		if err != nil {
			return err
		}
		defer stop()
	}
	if o.open != nil {
		return simOpen(ctx, o, stdout, stderr)
	}
	if o.arena != nil {
		return simArena(ctx, o, stdout, stderr)
	}
	points, err := simPoints(args, o)
	if err != nil {
		return err
	}
	if err := simRunPoints(ctx, o, points, stderr); err != nil {
		return err
	}
	if !o.analyze {
		fmt.Fprintf(stdout, "runs written to %s\n", o.outDir)
		return nil
	}
	if o.sweepKey == "" {
		return simAnalyzeOne(stdout, o)
	}
	return simAnalyzeSweep(stdout, o, points)
}

// startCPUProfile writes a CPU profile to path until stop is called.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// simPoint is one value of a sweep (the whole command without --sweep: one
// point, no value) with the options its runs use and the folder they go to.
type simPoint struct {
	value string
	dir   string
	o     *simOptions
}

// simPoints lists the sweep's points: the command line reparsed with each
// value, a flag's (-KEY=V) or a policy setting's (-set=KEY=V).
func simPoints(args []string, o *simOptions) ([]simPoint, error) {
	if o.sweepKey == "" {
		return []simPoint{{dir: o.outDir, o: o}}, nil
	}
	var points []simPoint
	for _, v := range o.sweepVals {
		extra := "-" + o.sweepKey + "=" + v
		if strings.Contains(o.sweepKey, ".") { // a policy setting: --set KEY=V
			extra = "-set=" + o.sweepKey + "=" + v
		}
		po, err := parseSimFlags(append(slices.Clone(args), extra), io.Discard)
		if err != nil {
			return nil, usageError{fmt.Errorf("--sweep %s=%s: %w", o.sweepKey, v, simUnwrapUsage(err))}
		}
		points = append(points, simPoint{value: v, dir: filepath.Join(o.outDir, o.sweepKey+"="+v), o: po})
	}
	return points, nil
}

// simRunPoints runs every run of every point in one pool, saying on stderr
// what runs and, at the end, how much was simulated how fast.
func simRunPoints(ctx context.Context, o *simOptions, points []simPoint, stderr io.Writer) error {
	var jobs []simrun.Job
	for _, pt := range points {
		for _, sp := range pt.o.specs() {
			jobs = append(jobs, simrun.Job{Dir: pt.dir, Spec: sp})
		}
	}
	if o.shared && o.replicas > 16 {
		fmt.Fprintf(stderr, "sim: note: the %d replicas share one CPU (--shared-cpu, the default, as on one laptop); "+
			"use --shared-cpu=false to give each replica a CPU of its own\n", o.replicas)
	}
	fmt.Fprintf(stderr, "sim: %s (%s × %s%s) → %s\n", simCount(len(jobs), "run"), simCount(len(o.policies), "policy"),
		simCount(len(o.seeds), "seed"), simSweepNote(o), o.outDir)
	start := time.Now()
	var requests, errs int
	var events int64
	results, err := simrun.RunJobs(ctx, jobs, simrun.BatchOptions{Workers: o.workers, Force: o.force,
		Done: func(sp *sim.Spec, res *sim.Result) {
			requests += res.Info.Requests
			errs += res.Info.Errors
			events += res.Events
		}})
	if err != nil {
		return err
	}
	wall := time.Since(start)
	fmt.Fprintf(stderr, "sim: %d runs, %d requests (%d errors), %d events in %.2f s (%.0f events/s)\n",
		len(results), requests, errs, events, wall.Seconds(), float64(events)/max(wall.Seconds(), 1e-9))
	return nil
}

// simAnalyzeSweep analyses each point's runs, then writes the sweep's
// table and chart and prints the table.
func simAnalyzeSweep(stdout io.Writer, o *simOptions, points []simPoint) error {
	var sweep []simrun.SweepPoint
	for _, pt := range points {
		s, err := analysis.Write(pt.dir, pt.dir, analysis.Options{})
		if err != nil {
			return err
		}
		sweep = append(sweep, simrun.SweepPoint{Value: pt.value, Summary: s})
	}
	md, png, err := simrun.WriteSweep(o.outDir, o.sweepKey, sweep)
	if err != nil {
		return err
	}
	if err := simrun.WriteSweepTable(stdout, o.sweepKey, sweep); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\nsweep table %s, chart %s; each value's runs and analysis in %s\n", md, png,
		filepath.Join(o.outDir, o.sweepKey+"=*"))
	return nil
}

// simCount writes n and the noun, plural when n != 1 ("policy" → "policies").
func simCount(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	if strings.HasSuffix(noun, "y") {
		return fmt.Sprintf("%d %sies", n, strings.TrimSuffix(noun, "y"))
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

func simSweepNote(o *simOptions) string {
	if o.sweepKey == "" {
		return ""
	}
	return fmt.Sprintf(" × %d values of %s", len(o.sweepVals), o.sweepKey)
}

// specs lists the runs of one parse: every seed × every policy, in that
// order, with run ids as `llm-ring run` names live runs (s1-bounded-live),
// ending in -sim.
func (o *simOptions) specs() []sim.Spec { return o.specsFor(o.profile) }

// newSource returns a run's own conversation source (a trace's), or nil.
func (o *simOptions) newSource() sim.Source {
	if o.source == nil {
		return nil
	}
	return o.source()
}

// specsFor is specs with another traffic profile (an arena's scenario).
func (o *simOptions) specsFor(prof traffic.Profile) []sim.Spec {
	var out []sim.Spec
	replicas := o.replicas
	if prof.Replicas > 0 && !o.replicasSet { // a scenario written for its replica count (hetero, churn)
		replicas = prof.Replicas
	}
	for _, seed := range o.seeds {
		for _, pol := range o.policies {
			out = append(out, sim.Spec{
				RunID:            fmt.Sprintf("s%d-%s-%s", seed, pol, sim.Mode),
				Policy:           pol,
				Seed:             seed,
				Order:            len(out),
				Profile:          prof,
				Replicas:         replicas,
				Model:            o.model,
				SharedCPU:        o.shared,
				Router:           o.router,
				ScaleAt:          o.scaleAt,
				LoadDelay:        o.loadDelay,
				Routers:          o.routers,
				Gossip:           o.gossip,
				GossipDelay:      o.gossipDelay,
				GossipBatch:      o.gossipBatch,
				Source:           o.newSource(),
				IdealCachedShare: o.traceIdeal,
				Admission:        o.admission,
			})
		}
	}
	return out
}

func simUnwrapUsage(err error) error {
	var ue usageError
	if errors.As(err, &ue) {
		return ue.error
	}
	return err
}

// parseSimFlags parses the sim command line into options (simFlags: the
// flags in groups, each with its checks).
func parseSimFlags(args []string, stderr io.Writer) (*simOptions, error) {
	fs := newFlagSet("sim", stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "usage: llm-ring sim [--policies all | NAME...] [--profile standard | --profiles all | NAME...] "+
			"[--seed 1 | --seeds 1-10] [--replicas 3] [--scale-at S] [--sweep KEY=V1,V2,...] [--out-dir DIR] [router and replica flags]\n\n")
		fs.PrintDefaults()
	}
	var f simFlags
	if err := f.register(fs, args); err != nil {
		return nil, err
	}
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	return f.parse(set)
}
