package main

import (
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/llm-ring/llm-ring/internal/analysis"
	"github.com/llm-ring/llm-ring/internal/sim"
	"github.com/llm-ring/llm-ring/internal/traffic"
	"github.com/llm-ring/llm-ring/profiles"
)

// workloadFlags are the open-loop flags of llm-ring sim.
type workloadFlags struct {
	workload, workloads, rates, arrival *string
	stage, warmup                       *time.Duration
	sloTTFT, sloTPOT                    *time.Duration
	adm                                 *admissionFlags
	affinity                            *bool // sim_pools.go
}

func defineWorkloadFlags(fs *flag.FlagSet) *workloadFlags {
	return &workloadFlags{
		workload: fs.String("workload", "", "an open-loop workload (embedded: "+strings.Join(profiles.WorkloadNames(), ", ")+
			", or a JSON file; see profiles/README.md) at --rates, instead of a profile's closed loop"),
		workloads: fs.String("workloads", "", "the open-loop arena: several workloads (comma-separated, or all), each a scenario "+
			"folder OUT-DIR/<name>/ with its per-stage table and TTFT p90 / goodput charts against the rate"),
		rates:    fs.String("rates", "1,2,4,8,16", "with --workload(s): arrival rates, requests per second, one stage each (multi-round: a new user every `rounds` requests)"),
		arrival:  fs.String("arrival", "poisson", "with --workload(s): poisson or constant inter-arrival gaps"),
		stage:    fs.Duration("stage-duration", 60*time.Second, "with --workload(s): model time of each rate's stage"),
		warmup:   fs.Duration("warmup", 10*time.Second, "with --workload(s): model time at the first rate before the stages, left out of every metric"),
		sloTTFT:  fs.Duration("slo-ttft", time.Second, "goodput SLO: time to first token"),
		sloTPOT:  fs.Duration("slo-tpot", 100*time.Millisecond, "goodput SLO: time per output token after the first"),
		adm:      defineAdmissionFlags(fs),
		affinity: definePoolFlags(fs),
	}
}

// openLoop is a parsed open-loop load: a workload under stages.
type openLoop struct {
	w        traffic.Workload
	stages   traffic.Stages
	affinity *bool // --adapter-affinity if given (sim_pools.go)
}

// seedTraffic is the profile, sources (one per run, sharing the requests'
// texts and tokens) and ideal cached share of one seed's runs of the
// workload.
func (ol *openLoop) seedTraffic(seed int64) (traffic.Profile, func() sim.Source, []float64, error) {
	reqs := ol.w.Requests(traffic.OpenArrivals(ol.stages, seed), seed)
	p, src, err := sim.WorkloadRun(ol.w.Name, reqs)
	if err != nil {
		return traffic.Profile{}, nil, nil, err
	}
	all, by := traffic.IdealCachedShareByStage(reqs)
	return p, src, append([]float64{all}, by...), nil
}

// parse reads the workload flags; it returns nil loads when none is given.
func (wf *workloadFlags) parse(set map[string]bool) ([]*openLoop, error) {
	if *wf.workload == "" && *wf.workloads == "" {
		for _, name := range []string{"rates", "arrival", "stage-duration", "warmup", "adapter-affinity"} {
			if set[name] {
				return nil, fmt.Errorf("--%s: only with --workload or --workloads", name)
			}
		}
		return nil, nil
	}
	if *wf.workload != "" && *wf.workloads != "" {
		return nil, errors.New("--workload and --workloads: give one (--workloads runs the arena)")
	}
	for _, name := range []string{"profile", "profiles", "trace"} {
		if set[name] {
			return nil, fmt.Errorf("--%s and --workload(s): give one (a workload replaces the profile)", name)
		}
	}
	st, err := parseStages(*wf.rates, *wf.arrival, *wf.stage, *wf.warmup)
	if err != nil {
		return nil, err
	}
	if *wf.sloTTFT <= 0 || *wf.sloTPOT <= 0 {
		return nil, errors.New("--slo-ttft and --slo-tpot: must be positive")
	}
	names := []string{*wf.workload}
	if *wf.workloads != "" {
		names = nil
		for _, n := range strings.Split(*wf.workloads, ",") {
			if n = strings.TrimSpace(n); n == "all" {
				names = append(names, profiles.WorkloadNames()...)
			} else if n != "" {
				names = append(names, n)
			}
		}
	}
	var out []*openLoop
	seen := map[string]bool{}
	var affinity *bool
	if set["adapter-affinity"] {
		affinity = wf.affinity
	}
	for _, n := range names {
		w, err := loadWorkload(n)
		if err != nil {
			return nil, fmt.Errorf("--workload: %w", err)
		}
		if seen[w.Name] {
			return nil, fmt.Errorf("--workloads: %q given twice", w.Name)
		}
		seen[w.Name] = true
		out = append(out, &openLoop{w: w, stages: st, affinity: affinity})
	}
	return out, nil
}

// apply reads the workload flags into o (o.open stays nil without
// --workload or --workloads).
func (wf *workloadFlags) apply(o *simOptions, set map[string]bool) error {
	var err error
	if o.open, err = wf.parse(set); err != nil {
		return usageError{err}
	}
	o.slo = analysis.SLO{TTFTMS: float64(*wf.sloTTFT) / 1e6, TPOTMS: float64(*wf.sloTPOT) / 1e6}
	if err := wf.adm.apply(o, set); err != nil {
		return usageError{err}
	}
	if o.open != nil {
		o.openArena = *wf.workloads != ""
		if !set["shared-cpu"] {
			o.shared = false // open loop: replicas of a fleet, each with compute of its own
		}
	}
	return nil
}

// parseStages reads the open-loop stage flags (--rates, --arrival,
// --stage-duration, --warmup), shared by llm-ring sim and llm-ring run.
func parseStages(rates, arrival string, stage, warmup time.Duration) (traffic.Stages, error) {
	st := traffic.Stages{StageS: stage.Seconds(), WarmupS: warmup.Seconds()}
	switch arrival {
	case "poisson":
		st.Poisson = true
	case "constant":
	default:
		return st, fmt.Errorf("--arrival: %q is not poisson or constant", arrival)
	}
	for _, f := range strings.Split(rates, ",") {
		r, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil {
			return st, fmt.Errorf("--rates: %q is not a number", f)
		}
		st.Rates = append(st.Rates, r)
	}
	if err := st.Validate(); err != nil {
		return st, fmt.Errorf("--rates/--stage-duration/--warmup: %w", err)
	}
	return st, nil
}
