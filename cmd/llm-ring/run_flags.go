package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/llm-ring/llm-ring/internal/config"
	"github.com/llm-ring/llm-ring/internal/experiment"
	"github.com/llm-ring/llm-ring/internal/model"
	"github.com/llm-ring/llm-ring/internal/policy"
	"github.com/llm-ring/llm-ring/internal/replica"
	"github.com/llm-ring/llm-ring/internal/router"
	"github.com/llm-ring/llm-ring/profiles"
)

// runFlags are llm-ring run's flags, in three groups: what traffic runs
// under which policies, the embedded replicas and router, and an external
// router.
type runFlags struct {
	traffic  runTrafficFlags
	embedded runEmbeddedFlags
	external runExternalFlags

	outDir    *string
	force     *bool
	speed     *float64
	scaleAt   *float64
	noHeaders *bool
	model     *string
}

// runTrafficFlags choose the traffic, the policies and the seeds.
type runTrafficFlags struct {
	policies, profile, tracePath, seeds *string
	traceSpeedup                        *float64
	seed                                *int64
	alternate                           *bool
	// An open-loop workload (issue 19) instead of the profile.
	workload, rates, arrival *string
	stage, warmup            *time.Duration
}

// runEmbeddedFlags shape the in-process replicas and router.
type runEmbeddedFlags struct {
	replicas                                           *int
	loadDelay                                          *time.Duration
	replicaPreset, replicaAPI, routerConfig, routerLog *string
	sharedCPU                                          *bool
	engine                                             *string // issue 19 (engine): the replicas' engine model
}

// runExternalFlags reach a deployed router.
type runExternalFlags struct {
	routerURL, adminURL, adminTokenFile, scaleCmd, unscaleCmd *string
	prepare                                                   *bool
	poll                                                      *time.Duration
}

func (f *runFlags) register(fs *flag.FlagSet) {
	f.traffic.register(fs)
	f.outDir = fs.String("out-dir", "results/raw", "folder for <run_id>.csv and <run_id>.json")
	f.force = fs.Bool("force", false, "overwrite runs already recorded in --out-dir")
	f.embedded.register(fs)
	f.speed = fs.Float64("speed", defaultRunSpeed, "model time runs this many times faster than wall time (use the replicas' speed with --router; 1 for real llama.cpp)")
	f.scaleAt = fs.Float64("scale-at", 0, "add a replica at this many seconds of model time into each run (0: no scale-up)")
	f.noHeaders = fs.Bool("no-headers", false, "send OpenAI-style bodies only, without x-conversation-id and x-turn (the router detects conversations itself)")
	f.model = fs.String("model", "", "the requests' \"model\" field (empty: left out; Ollama needs its model's name)")
	f.external.register(fs)
}

func (f *runTrafficFlags) register(fs *flag.FlagSet) {
	f.policies = fs.String("policies", "bounded,llm-aware", "policies to run, in order: space- or comma-separated ("+strings.Join(policy.Names(), ", ")+")")
	f.profile = fs.String("profile", "standard", "traffic profile: a JSON file, or an embedded profile name ("+strings.Join(profiles.Names(), ", ")+")")
	f.tracePath = fs.String("trace", "", "replay this JSONL trace (Mooncake/FAST'25 format, see profiles/README.md) instead of a profile: open loop, no conversation header")
	f.traceSpeedup = fs.Float64("trace-speedup", 1, "with --trace: divide the trace's timestamps by this")
	f.workload = fs.String("workload", "", "an open-loop workload (embedded: "+strings.Join(profiles.WorkloadNames(), ", ")+
		", or a JSON file) at --rates, instead of a profile: the same requests as llm-ring sim --workload, per stage in model time")
	f.rates = fs.String("rates", "1,2,4", "with --workload: arrival rates, requests per second (model time), one stage each")
	f.arrival = fs.String("arrival", "poisson", "with --workload: poisson or constant inter-arrival gaps")
	f.stage = fs.Duration("stage-duration", 30*time.Second, "with --workload: model time of each rate's stage")
	f.warmup = fs.Duration("warmup", 5*time.Second, "with --workload: model time at the first rate before the stages, left out of every metric")
	f.seed = fs.Int64("seed", 1, "traffic seed (one run per policy)")
	f.seeds = fs.String("seeds", "", "several seeds instead of --seed: a list or ranges, e.g. 1-5 or 1,2,3")
	f.alternate = fs.Bool("alternate", false, "reverse the policy order on every other seed")
}

