package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/term"

	"github.com/llm-ring/llm-ring/internal/config"
	"github.com/llm-ring/llm-ring/internal/experiment"
	"github.com/llm-ring/llm-ring/internal/model"
	"github.com/llm-ring/llm-ring/internal/policy"
	"github.com/llm-ring/llm-ring/internal/replica"
	"github.com/llm-ring/llm-ring/profiles"
)

// defaultRunSpeed is run's default model speed-up for embedded replicas: the
// standard profile's runs (about 25 minutes of model time each) then take
// about 75 seconds, and the runner's own overheads stay small in model time
// (see docs/notes/experiment.md).
const defaultRunSpeed = 50

// cmdRun replays the traffic of a profile through a router under each
// policy and records every request: embedded simulated replicas and router
// by default, or an existing router with --router URL.
func cmdRun(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("run", stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: llm-ring run --policies bounded llm-aware [--profile standard] [--seed 1 | --seeds 1-5 [--alternate]] [--out-dir DIR] [flags]\n\n")
		fs.PrintDefaults()
	}
	policies := fs.String("policies", "bounded,llm-aware", "policies to run, in order: space- or comma-separated ("+strings.Join(policy.Names(), ", ")+")")
	profile := fs.String("profile", "standard", "traffic profile: a JSON file, or an embedded profile name ("+strings.Join(profiles.Names(), ", ")+")")
	tracePath := fs.String("trace", "", "replay this JSONL trace (Mooncake/FAST'25 format, see profiles/README.md) instead of a profile: open loop, no conversation header")
	traceSpeedup := fs.Float64("trace-speedup", 1, "with --trace: divide the trace's timestamps by this")
	seed := fs.Int64("seed", 1, "traffic seed (one run per policy)")
	seeds := fs.String("seeds", "", "several seeds instead of --seed: a list or ranges, e.g. 1-5 or 1,2,3")
	alternate := fs.Bool("alternate", false, "reverse the policy order on every other seed")
	outDir := fs.String("out-dir", "results/raw", "folder for <run_id>.csv and <run_id>.json")
	force := fs.Bool("force", false, "overwrite runs already recorded in --out-dir")
	replicas := fs.Int("replicas", 3, "replicas at the start of a run (external mode: checked against the router when set)")
	speed := fs.Float64("speed", defaultRunSpeed, "model time runs this many times faster than wall time (use the replicas' speed with --router; 1 for real llama.cpp)")
	scaleAt := fs.Float64("scale-at", 0, "add a replica at this many seconds of model time into each run (0: no scale-up)")
	loadDelay := fs.Duration("load-delay", 20*time.Second, "model time the extra embedded replica takes to load its model")
	noHeaders := fs.Bool("no-headers", false, "send OpenAI-style bodies only, without x-conversation-id and x-turn (the router detects conversations itself)")
	replicaPreset := fs.String("replica-preset", model.PresetCPU, "embedded replicas' model: "+strings.Join(model.PresetNames(), ", ")+" (see internal/model/preset.go)")
	replicaAPI := fs.String("replica-api", replica.APILlamaCpp, "engine face of the embedded replicas: "+strings.Join(replica.APIs, ", ")+" (their answer shapes and /metrics names; the router's signals.engine follows)")
	sharedCPU := fs.Bool("shared-cpu", true, "embedded replicas share one compute budget, as on the seed's laptop")
	routerConfig := fs.String("router-config", "", "embedded router's configuration (YAML, as config/router.yaml; policy, listen and discovery are set per run)")
	routerLog := fs.String("router-log", "", "write the embedded router's JSON log (every decision with its trace) to this file")
	routerURL := fs.String("router", "", "drive an existing router at this URL instead of embedded replicas (its policy is switched through its admin API, --admin); several active-active instances: URL1,URL2,URL3 (turn t of a conversation goes to URL[(hash(conversation)+t) mod N])")
	adminURL := fs.String("admin", "", "with --router: the router's admin API (admin.listen), e.g. http://127.0.0.1:9090; with several router URLs, one admin URL per instance in the same order")
	adminTokenFile := fs.String("admin-token-file", "", "with --router: file holding the admin API's bearer token (the router's admin.token_file)")
	scaleCmd := fs.String("scale-cmd", "", "with --router: command adding the extra replica at --scale-at, e.g. \"kubectl scale statefulset/llm --replicas=4\"")
	unscaleCmd := fs.String("unscale-cmd", "", "with --router: command removing it after each run, e.g. \"kubectl scale statefulset/llm --replicas=3\"")
	prepare := fs.Bool("prepare", false, "with --router: add and remove the extra replica once before the first run (so runs pay a model load, not a download)")
	poll := fs.Duration("poll", 500*time.Millisecond, "with --router: how often to poll GET /replicas while waiting for a replica")
	if err := parseFlags(fs, gatherList(args, "policies")); err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })

	spec := experiment.Spec{
		Alternate:    *alternate,
		OutDir:       *outDir,
		Force:        *force,
		Replicas:     *replicas,
		Speed:        *speed,
		LoadDelay:    *loadDelay,
		NoHeaders:    *noHeaders,
		SharedCPU:    *sharedCPU,
		RouterURL:    *routerURL,
		AdminURL:     *adminURL,
		ScaleCmd:     *scaleCmd,
		UnscaleCmd:   *unscaleCmd,
		Prepare:      *prepare,
		PollInterval: *poll,
	}
	var err error
	if spec.Policies, err = parsePolicies(*policies); err != nil {
		return usageError{err}
	}
	if spec.Seeds, err = seedList(*seed, *seeds, set); err != nil {
		return usageError{err}
	}
	if spec.ScaleAt, err = modelSeconds("scale-at", *scaleAt); err != nil {
		return usageError{err}
	}
	switch {
	case *tracePath != "" && set["profile"]:
		return usageError{errors.New("give --profile or --trace, not both")}
	case *tracePath != "":
		if spec.Trace, err = loadTrace(*tracePath); err != nil {
			return usageError{fmt.Errorf("--trace: %w", err)}
		}
		spec.TraceName, spec.TraceSpeedup = filepath.Base(*tracePath), *traceSpeedup
	case set["trace-speedup"]:
		return usageError{errors.New("--trace-speedup applies to --trace only")}
	default:
		if spec.Profile, err = loadProfile(*profile); err != nil {
			return usageError{err}
		}
	}
	if *routerURL == "" {
		profileDefaults(&spec, set)
	}
	if *routerURL != "" {
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
	} else {
		for _, name := range []string{"scale-cmd", "unscale-cmd", "prepare", "poll", "admin", "admin-token-file"} {
			if set[name] {
				return usageError{fmt.Errorf("--%s applies to an external router only (give its URL with --router)", name)}
			}
		}
	}
	if set["replica-preset"] {
		if *routerURL != "" {
			return usageError{errors.New("--replica-preset applies to embedded replicas, not with --router")}
		}
		if spec.Model, err = model.Preset(*replicaPreset); err != nil {
			return usageError{fmt.Errorf("--replica-preset: %w", err)}
		}
	}
	spec.ReplicaPreset = *replicaPreset
	if *routerURL != "" {
		spec.ReplicaPreset = ""
	}
	if set["replica-api"] {
		if *routerURL != "" {
			return usageError{errors.New("--replica-api applies to embedded replicas, not with --router")}
		}
		if !slices.Contains(replica.APIs, *replicaAPI) {
			return usageError{fmt.Errorf("--replica-api: must be one of %s, got %q", strings.Join(replica.APIs, ", "), *replicaAPI)}
		}
		spec.ReplicaAPI = *replicaAPI
	}
	if *adminTokenFile != "" {
		b, err := os.ReadFile(*adminTokenFile)
		if err != nil {
			return usageError{fmt.Errorf("--admin-token-file: %w", err)}
		}
		if spec.AdminToken = strings.TrimSpace(string(b)); spec.AdminToken == "" {
			return usageError{fmt.Errorf("--admin-token-file: %s is empty", *adminTokenFile)}
		}
	}
	if *routerConfig != "" {
		if spec.RouterConfig, err = config.Load(*routerConfig); err != nil {
			return usageError{fmt.Errorf("--router-config: %w", err)}
		}
	}
	if *routerLog != "" {
		f, err := os.Create(*routerLog)
		if err != nil {
			return err
		}
		defer f.Close()
		spec.Log = slog.New(slog.NewJSONHandler(f, nil))
	}
	if err := spec.Validate(); err != nil {
		return usageError{err}
	}
	spec.Progress, spec.Terminal = stderr, isTerminal(stderr)
	results, err := experiment.Run(ctx, spec)
	for _, r := range results {
		fmt.Fprintf(stdout, "%s: %d requests, %d errors → %s, %s\n",
			r.File.RunID, r.File.Requests, r.File.Errors, r.CSVPath, r.JSONPath)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\nnext: llm-ring analyze --results-dir %s --out-dir DIR\n", spec.OutDir)
	return nil
}

