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
	"github.com/llm-ring/llm-ring/internal/simrun"
	"github.com/llm-ring/llm-ring/internal/traffic"
	"github.com/llm-ring/llm-ring/profiles"
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

// simNoSweep lists the flags that cannot be swept: they choose what runs
// and where it goes, not a setting of the system.
var simNoSweep = []string{"policies", "profile", "profiles", "workload", "workloads", "arena-focus", "seeds", "seed", "out-dir", "force", "workers", "analyze", "sweep", "config", "cpuprofile"}

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
	if o.open != nil {
		return simOpen(ctx, o, stdout, stderr)
	}
	if o.arena != nil {
		return simArena(ctx, o, stdout, stderr)
	}
	points := []point{{dir: o.outDir, o: o}}
	if o.sweepKey != "" {
		points = points[:0]
		for _, v := range o.sweepVals {
			extra := "-" + o.sweepKey + "=" + v
			if strings.Contains(o.sweepKey, ".") { // a policy setting: --set KEY=V
				extra = "-set=" + o.sweepKey + "=" + v
			}
			po, err := parseSimFlags(append(slices.Clone(args), extra), io.Discard)
			if err != nil {
				return usageError{fmt.Errorf("--sweep %s=%s: %w", o.sweepKey, v, simUnwrapUsage(err))}
			}
			points = append(points, point{value: v, dir: filepath.Join(o.outDir, o.sweepKey+"="+v), o: po})
		}
	}

	// One pool for every run of every sweep point.
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
	if !o.analyze {
		fmt.Fprintf(stdout, "runs written to %s\n", o.outDir)
		return nil
	}
	if o.sweepKey == "" {
		return simAnalyzeOne(stdout, o)
	}
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