func (f *runEmbeddedFlags) register(fs *flag.FlagSet) {
	f.replicas = fs.Int("replicas", 3, "replicas at the start of a run (external mode: checked against the router when set)")
	f.loadDelay = fs.Duration("load-delay", 20*time.Second, "model time the extra embedded replica takes to load its model")
	f.engine = fs.String("engine", "", "embedded replicas' engine: "+strings.Join(model.Engines, ", ")+" (default: the preset's)")
	f.replicaPreset = fs.String("replica-preset", model.PresetCPU, "embedded replicas' model: "+strings.Join(model.PresetNames(), ", ")+" (see internal/model/preset.go)")
	f.replicaAPI = fs.String("replica-api", replica.APILlamaCpp, "engine face of the embedded replicas: "+strings.Join(replica.APIs, ", ")+" (their answer shapes and /metrics names; the router's signals.engine follows)")
	f.sharedCPU = fs.Bool("shared-cpu", true, "embedded replicas share one compute budget, as on the seed's laptop")
	f.routerConfig = fs.String("router-config", "", "embedded router's configuration (YAML, as config/router.yaml; policy, listen and discovery are set per run)")
	f.routerLog = fs.String("router-log", "", "write the embedded router's JSON log (every decision with its trace) to this file")
}

func (f *runExternalFlags) register(fs *flag.FlagSet) {
	f.routerURL = fs.String("router", "", "drive an existing router at this URL instead of embedded replicas (its policy is switched through its admin API, --admin); several active-active instances: URL1,URL2,URL3 (turn t of a conversation goes to URL[(hash(conversation)+t) mod N])")
	f.adminURL = fs.String("admin", "", "with --router: the router's admin API (admin.listen), e.g. http://127.0.0.1:9090; with several router URLs, one admin URL per instance in the same order")
	f.adminTokenFile = fs.String("admin-token-file", "", "with --router: file holding the admin API's bearer token (the router's admin.token_file)")
	f.scaleCmd = fs.String("scale-cmd", "", "with --router: command adding the extra replica at --scale-at, e.g. \"kubectl scale statefulset/llm --replicas=4\"")
	f.unscaleCmd = fs.String("unscale-cmd", "", "with --router: command removing it after each run, e.g. \"kubectl scale statefulset/llm --replicas=3\"")
	f.prepare = fs.Bool("prepare", false, "with --router: add and remove the extra replica once before the first run (so runs pay a model load, not a download)")
	f.poll = fs.Duration("poll", 500*time.Millisecond, "with --router: how often to poll GET /replicas while waiting for a replica")
}

// spec builds the experiment from the parsed flags (set: the flags given).
// closeLog, when not nil, closes the router log file once the runs are done.
func (f *runFlags) spec(set map[string]bool) (spec experiment.Spec, closeLog func() error, err error) {
	external := *f.external.routerURL != ""
	spec = experiment.Spec{
		Alternate:    *f.traffic.alternate,
		OutDir:       *f.outDir,
		Force:        *f.force,
		Replicas:     *f.embedded.replicas,
		Speed:        *f.speed,
		LoadDelay:    *f.embedded.loadDelay,
		NoHeaders:    *f.noHeaders,
		RequestModel: *f.model,
		SharedCPU:    *f.embedded.sharedCPU,
		RouterURL:    *f.external.routerURL,
		AdminURL:     *f.external.adminURL,
		ScaleCmd:     *f.external.scaleCmd,
		UnscaleCmd:   *f.external.unscaleCmd,
		Prepare:      *f.external.prepare,
		PollInterval: *f.external.poll,
	}
	if err := f.traffic.apply(&spec, set); err != nil {
		return spec, nil, err
	}
	if spec.ScaleAt, err = modelSeconds("scale-at", *f.scaleAt); err != nil {
		return spec, nil, usageError{err}
	}
	if err := f.traffic.load(&spec, set); err != nil {
		return spec, nil, err
	}
	if external {
		err = f.external.apply(&spec, set)
	} else {
		profileDefaults(&spec, set)
		err = f.embedded.refuseExternal(set)
	}
	if err != nil {
		return spec, nil, err
	}
	if err := f.embedded.apply(&spec, set, external); err != nil {
		return spec, nil, err
	}
	if err := f.external.readToken(&spec); err != nil {
		return spec, nil, err
	}
	return f.embedded.router(spec)
}

// apply reads the policies and seeds.
func (f *runTrafficFlags) apply(spec *experiment.Spec, set map[string]bool) error {
	var err error
	if spec.Policies, err = parsePolicies(*f.policies); err != nil {
		return usageError{err}
	}
	if spec.Seeds, err = seedList(*f.seed, *f.seeds, set); err != nil {
		return usageError{err}
	}
	return nil
}

// load reads the trace or the profile.
func (f *runTrafficFlags) load(spec *experiment.Spec, set map[string]bool) error {
	var err error
	if *f.workload != "" {
		return f.loadWorkload(spec, set)
	}
	for _, name := range []string{"rates", "arrival", "stage-duration", "warmup"} {
		if set[name] {
			return usageError{fmt.Errorf("--%s: only with --workload", name)}
		}
	}
	switch {
	case *f.tracePath != "" && set["profile"]:
		return usageError{errors.New("give --profile or --trace, not both")}
	case *f.tracePath != "":
		if spec.Trace, err = loadTrace(*f.tracePath); err != nil {
			return usageError{fmt.Errorf("--trace: %w", err)}
		}
		spec.TraceName, spec.TraceSpeedup = filepath.Base(*f.tracePath), *f.traceSpeedup
	case set["trace-speedup"]:
		return usageError{errors.New("--trace-speedup applies to --trace only")}
	default:
		if spec.Profile, err = loadProfile(*f.profile); err != nil {
			return usageError{err}
		}
	}
	return nil
}