// profileDefaults applies what a profile says about its replicas to the
// flags left at their defaults: a profile written for a replica count
// (hetero, churn) sets --replicas; its speeds and events need a CPU per
// replica (--shared-cpu=false) and its events replace a scale-up.
func profileDefaults(spec *experiment.Spec, set map[string]bool) {
	p := &spec.Profile
	if p.Replicas > 0 && !set["replicas"] {
		spec.Replicas = p.Replicas
	}
	if (len(p.ReplicaSpeeds) > 0 || len(p.ReplicaEvents) > 0) && !set["shared-cpu"] {
		spec.SharedCPU = false
	}
	if len(p.ReplicaEvents) > 0 && !set["scale-at"] {
		spec.ScaleAt = 0
	}
}

// gatherList lets a list flag take several words: "--policies bounded
// llm-aware --seed 1" becomes "--policies bounded,llm-aware --seed 1". The
// words after the flag, up to the next one starting with "-", join its value.
func gatherList(args []string, name string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return append(out, args[i:]...)
		}
		flagName, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || flagName != name {
			out = append(out, a)
			continue
		}
		var words []string
		if hasValue {
			words = append(words, value)
		}
		for i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
			i++
			words = append(words, args[i])
		}
		if len(words) == 0 {
			out = append(out, a) // let the flag package report the missing value
			continue
		}
		out = append(out, "--"+name+"="+strings.Join(words, ","))
	}
	return out
}

