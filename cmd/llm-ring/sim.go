package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"github.com/llm-ring/llm-ring/internal/analysis"
	"github.com/llm-ring/llm-ring/internal/config"
	"github.com/llm-ring/llm-ring/internal/model"
	"github.com/llm-ring/llm-ring/internal/policy"
	"github.com/llm-ring/llm-ring/internal/sim"
	"github.com/llm-ring/llm-ring/internal/traffic"
)

// simOptions is one parse of the sim command line.
type simOptions struct {
	policies  []string
	profile   traffic.Profile
	seeds     []int64
	replicas  int
	shared    bool
	scaleAt   time.Duration
	loadDelay time.Duration
	outDir    string
	force     bool
	workers   int
	analyze   bool
	router    config.Router
	model     model.Config
	sweepKey  string
	sweepVals []string
	cpuProf   string
}

// simNoSweep lists the flags that cannot be swept: they choose what runs
// and where it goes, not a setting of the system.
var simNoSweep = []string{"policies", "profile", "seeds", "seed", "out-dir", "force", "workers", "analyze", "sweep", "config", "cpuprofile"}

// cmdSim runs the study in virtual time: the same policies, load
// accounting, placement memory and replica model as the live path, driven
// by a discrete-event loop, every run writing the same records as
// `llm-ring run`.
func cmdSim(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	args = gatherList(args, "policies")
	o, err := parseSimFlags(args, stderr)
	if err != nil {
		return err
	}
	if o.cpuProf != "" {
		f, err := os.Create(o.cpuProf)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	type point struct {
		value string
		dir   string
		o     *simOptions
	}
	points := []point{{dir: o.outDir, o: o}}
	if o.sweepKey != "" {
		points = points[:0]
		for _, v := range o.sweepVals {
			po, err := parseSimFlags(append(slices.Clone(args), "-"+o.sweepKey+"="+v), io.Discard)
			if err != nil {
				return usageError{fmt.Errorf("--sweep %s=%s: %w", o.sweepKey, v, simUnwrapUsage(err))}
			}
			points = append(points, point{value: v, dir: filepath.Join(o.outDir, o.sweepKey+"="+v), o: po})
		}
	}

	// One pool for every run of every sweep point.
	var jobs []sim.Job
	for _, pt := range points {
		for _, sp := range pt.o.specs() {
			jobs = append(jobs, sim.Job{Dir: pt.dir, Spec: sp})
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
	results, err := sim.RunJobs(ctx, jobs, sim.BatchOptions{Workers: o.workers, Force: o.force,
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
	if !o.analyze {
		fmt.Fprintf(stdout, "runs written to %s\n", o.outDir)
		return nil
	}
	if o.sweepKey == "" {
		s, err := analysis.Write(o.outDir, o.outDir, analysis.Options{})
		if err != nil {
			return err
		}
		if err := analysis.WriteTable(stdout, s); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "\nruns and analysis in %s (%s, %s, %s)\n", o.outDir,
			analysis.SummaryMD, analysis.SummaryPNG, analysis.HitRateOverTimePNG)
		return nil
	}
	var sweep []sim.SweepPoint
	for _, pt := range points {
		s, err := analysis.Write(pt.dir, pt.dir, analysis.Options{})
		if err != nil {
			return err
		}
		sweep = append(sweep, sim.SweepPoint{Value: pt.value, Summary: s})
	}
	md, png, err := sim.WriteSweep(o.outDir, o.sweepKey, sweep)
	if err != nil {
		return err
	}
	if err := sim.WriteSweepTable(stdout, o.sweepKey, sweep); err != nil {
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
func (o *simOptions) specs() []sim.Spec {
	var out []sim.Spec
	for _, seed := range o.seeds {
		for _, pol := range o.policies {
			out = append(out, sim.Spec{
				RunID:     fmt.Sprintf("s%d-%s-%s", seed, pol, sim.Mode),
				Policy:    pol,
				Seed:      seed,
				Order:     len(out),
				Profile:   o.profile,
				Replicas:  o.replicas,
				Model:     o.model,
				SharedCPU: o.shared,
				Router:    o.router,
				ScaleAt:   o.scaleAt,
				LoadDelay: o.loadDelay,
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

// parseSimFlags parses the sim command line into options, applying the
// router configuration file (if any), then the router flags given on top.
func parseSimFlags(args []string, stderr io.Writer) (*simOptions, error) {
	fs := newFlagSet("sim", stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "usage: llm-ring sim [--policies all | NAME...] [--profile standard] [--seed 1 | --seeds 1-10] "+
			"[--replicas 3] [--scale-at S] [--sweep KEY=V1,V2,...] [--out-dir DIR] [router and replica flags]\n\n")
		fs.PrintDefaults()
	}
	policies := fs.String("policies", "all",
		"policies to run, space- or comma-separated; all: the five policies ("+strings.Join(policy.Names(), ", ")+
			"); variants for ablations: "+strings.Join(sim.DescribeVariants(), "; "))
	profile := fs.String("profile", "standard", "traffic profile: a JSON file, or an embedded name (quick, standard)")
	seed := fs.Int64("seed", 1, "traffic seed (one run per policy)")
	seeds := fs.String("seeds", "", "several seeds instead of --seed: a list or ranges, e.g. 1-10 or 1,2,3 or 1-3,7")
	replicas := fs.Int("replicas", 3, "replicas at the start (llm-0, llm-1, ...)")
	shared := fs.Bool("shared-cpu", true, "replicas share one compute budget (k busy replicas each run k times slower), as on the seed's laptop and in llm-ring run; --shared-cpu=false gives each replica a CPU of its own (needed for many replicas)")
	scaleAt := fs.Float64("scale-at", 0, "start an extra replica at this many model seconds (0: no scale-up)")
	loadDelay := fs.Duration("load-delay", 20*time.Second, "model time the extra replica takes to load before it joins the ring")
	outDir := fs.String("out-dir", filepath.Join("results", "sim"), "folder for the runs' CSV and JSON files (and the analysis)")
	force := fs.Bool("force", false, "overwrite run files that already exist")
	workers := fs.Int("workers", 0, "runs simulated at once (0: one per CPU); each run is single-threaded and deterministic")
	analyze := fs.Bool("analyze", true, "analyse the runs (summary.md, per_run.csv, charts) and print the table")
	conversations := fs.Int("conversations", 0, "override the profile's number of conversations (0: the profile's)")
	concurrency := fs.Int("concurrency", 0, "override the profile's number of concurrent users (0: the profile's)")
	sweep := fs.String("sweep", "", "run once per value of a flag and chart the results, e.g. epsilon=0.1,0.25,0.5,1.0, cache-ram-mib=64,512, replicas=2,3,4")
	cpuProf := fs.String("cpuprofile", "", "write a CPU profile of the whole command to this file (go tool pprof)")
	cfgPath := fs.String("config", "", "router configuration file (YAML, as for llm-ring router): its routing keys are used; flags below override them")

	def := sim.DefaultRouter()
	rf := simRouterFlags{}
	rf.define(fs, &def)
	mcfg := model.DefaultConfig()
	simModelFlags(fs, &mcfg)
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}

	o := &simOptions{replicas: *replicas, shared: *shared, outDir: *outDir, force: *force, workers: *workers,
		analyze: *analyze, model: mcfg, loadDelay: *loadDelay, cpuProf: *cpuProf}
	for _, p := range strings.Split(*policies, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		if p == "all" {
			for _, q := range policy.Names() {
				if slices.Contains(o.policies, q) {
					return nil, usageError{fmt.Errorf("--policies: %q given twice", q)}
				}
			}
			o.policies = append(o.policies, policy.Names()...)
			continue
		}
		if slices.Contains(o.policies, p) {
			return nil, usageError{fmt.Errorf("--policies: %q given twice", p)}
		}
		if !slices.Contains(sim.PolicyNames(), p) {
			return nil, usageError{fmt.Errorf("--policies: unknown policy %q (want one of %s)", p, strings.Join(sim.PolicyNames(), ", "))}
		}
		o.policies = append(o.policies, p)
	}
	if len(o.policies) == 0 {
		return nil, usageError{errors.New("--policies: name at least one policy")}
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var err error
	if o.seeds, err = seedList(*seed, *seeds, set); err != nil { // as llm-ring run
		return nil, usageError{err}
	}
	if o.profile, err = traffic.LoadProfile(*profile); err != nil {
		return nil, usageError{err}
	}
	if *conversations < 0 || *concurrency < 0 {
		return nil, usageError{errors.New("--conversations and --concurrency must not be negative")}
	}
	if *conversations > 0 {
		o.profile.Conversations = *conversations
	}
	if *concurrency > 0 {
		o.profile.Concurrency = *concurrency
	}
	if err := o.profile.Validate(); err != nil {
		return nil, usageError{fmt.Errorf("profile %s (with --conversations/--concurrency): %w", o.profile.Name, err)}
	}
	if o.replicas < 1 {
		return nil, usageError{fmt.Errorf("--replicas: must be at least 1, got %d", o.replicas)}
	}
	if !(*scaleAt >= 0) || math.IsInf(*scaleAt, 0) {
		return nil, usageError{fmt.Errorf("--scale-at: must be a number of seconds ≥ 0, got %v", *scaleAt)}
	}
	o.scaleAt = time.Duration(math.Round(*scaleAt * 1e9))
	if o.loadDelay < 0 {
		return nil, usageError{fmt.Errorf("--load-delay: must not be negative, got %v", o.loadDelay)}
	}
	if err := o.model.Validate(); err != nil {
		return nil, usageError{err}
	}

	o.router = sim.DefaultRouter()
	if *cfgPath != "" {
		c, err := config.Load(*cfgPath)
		if err != nil {
			return nil, usageError{err}
		}
		o.router = *c
	}
	rf.apply(set, &o.router)
	if err := sim.ValidateRouting(&o.router); err != nil {
		return nil, usageError{err}
	}

	if *sweep != "" {
		key, vals, ok := strings.Cut(*sweep, "=")
		key = strings.TrimLeft(strings.TrimSpace(key), "-")
		if !ok || key == "" {
			return nil, usageError{fmt.Errorf("--sweep: want KEY=V1,V2,..., got %q", *sweep)}
		}
		if fs.Lookup(key) == nil {
			return nil, usageError{fmt.Errorf("--sweep: no flag named %q to sweep", key)}
		}
		if slices.Contains(simNoSweep, key) {
			return nil, usageError{fmt.Errorf("--sweep: %s cannot be swept (sweep a setting: epsilon, cache-ram-mib, replicas, ...)", key)}
		}
		for _, v := range strings.Split(vals, ",") {
			if v = strings.TrimSpace(v); v == "" {
				continue
			}
			if slices.Contains(o.sweepVals, v) {
				return nil, usageError{fmt.Errorf("--sweep: value %q given twice", v)}
			}
			o.sweepVals = append(o.sweepVals, v)
		}
		if len(o.sweepVals) == 0 {
			return nil, usageError{fmt.Errorf("--sweep %s: give at least one value", key)}
		}
		o.sweepKey = key
	}
	return o, nil
}

// simRouterFlags are the routing keys of the router configuration as flags.
type simRouterFlags struct {
	epsilon, charsPerToken, longCapFactor       *float64
	unit                                        *string
	vnodes, longPrompt, maxEntries              *int
	cacheAware, placementMemory, longStickiness *bool
	ttl                                         *time.Duration
}

func (r *simRouterFlags) define(fs *flag.FlagSet, d *config.Router) {
	r.epsilon = fs.Float64("epsilon", d.Epsilon, "bounded, llm-aware: cap = (1 + epsilon) × average load (router key epsilon)")
	r.unit = fs.String("bounded-load-unit", d.BoundedLoadUnit, "bounded: load unit, requests or tokens (router key bounded_load_unit)")
	r.vnodes = fs.Int("virtual-nodes", d.VirtualNodes, "ring positions per replica (router key virtual_nodes)")
	r.charsPerToken = fs.Float64("chars-per-token", d.CharsPerToken, "router's token estimate for unanswered text (router key chars_per_token)")
	r.cacheAware = fs.Bool("cache-aware-load", d.LLMAware.CacheAwareLoad, "llm-aware: cache-aware token load (llm_aware.cache_aware_load)")
	r.placementMemory = fs.Bool("placement-memory", d.LLMAware.PlacementMemory, "llm-aware: keep a conversation where it was last served (llm_aware.placement_memory)")
	r.longStickiness = fs.Bool("long-stickiness", d.LLMAware.LongStickiness, "llm-aware: long cached conversations may stay up to long-cap-factor × average (llm_aware.long_stickiness)")
	r.longPrompt = fs.Int("long-prompt-tokens", d.LLMAware.LongPromptTokens, "llm-aware: a conversation is long from this many prompt tokens (llm_aware.long_prompt_tokens)")
	r.longCapFactor = fs.Float64("long-cap-factor", d.LLMAware.LongCapFactor, "llm-aware: long conversations' cap, × average load (llm_aware.long_cap_factor)")
	r.maxEntries = fs.Int("placement-memory-max-entries", d.PlacementMemory.MaxEntries, "conversations remembered (placement_memory.max_entries)")
	r.ttl = fs.Duration("placement-memory-ttl", d.PlacementMemory.TTL.D(), "forget a conversation unseen this long, model time (placement_memory.ttl)")
}

// apply sets the flags given on the command line (set) onto c.
func (r *simRouterFlags) apply(set map[string]bool, c *config.Router) {
	if set["epsilon"] {
		c.Epsilon = *r.epsilon
	}
	if set["bounded-load-unit"] {
		c.BoundedLoadUnit = *r.unit
	}
	if set["virtual-nodes"] {
		c.VirtualNodes = *r.vnodes
	}
	if set["chars-per-token"] {
		c.CharsPerToken = *r.charsPerToken
	}
	if set["cache-aware-load"] {
		c.LLMAware.CacheAwareLoad = *r.cacheAware
	}
	if set["placement-memory"] {
		c.LLMAware.PlacementMemory = *r.placementMemory
	}
	if set["long-stickiness"] {
		c.LLMAware.LongStickiness = *r.longStickiness
	}
	if set["long-prompt-tokens"] {
		c.LLMAware.LongPromptTokens = *r.longPrompt
	}
	if set["long-cap-factor"] {
		c.LLMAware.LongCapFactor = *r.longCapFactor
	}
	if set["placement-memory-max-entries"] {
		c.PlacementMemory.MaxEntries = *r.maxEntries
	}
	if set["placement-memory-ttl"] {
		c.PlacementMemory.TTL = config.Duration(*r.ttl)
	}
}

// simModelFlags defines the replica model flags of `llm-ring replica`
// (modelFlags) on fs, except that the answers' seed is --answer-seed: here
// --seed is the traffic seed.
func simModelFlags(fs *flag.FlagSet, cfg *model.Config) {
	tmp := flag.NewFlagSet("model", flag.ContinueOnError)
	modelFlags(tmp, cfg)
	tmp.VisitAll(func(f *flag.Flag) {
		name := f.Name
		if name == "seed" {
			name = "answer-seed"
		}
		fs.Var(f.Value, name, "replica: "+f.Usage)
	})
}