// loadWorkload reads --workload and its stages.
func (f *runTrafficFlags) loadWorkload(spec *experiment.Spec, set map[string]bool) error {
	for _, name := range []string{"profile", "trace", "trace-speedup"} {
		if set[name] {
			return usageError{fmt.Errorf("--%s and --workload: give one (a workload replaces the profile)", name)}
		}
	}
	w, err := loadWorkload(*f.workload)
	if err != nil {
		return usageError{fmt.Errorf("--workload: %w", err)}
	}
	if spec.Stages, err = parseStages(*f.rates, *f.arrival, *f.stage, *f.warmup); err != nil {
		return usageError{err}
	}
	spec.Workload = &w
	return nil
}

// apply sets an external run's defaults and refuses the embedded flags.
func (f *runExternalFlags) apply(spec *experiment.Spec, set map[string]bool) error {
	if !set["speed"] {
		spec.Speed = 1 // real replicas, unless told otherwise
	}
	if !set["replicas"] {
		spec.Replicas = 0 // whatever the router has
	}
	for _, name := range []string{"router-config", "router-log", "shared-cpu", "load-delay"} {
		if set[name] {
			return usageError{fmt.Errorf("--%s applies to embedded replicas and router, not with --router", name)}
		}
	}
	return nil
}

// readToken reads --admin-token-file.
func (f *runExternalFlags) readToken(spec *experiment.Spec) error {
	if *f.adminTokenFile == "" {
		return nil
	}
	b, err := os.ReadFile(*f.adminTokenFile)
	if err != nil {
		return usageError{fmt.Errorf("--admin-token-file: %w", err)}
	}
	if spec.AdminToken = strings.TrimSpace(string(b)); spec.AdminToken == "" {
		return usageError{fmt.Errorf("--admin-token-file: %s is empty", *f.adminTokenFile)}
	}
	return nil
}

// refuseExternal refuses the external router's flags in an embedded run.
func (f *runEmbeddedFlags) refuseExternal(set map[string]bool) error {
	for _, name := range []string{"scale-cmd", "unscale-cmd", "prepare", "poll", "admin", "admin-token-file"} {
		if set[name] {
			return usageError{fmt.Errorf("--%s applies to an external router only (give its URL with --router)", name)}
		}
	}
	return nil
}

// apply reads the replicas' preset and API (embedded runs only).
func (f *runEmbeddedFlags) apply(spec *experiment.Spec, set map[string]bool, external bool) error {
	var err error
	if set["replica-preset"] {
		if external {
			return usageError{errors.New("--replica-preset applies to embedded replicas, not with --router")}
		}
		if spec.Model, err = model.Preset(*f.replicaPreset); err != nil {
			return usageError{fmt.Errorf("--replica-preset: %w", err)}
		}
	}
	if set["engine"] {
		if external {
			return usageError{errors.New("--engine applies to embedded replicas, not with --router")}
		}
		if spec.Model == (model.Config{}) {
			spec.Model = model.DefaultConfig()
		}
		spec.Model.Engine = *f.engine
		if err := spec.Model.Validate(); err != nil {
			return usageError{fmt.Errorf("--engine: %w", err)}
		}
	}
	spec.ReplicaPreset = *f.replicaPreset
	if external {
		spec.ReplicaPreset = ""
	}
	if set["replica-api"] {
		if external {
			return usageError{errors.New("--replica-api applies to embedded replicas, not with --router")}
		}
		if !slices.Contains(replica.APIs, *f.replicaAPI) {
			return usageError{fmt.Errorf("--replica-api: must be one of %s, got %q", strings.Join(replica.APIs, ", "), *f.replicaAPI)}
		}
		spec.ReplicaAPI = *f.replicaAPI
	}
	return nil
}

// router reads the embedded router's configuration and opens its log.
func (f *runEmbeddedFlags) router(spec experiment.Spec) (experiment.Spec, func() error, error) {
	var err error
	if *f.routerConfig != "" {
		if spec.RouterConfig, err = config.Load(*f.routerConfig); err != nil {
			return spec, nil, usageError{fmt.Errorf("--router-config: %w", err)}
		}
	}
	if *f.routerLog == "" {
		return spec, nil, nil
	}
	file, err := os.Create(*f.routerLog)
	if err != nil {
		return spec, nil, err
	}
	spec.Log = slog.New(router.NewLogHandler(file, nil)) // slog's JSON, the request line written directly
	return spec, file.Close, nil
}
