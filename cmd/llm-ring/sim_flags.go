package main

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/llm-ring/llm-ring/internal/model"
	"github.com/llm-ring/llm-ring/internal/policy"
	"github.com/llm-ring/llm-ring/internal/sim"
	"github.com/llm-ring/llm-ring/internal/traffic"
	"github.com/llm-ring/llm-ring/profiles"
)

// simFlags are llm-ring sim's flags in groups, each group registering its
// flags and checking them into the options. A new flag joins the group it
// belongs to (register and apply); a new group is one more field and one
// more step in parse.
type simFlags struct {
	run      simRunFlags     // what runs: --policies, --seed(s)
	traffic  simTrafficFlags // the load: --profile(s), --arena-focus, --trace, --conversations, --concurrency
	fleet    simFleetFlags   // replicas and router instances: --replicas, --routers, --gossip*, --shared-cpu, --scale-at, --load-delay
	output   simOutputFlags  // where and how: --out-dir, --force, --workers, --analyze, --cpuprofile
	replica  simReplicaFlags // --replica-preset and the replica model's flags
	routing  simRoutingFlags // --config, --set and the router keys (sim_flags_routing.go)
	sweep    simSweepFlags   // --sweep (sim_flags_routing.go)
	workload *workloadFlags  // --workload(s), their stages, SLOs and admission (sim_workload.go)
}

// register defines every flag on fs; args are the command line, read
// ahead for --replica-preset (the model flags' defaults are the preset's).
func (f *simFlags) register(fs *flag.FlagSet, args []string) error {
	f.run.register(fs)
	f.traffic.register(fs)
	f.fleet.register(fs)
	f.output.register(fs)
	f.sweep.register(fs)
	f.routing.register(fs)
	if err := f.replica.register(fs, args); err != nil {
		return err
	}
	f.workload = defineWorkloadFlags(fs)
	return nil
}

// parse checks the parsed flags (set: the flags given) into options, one
// group after the other: a later group reads what an earlier one decided
// (the fleet the profile, the routing and the sweep the policies), and the
// order is the order of the checks, which decides the error a command line
// with several mistakes gets.
func (f *simFlags) parse(set map[string]bool) (*simOptions, error) {
	o := &simOptions{model: f.replica.cfg}
	f.fleet.read(o)
	f.output.read(o)
	for _, apply := range []func(*simOptions, map[string]bool) error{
		f.run.applyPolicies, f.workload.apply, f.replica.applyPreset, f.run.applySeeds,
		f.traffic.apply, f.fleet.apply, f.routing.apply, checkSpecs, f.sweep.apply,
	} {
		if err := apply(o, set); err != nil {
			return nil, err
		}
	}
	return o, nil
}

// checkSpecs validates the runs the options make (sim.Spec.Validate: the
// fleet, the model, the routing, each policy with its settings), so that a
// bad setting is a usage error before anything runs; the groups check only
// what a Spec cannot hold (a flag's syntax, flags given together).
func checkSpecs(o *simOptions, _ map[string]bool) error {
	profiles := o.arena
	if profiles == nil {
		profiles = []traffic.Profile{o.profile}
	}
	for _, p := range profiles {
		for _, sp := range o.specsFor(p) {
			if err := sp.Validate(); err != nil {
				return usageError{err}
			}
		}
	}
	return nil
}

// simRunFlags choose what runs: the policies and the seeds.
type simRunFlags struct {
	policies, seeds *string
	seed            *int64
}

func (f *simRunFlags) register(fs *flag.FlagSet) {
	f.policies = fs.String("policies", "all",
		"policies to run, space- or comma-separated; all: every registered policy ("+strings.Join(policy.Names(), ", ")+
			"); study: the study's five; variants for ablations: "+strings.Join(sim.DescribeVariants(), "; "))
	f.seed = fs.Int64("seed", 1, "traffic seed (one run per policy)")
	f.seeds = fs.String("seeds", "", "several seeds instead of --seed: a list or ranges, e.g. 1-10 or 1,2,3 or 1-3,7")
}