// parsePolicies reads a comma-separated list of policy names; "all" means
// every policy in canonical order.
func parsePolicies(s string) ([]string, error) {
	var out []string
	for p := range strings.SplitSeq(s, ",") {
		p = strings.TrimSpace(p)
		switch {
		case p == "":
			continue
		case p == "all":
			out = append(out, policy.Names()...)
		case p == "study":
			out = append(out, policy.StudyNames()...)
		default:
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("--policies: no policy given (known: " + strings.Join(policy.Names(), ", ") + ")")
	}
	seen := map[string]bool{}
	for _, p := range out {
		if !slices.Contains(policy.Names(), p) {
			return nil, fmt.Errorf("--policies: unknown policy %q (known: %s)", p, strings.Join(policy.Names(), ", "))
		}
		if seen[p] {
			return nil, fmt.Errorf("--policies: %q listed twice", p)
		}
		seen[p] = true
	}
	return out, nil
}

// seedList returns the seeds of --seeds, or else --seed.
func seedList(seed int64, seeds string, set map[string]bool) ([]int64, error) {
	if set["seeds"] {
		if set["seed"] {
			return nil, errors.New("give --seed or --seeds, not both")
		}
		list, err := experiment.ParseSeeds(seeds)
		if err != nil {
			return nil, fmt.Errorf("--seeds: %w", err)
		}
		return list, nil
	}
	return []int64{seed}, nil
}

// modelSeconds converts a flag's seconds into a duration.
func modelSeconds(name string, s float64) (time.Duration, error) {
	if !(s >= 0 && s <= 1e6) {
		return 0, fmt.Errorf("--%s: must be between 0 and 1e6 seconds, got %v", name, s)
	}
	return time.Duration(s * float64(time.Second)), nil
}

// isTerminal reports whether w is a terminal (the progress bar then redraws
// in place).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