// parseSimFlags parses the sim command line into options, applying the
// router configuration file (if any), then the router flags given on top.
func parseSimFlags(args []string, stderr io.Writer) (*simOptions, error) {
	fs := newFlagSet("sim", stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "usage: llm-ring sim [--policies all | NAME...] [--profile standard | --profiles all | NAME...] "+
			"[--seed 1 | --seeds 1-10] [--replicas 3] [--scale-at S] [--sweep KEY=V1,V2,...] [--out-dir DIR] [router and replica flags]\n\n")
		fs.PrintDefaults()
	}
	policies := fs.String("policies", "all",
		"policies to run, space- or comma-separated; all: every registered policy ("+strings.Join(policy.Names(), ", ")+
			"); study: the study's five; variants for ablations: "+strings.Join(sim.DescribeVariants(), "; "))
	profile := fs.String("profile", "standard", "traffic profile: a JSON file, or an embedded name ("+strings.Join(profiles.Names(), ", ")+")")
	tracePath := fs.String("trace", "", "replay a trace (Mooncake JSONL: timestamp, input_length, output_length, hash_ids) open loop instead of a profile's conversations")
	traceSpeedup := fs.Float64("trace-speedup", 1, "with --trace: divide the trace's timestamps by this")
	preset := fs.String("replica-preset", model.PresetCPU, "the replicas' model: "+strings.Join(model.PresetNames(), ", ")+"; replica flags given too override its values")
	profileList := fs.String("profiles", "", "the arena: several profiles (scenarios), space- or comma-separated names or JSON files; "+
		"all: every embedded profile. Each scenario's runs and analysis go to OUT-DIR/<name>/, then OUT-DIR/arena.md, "+
		"a heat map per metric and a Pareto chart per scenario; replicas get a CPU each unless --shared-cpu is given")
	focus := fs.String("arena-focus", "", "the policy of the arena's paired table, compared seed by seed with the best other "+
		"policy of each scenario (default: the router's default policy, if it runs)")
	seed := fs.Int64("seed", 1, "traffic seed (one run per policy)")
	seeds := fs.String("seeds", "", "several seeds instead of --seed: a list or ranges, e.g. 1-10 or 1,2,3 or 1-3,7")
	replicas := fs.Int("replicas", 3, "replicas at the start (llm-0, llm-1, ...)")
	routers := fs.Int("routers", 1, "router instances, each with its own view; a request goes to instance hash(conversation, turn) mod N (a load balancer without affinity)")
	gossip := fs.Bool("gossip", true, "with --routers > 1: the instances share placement, prefix inserts and in-flight load (as cluster.mode gossip); false: each sees only its own traffic")
	gossipDelay := fs.Duration("gossip-delay", 5*time.Millisecond, "with --gossip: model time a change takes to reach the other instances (a conservative default: live, a push is applied by a peer 0.1-1.5 ms after it is sent)")
	gossipBatch := fs.Duration("gossip-batch", 0, "with --gossip: model the live node's batching (flush_interval): load increases and prefix inserts wait this much more than --gossip-delay, turns and releases do not and take what is held with them (live: --gossip-delay 0 --gossip-batch 5ms); 0: every change waits --gossip-delay alone")
	shared := fs.Bool("shared-cpu", true, "replicas share one compute budget (k busy replicas each run k times slower), as on the seed's laptop and in llm-ring run; --shared-cpu=false gives each replica a CPU of its own (needed for many replicas)")
	scaleAt := fs.Float64("scale-at", 0, "start an extra replica at this many model seconds (0: no scale-up)")
	loadDelay := fs.Duration("load-delay", 20*time.Second, "model time the extra replica takes to load before it joins the ring")
	outDir := fs.String("out-dir", filepath.Join("results", "sim"), "folder for the runs' CSV and JSON files (and the analysis)")
	force := fs.Bool("force", false, "overwrite run files that already exist")
	workers := fs.Int("workers", 0, "runs simulated at once (0: one per CPU); each run is single-threaded and deterministic")
	analyze := fs.Bool("analyze", true, "analyse the runs (summary.md, per_run.csv, charts) and print the table")
	conversations := fs.Int("conversations", 0, "override the profile's number of conversations (0: the profile's)")
	concurrency := fs.Int("concurrency", 0, "override the profile's number of concurrent users (0: the profile's)")
	sweep := fs.String("sweep", "", "run once per value of a flag or policy setting and chart the results, e.g. policy.epsilon=0.1,0.25,0.5,1.0, cache-ram-mib=64,512, replicas=2,3,4")
	var sets []string
	fs.Func("set", "a policy setting, repeatable: NAME.KEY=VALUE (e.g. llm-aware.long_cap_factor=3), or policy.KEY=VALUE for every chosen policy that has KEY; see docs/design.md for each policy's keys", func(v string) error {
		sets = append(sets, v)
		return nil
	})
	cpuProf := fs.String("cpuprofile", "", "write a CPU profile of the whole command to this file (go tool pprof)")
	cfgPath := fs.String("config", "", "router configuration file (YAML, as for llm-ring router): its routing keys are used; flags below override them")

	def := sim.DefaultRouter()
	rf := simRouterFlags{}
	rf.define(fs, &def)
	mcfg, err := model.Preset(presetArg(args))
	if err != nil {
		return nil, usageError{fmt.Errorf("--replica-preset: %w", err)}
	}
	simModelFlags(fs, &mcfg)
	wf := defineWorkloadFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}

	o := &simOptions{replicas: *replicas, routers: *routers, gossip: *gossip, gossipDelay: *gossipDelay, gossipBatch: *gossipBatch, shared: *shared, outDir: *outDir, force: *force, workers: *workers,
		analyze: *analyze, model: mcfg, loadDelay: *loadDelay, cpuProf: *cpuProf}
	for _, p := range strings.Split(*policies, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		if p == "all" || p == "study" {
			group := policy.Names()
			if p == "study" {
				group = policy.StudyNames()
			}
			for _, q := range group {
				if slices.Contains(o.policies, q) {
					return nil, usageError{fmt.Errorf("--policies: %q given twice", q)}
				}
			}
			o.policies = append(o.policies, group...)
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
	if err := wf.apply(o, set); err != nil {
		return nil, err
	}
	if set["replica-preset"] && presetArg(args) != *preset {
		return nil, usageError{errors.New("--replica-preset: give it once")}
	}
	if o.seeds, err = seedList(*seed, *seeds, set); err != nil { // as llm-ring run
		return nil, usageError{err}
	}
	if *conversations < 0 || *concurrency < 0 {
		return nil, usageError{errors.New("--conversations and --concurrency must not be negative")}
	}
	override := func(p *traffic.Profile) error {
		if *conversations > 0 {
			p.Conversations = *conversations
		}
		if *concurrency > 0 {
			p.Concurrency = *concurrency
		}
		if err := p.Validate(); err != nil {
			return usageError{fmt.Errorf("profile %s (with --conversations/--concurrency): %w", p.Name, err)}
		}
		return nil
	}
	if set["profiles"] {
		if set["profile"] {
			return nil, usageError{errors.New("--profile and --profiles: give one (--profiles runs the arena)")}
		}
		if o.arena, err = parseProfileList(*profileList); err != nil {
			return nil, usageError{err}
		}
		for i := range o.arena {
			if err := override(&o.arena[i]); err != nil {
				return nil, err
			}
		}
		o.profile = o.arena[0]
		if !set["shared-cpu"] {
			o.shared = false // the arena: every replica has compute of its own, as in any real fleet
		}
	} else {
		if set["arena-focus"] {
			return nil, usageError{errors.New("--arena-focus: only with --profiles (the arena)")}
		}
		if o.profile, err = loadProfile(*profile); err != nil {
			return nil, usageError{err}
		}
		if err := override(&o.profile); err != nil {
			return nil, err
		}
	}
	if o.arena != nil {
		if o.focus, err = arenaFocus(*focus, set["arena-focus"], o.policies); err != nil {
			return nil, usageError{err}
		}
	}
	if err := o.replayTrace(*tracePath, *traceSpeedup, wf); err != nil {
		return nil, err
	}
	// What a profile says about its replicas sets the flags left at their
	// defaults (as llm-ring run does): its replica count, and a CPU per
	// replica for its speeds and events.
	o.replicasSet = set["replicas"]
	if p := &o.profile; p.Replicas > 0 && !o.replicasSet && o.arena == nil {
		o.replicas = p.Replicas
	}
	if p := &o.profile; (len(p.ReplicaSpeeds) > 0 || len(p.ReplicaEvents) > 0) && !set["shared-cpu"] {
		o.shared = false
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
	if o.routers < 1 || o.routers > 64 {
		return nil, usageError{fmt.Errorf("--routers: must be between 1 and 64, got %d", o.routers)}
	}
	if o.gossipDelay < 0 {
		return nil, usageError{fmt.Errorf("--gossip-delay: must not be negative, got %v", o.gossipDelay)}
	}
	if o.gossipBatch < 0 {
		return nil, usageError{fmt.Errorf("--gossip-batch: must not be negative, got %v", o.gossipBatch)}
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
	for _, kv := range sets {
		if err := applySet(&o.router, o.policies, kv); err != nil {
			return nil, usageError{fmt.Errorf("--set %s: %w", kv, err)}
		}
	}
	if err := o.router.ValidateRouting(); err != nil {
		return nil, usageError{err}
	}

	if *sweep != "" && o.arena != nil {
		return nil, usageError{errors.New("--sweep and --profiles: give one (a sweep runs one profile)")}
	}
	if *sweep != "" {
		key, vals, ok := strings.Cut(*sweep, "=")
		key = strings.TrimLeft(strings.TrimSpace(key), "-")
		if !ok || key == "" {
			return nil, usageError{fmt.Errorf("--sweep: want KEY=V1,V2,..., got %q", *sweep)}
		}
		if strings.Contains(key, ".") {
			if err := applySet(&o.router, o.policies, key+"="); err != nil && strings.Contains(err.Error(), "has key") {
				return nil, usageError{fmt.Errorf("--sweep: %w", err)}
			}
		} else if fs.Lookup(key) == nil {
			return nil, usageError{fmt.Errorf("--sweep: no flag named %q to sweep", key)}
		}
		if slices.Contains(simNoSweep, key) {
			return nil, usageError{fmt.Errorf("--sweep: %s cannot be swept (sweep a setting: policy.epsilon, cache-ram-mib, replicas, ...)", key)}
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

// simRouterFlags are the routing keys of the router configuration that
// belong to no policy, as flags (a policy's own settings go through --set).
type simRouterFlags struct {
	charsPerToken             *float64
	vnodes, maxEntries        *int
	blockChars                *int
	capacityTokens            *int64
	ttl, prefixTTL, sigPeriod *time.Duration
}

func (r *simRouterFlags) define(fs *flag.FlagSet, d *config.Router) {
	r.vnodes = fs.Int("virtual-nodes", d.VirtualNodes, "ring positions per replica (router key virtual_nodes)")
	r.charsPerToken = fs.Float64("chars-per-token", d.CharsPerToken, "router's token estimate for unanswered text (router key chars_per_token)")
	r.maxEntries = fs.Int("placement-memory-max-entries", d.PlacementMemory.MaxEntries, "conversations remembered (placement_memory.max_entries)")
	r.ttl = fs.Duration("placement-memory-ttl", d.PlacementMemory.TTL.D(), "forget a conversation unseen this long, model time (placement_memory.ttl)")
	r.blockChars = fs.Int("prefix-block-chars", d.PrefixIndex.BlockChars, "prefix index block size in characters (prefix_index.block_chars)")
	r.capacityTokens = fs.Int64("prefix-capacity-tokens", d.PrefixIndex.CapacityTokens, "prefix index capacity per replica, tokens (prefix_index.capacity_tokens)")
	r.prefixTTL = fs.Duration("prefix-ttl", d.PrefixIndex.TTL.D(), "prefix index: forget a block unsent this long, model time (prefix_index.ttl)")
	r.sigPeriod = fs.Duration("signals-interval", d.Signals.Interval.D(), "how often replicas' own signals are sampled, model time; 0: never (signals.interval)")
}

// apply sets the flags given on the command line (set) onto c.
func (r *simRouterFlags) apply(set map[string]bool, c *config.Router) {
	if set["virtual-nodes"] {
		c.VirtualNodes = *r.vnodes
	}
	if set["chars-per-token"] {
		c.CharsPerToken = *r.charsPerToken
	}
	if set["placement-memory-max-entries"] {
		c.PlacementMemory.MaxEntries = *r.maxEntries
	}
	if set["placement-memory-ttl"] {
		c.PlacementMemory.TTL = config.Duration(*r.ttl)
	}
	if set["prefix-block-chars"] {
		c.PrefixIndex.BlockChars = *r.blockChars
	}
	if set["prefix-capacity-tokens"] {
		c.PrefixIndex.CapacityTokens = *r.capacityTokens
	}
	if set["prefix-ttl"] {
		c.PrefixIndex.TTL = config.Duration(*r.prefixTTL)
	}
	if set["signals-interval"] {
		c.Signals.Interval = config.Duration(*r.sigPeriod)
	}
}

// applySet applies one --set NAME.KEY=VALUE to c. NAME "policy" means every
// policy of runs (variants count as their base) that has KEY.
func applySet(c *config.Router, runs []string, kv string) error {
	k, value, ok := strings.Cut(kv, "=")
	name, key, ok2 := strings.Cut(k, ".")
	if !ok || !ok2 || name == "" || key == "" {
		return errors.New("want NAME.KEY=VALUE or policy.KEY=VALUE")
	}
	if name != "policy" {
		return c.SetPolicySetting(name, key, value)
	}
	var bases, with []string
	for _, run := range runs {
		base, set, err := sim.Settings(run, c)
		if err != nil || slices.Contains(bases, base) {
			continue
		}
		bases = append(bases, base)
		if slices.Contains(policy.SettingKeys(set), key) {
			with = append(with, base)
		}
	}
	if len(with) == 0 {
		return fmt.Errorf("none of the policies (%s) has key %q", strings.Join(bases, ", "), key)
	}
	if value == "" {
		return nil // a key check only (--sweep)
	}
	for _, base := range with {
		if err := c.SetPolicySetting(base, key, value); err != nil {
			return err
		}
	}
	return nil
}