func (f *simRunFlags) applyPolicies(o *simOptions, _ map[string]bool) error {
	var err error
	if o.policies, err = simPolicyList(*f.policies); err != nil {
		return usageError{fmt.Errorf("--policies: %w", err)}
	}
	return nil
}

func (f *simRunFlags) applySeeds(o *simOptions, set map[string]bool) error {
	var err error
	if o.seeds, err = seedList(*f.seed, *f.seeds, set); err != nil { // as llm-ring run
		return usageError{err}
	}
	return nil
}

// simPolicyList reads sim's --policies: names (variants too), all (every
// registered policy) and study (the study's five), each at most once.
func simPolicyList(list string) ([]string, error) {
	var out []string
	for _, p := range strings.Split(list, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		group := []string{p}
		switch {
		case p == "all":
			group = policy.Names()
		case p == "study":
			group = policy.StudyNames()
		case !slices.Contains(sim.PolicyNames(), p):
			return nil, fmt.Errorf("unknown policy %q (want one of %s)", p, strings.Join(sim.PolicyNames(), ", "))
		}
		for _, q := range group {
			if slices.Contains(out, q) {
				return nil, fmt.Errorf("%q given twice", q)
			}
		}
		out = append(out, group...)
	}
	if len(out) == 0 {
		return nil, errors.New("name at least one policy")
	}
	return out, nil
}

// simTrafficFlags choose the load: a profile, the arena's profiles or a
// trace, and the conversations' count and concurrency over the profile's.
type simTrafficFlags struct {
	profile, profileList, focus, tracePath *string
	traceSpeedup                           *float64
	conversations, concurrency             *int
}

func (f *simTrafficFlags) register(fs *flag.FlagSet) {
	f.profile = fs.String("profile", "standard", "traffic profile: a JSON file, or an embedded name ("+strings.Join(profiles.Names(), ", ")+")")
	f.tracePath = fs.String("trace", "", "replay a trace (Mooncake JSONL: timestamp, input_length, output_length, hash_ids) open loop instead of a profile's conversations")
	f.traceSpeedup = fs.Float64("trace-speedup", 1, "with --trace: divide the trace's timestamps by this")
	f.profileList = fs.String("profiles", "", "the arena: several profiles (scenarios), space- or comma-separated names or JSON files; "+
		"all: every embedded profile. Each scenario's runs and analysis go to OUT-DIR/<name>/, then OUT-DIR/arena.md, "+
		"a heat map per metric and a Pareto chart per scenario; replicas get a CPU each unless --shared-cpu is given")
	f.focus = fs.String("arena-focus", "", "the policy of the arena's paired table, compared seed by seed with the best other "+
		"policy of each scenario (default: the router's default policy, if it runs)")
	f.conversations = fs.Int("conversations", 0, "override the profile's number of conversations (0: the profile's)")
	f.concurrency = fs.Int("concurrency", 0, "override the profile's number of concurrent users (0: the profile's)")
}

// apply loads the profile (or the arena's profiles, with the arena's
// focus), applies the overrides, and sets up the trace.
func (f *simTrafficFlags) apply(o *simOptions, set map[string]bool) error {
	if *f.conversations < 0 || *f.concurrency < 0 {
		return usageError{errors.New("--conversations and --concurrency must not be negative")}
	}
	if set["profiles"] {
		if err := f.applyArena(o, set); err != nil {
			return err
		}
	} else {
		if set["arena-focus"] {
			return usageError{errors.New("--arena-focus: only with --profiles (the arena)")}
		}
		var err error
		if o.profile, err = loadProfile(*f.profile); err != nil {
			return usageError{err}
		}
		if err := f.override(&o.profile); err != nil {
			return err
		}
	}
	return f.replayTrace(o)
}

