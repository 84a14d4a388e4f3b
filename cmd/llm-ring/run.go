package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"golang.org/x/term"

	"github.com/llm-ring/llm-ring/internal/experiment"
	"github.com/llm-ring/llm-ring/internal/policy"
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
	var fl runFlags
	fl.register(fs)
	if err := parseFlags(fs, gatherList(args, "policies")); err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	spec, closeLog, err := fl.spec(set)
	if closeLog != nil {
		defer closeLog()
	}
	if err != nil {
		return err
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
	fmt.Fprintf(stdout, "\nnext: llm-ring analyze --results-dir %s --out-dir DIR (summary, and the field metrics: TTFT/TPOT percentiles, goodput at --slo-ttft/--slo-tpot, per stage for a --workload)\n", spec.OutDir)
	return nil
}

// profileDefaults applies what a profile says about its replicas to the
// flags left at their defaults: a profile written for a replica count
// (hetero, churn) sets --replicas; its speeds and events need a CPU per
// replica (--shared-cpu=false) and its events replace a scale-up.
func profileDefaults(spec *experiment.Spec, set map[string]bool) {
	if spec.Workload != nil && !set["shared-cpu"] {
		spec.SharedCPU = false // open loop: replicas of a fleet, each with compute of its own (as llm-ring sim)
	}
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