// applyArena reads --profiles and --arena-focus.
func (f *simTrafficFlags) applyArena(o *simOptions, set map[string]bool) error {
	if set["profile"] {
		return usageError{errors.New("--profile and --profiles: give one (--profiles runs the arena)")}
	}
	var err error
	if o.arena, err = parseProfileList(*f.profileList); err != nil {
		return usageError{err}
	}
	for i := range o.arena {
		if err := f.override(&o.arena[i]); err != nil {
			return err
		}
	}
	o.profile = o.arena[0]
	if !set["shared-cpu"] {
		o.shared = false // the arena: every replica has compute of its own, as in any real fleet
	}
	if o.focus, err = arenaFocus(*f.focus, set["arena-focus"], o.policies); err != nil {
		return usageError{err}
	}
	return nil
}

// override applies --conversations and --concurrency to p.
func (f *simTrafficFlags) override(p *traffic.Profile) error {
	if *f.conversations > 0 {
		p.Conversations = *f.conversations
	}
	if *f.concurrency > 0 {
		p.Concurrency = *f.concurrency
	}
	if err := p.Validate(); err != nil {
		return usageError{fmt.Errorf("profile %s (with --conversations/--concurrency): %w", p.Name, err)}
	}
	return nil
}

// replayTrace sets o up to replay --trace ("": none) open loop.
func (f *simTrafficFlags) replayTrace(o *simOptions) error {
	path := *f.tracePath
	if path == "" {
		return nil
	}
	reqs, err := loadTrace(path)
	if err != nil {
		return usageError{fmt.Errorf("--trace: %w", err)}
	}
	if o.profile, o.source, err = sim.TraceRun(filepath.Base(path), reqs, *f.traceSpeedup); err != nil {
		return usageError{fmt.Errorf("--trace: %w", err)}
	}
	o.traceIdeal = traffic.IdealCachedShare(reqs)
	return nil
}

// simFleetFlags shape the replicas and the router instances.
type simFleetFlags struct {
	replicas, routers                   *int
	gossip, shared                      *bool
	gossipDelay, gossipBatch, loadDelay *time.Duration
	scaleAt                             *float64
}

func (f *simFleetFlags) register(fs *flag.FlagSet) {
	f.replicas = fs.Int("replicas", 3, "replicas at the start (llm-0, llm-1, ...)")
	f.routers = fs.Int("routers", 1, "router instances, each with its own view; a request goes to instance hash(conversation, turn) mod N (a load balancer without affinity)")
	f.gossip = fs.Bool("gossip", true, "with --routers > 1: the instances share placement, prefix inserts and in-flight load (as cluster.mode gossip); false: each sees only its own traffic")
	f.gossipDelay = fs.Duration("gossip-delay", 5*time.Millisecond, "with --gossip: model time a change takes to reach the other instances (a conservative default: live, a push is applied by a peer 0.1-1.5 ms after it is sent)")
	f.gossipBatch = fs.Duration("gossip-batch", 0, "with --gossip: model the live node's batching (flush_interval): load increases and prefix inserts wait this much more than --gossip-delay, turns and releases do not and take what is held with them (live: --gossip-delay 0 --gossip-batch 5ms); 0: every change waits --gossip-delay alone")
	f.shared = fs.Bool("shared-cpu", true, "replicas share one compute budget (k busy replicas each run k times slower), as on the seed's laptop and in llm-ring run; --shared-cpu=false gives each replica a CPU of its own (needed for many replicas)")
	f.scaleAt = fs.Float64("scale-at", 0, "start an extra replica at this many model seconds (0: no scale-up)")
	f.loadDelay = fs.Duration("load-delay", 20*time.Second, "model time the extra replica takes to load before it joins the ring")
}

// read copies the values as given: the workload and admission flags read
// the instances and the CPU sharing before apply checks them.
func (f *simFleetFlags) read(o *simOptions) {
	o.replicas, o.routers, o.shared = *f.replicas, *f.routers, *f.shared
	o.gossip, o.gossipDelay, o.gossipBatch, o.loadDelay = *f.gossip, *f.gossipDelay, *f.gossipBatch, *f.loadDelay
}

// apply lets the profile set the flags left at their defaults (as llm-ring
// run does: its replica count, and a CPU per replica for its speeds and
// events) and reads --scale-at (checkSpecs checks the rest).
func (f *simFleetFlags) apply(o *simOptions, set map[string]bool) error {
	o.replicasSet = set["replicas"]
	if p := &o.profile; p.Replicas > 0 && !o.replicasSet && o.arena == nil {
		o.replicas = p.Replicas
	}
	if p := &o.profile; (len(p.ReplicaSpeeds) > 0 || len(p.ReplicaEvents) > 0) && !set["shared-cpu"] {
		o.shared = false
	}
	if o.routers < 1 { // a Spec reads 0 as one instance; the flag counts them
		return usageError{fmt.Errorf("--routers: must be between 1 and 64, got %d", o.routers)}
	}
	if !(*f.scaleAt >= 0) || math.IsInf(*f.scaleAt, 0) { // a Duration holds neither NaN nor ∞
		return usageError{fmt.Errorf("--scale-at: must be a number of seconds ≥ 0, got %v", *f.scaleAt)}
	}
	o.scaleAt = time.Duration(math.Round(*f.scaleAt * 1e9))
	return nil
}

// simOutputFlags say where the runs go and how they are run.
type simOutputFlags struct {
	outDir, cpuProf *string
	force, analyze  *bool
	workers         *int
}

func (f *simOutputFlags) register(fs *flag.FlagSet) {
	f.outDir = fs.String("out-dir", filepath.Join("results", "sim"), "folder for the runs' CSV and JSON files (and the analysis)")
	f.force = fs.Bool("force", false, "overwrite run files that already exist")
	f.workers = fs.Int("workers", 0, "runs simulated at once (0: one per CPU); each run is single-threaded and deterministic")
	f.analyze = fs.Bool("analyze", true, "analyse the runs (summary.md, per_run.csv, charts) and print the table")
	f.cpuProf = fs.String("cpuprofile", "", "write a CPU profile of the whole command to this file (go tool pprof)")
}

func (f *simOutputFlags) read(o *simOptions) {
	o.outDir, o.force, o.workers, o.analyze, o.cpuProf = *f.outDir, *f.force, *f.workers, *f.analyze, *f.cpuProf
}

// simReplicaFlags are the replicas' model: a preset and the model flags
// over it.
type simReplicaFlags struct {
	preset     *string
	presetSeen string // --replica-preset as read ahead from the command line
	cfg        model.Config
}

func (f *simReplicaFlags) register(fs *flag.FlagSet, args []string) error {
	f.preset = fs.String("replica-preset", model.PresetCPU, "the replicas' model: "+strings.Join(model.PresetNames(), ", ")+"; replica flags given too override its values")
	f.presetSeen = presetArg(args)
	var err error
	if f.cfg, err = model.Preset(f.presetSeen); err != nil {
		return usageError{fmt.Errorf("--replica-preset: %w", err)}
	}
	simModelFlags(fs, &f.cfg)
	return nil
}

// applyPreset refuses a second --replica-preset (the model flags took the
// first one's defaults).
func (f *simReplicaFlags) applyPreset(_ *simOptions, set map[string]bool) error {
	if set["replica-preset"] && f.presetSeen != *f.preset {
		return usageError{errors.New("--replica-preset: give it once")}
	}
	return nil
}

// presetArg returns the value of --replica-preset in args (the model flags'
// defaults come from the preset, so it is read before they are defined), or
// the CPU preset.
func presetArg(args []string) string {
	for i, a := range args {
		name, v, hasV := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if name != "replica-preset" || !strings.HasPrefix(a, "-") {
			continue
		}
		if hasV {
			return v
		}
		if i+1 < len(args) {
			return args[i+1]
		}
	}
	return model.PresetCPU
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
