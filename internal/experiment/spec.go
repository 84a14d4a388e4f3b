package experiment

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/llm-ring/llm-ring/internal/config"
	"github.com/llm-ring/llm-ring/internal/model"
	"github.com/llm-ring/llm-ring/internal/policy"
	"github.com/llm-ring/llm-ring/internal/record"
	"github.com/llm-ring/llm-ring/internal/replica"
	"github.com/llm-ring/llm-ring/internal/replicaset"
	"github.com/llm-ring/llm-ring/internal/traffic"
)

// Modes, as written in record.Run.Mode and in run ids.
const (
	ModeEmbedded = "live"     // fresh simulated replicas and router in-process
	ModeExternal = "external" // an existing router (Spec.RouterURL)
)

// Spec is one invocation of the runner: every run it makes, and how.
type Spec struct {
	// Policies are run in this order for each seed (reversed on every other
	// seed when Alternate is set). Names as policy.Names.
	Policies []string
	// Seeds are the traffic seeds, in order. Each seed gives the same
	// conversations under every policy.
	Seeds []int64
	// Alternate reverses the policy order on every other seed (the 2nd,
	// 4th, …), so that no policy always runs first, on a cold machine.
	Alternate bool
	// Profile is the traffic shape (unused, except its replica keys, when
	// Trace is set).
	Profile traffic.Profile
	// Trace, if set, replaces the profile's conversations: each request is
	// sent open loop at its timestamp divided by TraceSpeedup (model time),
	// with no conversation header, as one user message of its synthesized
	// text (traffic.TraceText) and max_tokens = output_length.
	Trace []traffic.TraceRequest
	// TraceName names the trace in run records (e.g. its file name).
	TraceName string
	// TraceSpeedup divides the trace's timestamps (1: as recorded).
	TraceSpeedup float64
	// Workload, if set, replaces the profile with an open-loop workload
	// (issue 19): for each seed its requests under Stages
	// (traffic.OpenArrivals) are sent open loop as a trace is, each named
	// by its stage (traffic.StageConversation) so that the analysis splits
	// the run into stages (per_stage.csv). Trace must be nil.
	Workload *traffic.Workload
	// Stages are the workload's rates, stage length and warm-up.
	Stages traffic.Stages
	// names and ideal are set per seed from Workload (seedWorkload): each
	// trace request's conversation name, and the ideal cached share of the
	// whole run then of each stage.
	names []string
	ideal []float64
	// Replicas is the number of replicas at the start of a run (embedded
	// mode; in external mode the router's replica set is used, and a
	// non-zero Replicas must match it).
	Replicas int
	// Speed is how many times faster than the wall clock the replicas' model
	// time runs: embedded replicas are started with it, and the runner
	// multiplies every wall duration it measures by it and divides every
	// profile time (think times) by it. 1 for real llama.cpp replicas.
	Speed float64
	// ScaleAt is when (model time after the run's start) the extra replica
	// is started; 0 means no scale-up.
	ScaleAt time.Duration
	// LoadDelay is how long (model time) the embedded extra replica takes to
	// load its model before it answers /health with 200.
	LoadDelay time.Duration
	// NoHeaders sends OpenAI-style bodies only, without x-conversation-id
	// and x-turn, so the router must find conversations itself.
	NoHeaders bool
	// RequestModel is the requests' "model" field ("" leaves it out:
	// llama.cpp and the embedded replicas ignore it; Ollama requires it).
	RequestModel string
	// OutDir receives <run_id>.csv and <run_id>.json per run.
	OutDir string
	// Force overwrites runs already in OutDir instead of refusing.
	Force bool

	// Embedded mode.
	//
	// RouterConfig is the router's configuration (nil: DefaultRouterConfig).
	// Its policy is replaced by each run's, its discovery by the run's
	// replicas and its listen address by a loopback port.
	RouterConfig *config.Router
	// Model configures every simulated replica (zero: model.DefaultConfig()).
	Model model.Config
	// ReplicaPreset names Model's preset (model.Preset), for the records.
	ReplicaPreset string
	// ReplicaAPI is the engine whose HTTP face the embedded replicas wear
	// (replica.APIs: llamacpp, the default when empty, vllm or sglang). The
	// vLLM and SGLang faces report cached tokens (as with
	// --enable-prompt-tokens-details and --enable-cache-report), and the
	// router's metrics scraper reads that engine's names (signals.engine).
	ReplicaAPI string
	// SharedCPU makes the replicas share one compute budget, as the seed's
	// replicas on one laptop did: k busy replicas each run k times slower.
	SharedCPU bool

	// External mode.
	//
	// RouterURL is the base URL of an existing router's client listener
	// (the runner reads GET /replicas and GET /metrics there), or the
	// comma-separated URLs of several active-active instances: turn t of a
	// conversation goes to URL[(hash(conversation) + t) mod N], and the
	// metrics are summed over the instances.
	RouterURL string
	// AdminURL is the base URL of that router's admin API (its
	// admin.listen), where the policy is switched with PUT /admin/policy;
	// with several instances, one per instance, in the same order (each
	// instance keeps its own policy).
	AdminURL string
	// AdminToken is the admin API's bearer token (never recorded).
	AdminToken string
	// ScaleCmd adds the extra replica (run with sh -c at ScaleAt), e.g.
	// "kubectl scale statefulset/llm --replicas=4"; the replica is ready when
	// it appears in the router's GET /replicas.
	ScaleCmd string
	// UnscaleCmd removes it after each run; the runner then waits until the
	// router's replica set is back to what it was at the run's start.
	UnscaleCmd string
	// Prepare runs ScaleCmd once before the first run, waits for the replica
	// to appear, then runs UnscaleCmd and waits for it to leave: the extra
	// replica's image and model are then on its node, so every run's
	// scale-up costs a model load, never a download.
	Prepare bool
	// PollInterval is how often the external router's GET /replicas is
	// polled while waiting for a replica (0: 500 ms).
	PollInterval time.Duration

	// Progress receives the progress bar and notes (nil: none).
	Progress io.Writer
	// Terminal redraws the progress bar in place (\r) a few times a second;
	// otherwise a line is printed every 10 %.
	Terminal bool
	// OnRequest, if set, is called with every recorded request, from the
	// goroutine of the user that sent it (it must be safe for concurrent
	// use and return quickly).
	OnRequest func(*record.Request)
	// Log receives the embedded router's JSON log lines with every routing
	// decision and its trace (nil: discarded).
	Log *slog.Logger

	// exec runs a scale command (nil: sh -c). Tests replace it.
	exec func(ctx context.Context, cmd string) error
}

// RouterURLs is RouterURL split at commas (spaces trimmed).
func (s *Spec) RouterURLs() []string { return splitURLs(s.RouterURL) }

// AdminURLs is AdminURL split at commas (spaces trimmed).
func (s *Spec) AdminURLs() []string { return splitURLs(s.AdminURL) }

func splitURLs(list string) []string {
	var out []string
	for u := range strings.SplitSeq(list, ",") {
		out = append(out, strings.TrimSpace(u))
	}
	return out
}

// Mode returns ModeExternal when the spec drives an existing router, else
// ModeEmbedded.
func (s *Spec) Mode() string {
	if s.RouterURL != "" {
		return ModeExternal
	}
	return ModeEmbedded
}

// Validate checks the spec; every problem is reported, in the order of
// the checks below.
func (s *Spec) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	s.validateRuns(bad)
	s.validateTraffic(bad)
	pr := &s.Profile
	scenario := len(pr.ReplicaSpeeds) > 0 || len(pr.ReplicaEvents) > 0
	if scenario && s.Replicas != pr.Replicas {
		bad("profile %s is written for %d replicas (its replica_speeds and replica_events name them), got %d", pr.Name, pr.Replicas, s.Replicas)
	}
	if len(pr.ReplicaEvents) > 0 && s.ScaleAt > 0 {
		bad("profile %s has replica events: give them or a scale-up time, not both", pr.Name)
	}
	if s.Mode() == ModeEmbedded {
		s.validateEmbedded(bad, scenario)
	} else {
		s.validateExternal(bad, scenario)
	}
	return errors.Join(errs...)
}

// problem reports one problem of a spec.
type problem func(format string, args ...any)

// validateRuns checks what is run: policies, seeds, the replicas' API.
func (s *Spec) validateRuns(bad problem) {
	if len(s.Policies) == 0 {
		bad("no policy to run")
	}
	seen := map[string]bool{}
	for _, p := range s.Policies {
		if !slices.Contains(policy.Names(), p) {
			bad("unknown policy %q (known: %s)", p, strings.Join(policy.Names(), ", "))
		} else if seen[p] {
			bad("policy %q listed twice", p)
		}
		seen[p] = true
	}
	if len(s.Seeds) == 0 {
		bad("no seed to run")
	}
	if s.ReplicaAPI != "" && !slices.Contains(replica.APIs, s.ReplicaAPI) {
		bad("replica API must be one of %s, got %q", strings.Join(replica.APIs, ", "), s.ReplicaAPI)
	}
	seeds := map[int64]bool{}
	for _, sd := range s.Seeds {
		if seeds[sd] {
			bad("seed %d listed twice", sd)
		}
		seeds[sd] = true
	}
}

// validateTraffic checks the traffic and the run's timing and output.
func (s *Spec) validateTraffic(bad problem) {
	if s.Workload != nil {
		if s.Trace != nil {
			bad("a workload and a trace: give one")
		}
		if err := s.Workload.Validate(); err != nil {
			bad("workload %s: %v", s.Workload.Name, err)
		}
		if err := s.Stages.Validate(); err != nil {
			bad("workload stages: %v", err)
		}
	} else if s.Trace != nil {
		if len(s.Trace) == 0 {
			bad("the trace has no request")
		}
		if !(s.TraceSpeedup > 0) || math.IsInf(s.TraceSpeedup, 0) {
			bad("trace speed-up must be a positive number, got %v", s.TraceSpeedup)
		}
	} else if err := s.Profile.Validate(); err != nil {
		bad("profile %s: %v", s.Profile.Name, err)
	}
	if !(s.Speed > 0) || math.IsInf(s.Speed, 0) {
		bad("speed must be a positive number, got %v", s.Speed)
	}
	if s.ScaleAt < 0 {
		bad("scale-at must not be negative, got %v", s.ScaleAt)
	}
	if s.LoadDelay < 0 {
		bad("load delay must not be negative, got %v", s.LoadDelay)
	}
	if s.OutDir == "" {
		bad("no output folder")
	}
}

// validateEmbedded checks a run with in-process router and replicas.
func (s *Spec) validateEmbedded(bad problem, scenario bool) {
	pr := &s.Profile
	if s.Replicas < 1 || s.Replicas > 1000 {
		bad("replicas must be between 1 and 1000, got %d", s.Replicas)
	}
	if scenario && s.SharedCPU {
		bad("profile %s sets replica speeds or events, which need a CPU per replica: run without shared CPU", pr.Name)
	}
	if s.ScaleCmd != "" || s.UnscaleCmd != "" || s.Prepare {
		bad("scale and unscale commands and prepare apply to an external router only (set its URL)")
	}
	if s.Model != (model.Config{}) {
		if err := s.Model.Validate(); err != nil {
			bad("replica model: %v", err)
		}
	}
	if s.RouterConfig != nil {
		if err := s.RouterConfig.Validate(); err != nil {
			bad("router config: %v", err)
		}
	}
}

// validateExternal checks a run against a deployed router.
func (s *Spec) validateExternal(bad problem, scenario bool) {
	pr := &s.Profile
	urls := s.RouterURLs()
	for _, u := range urls {
		if err := replicaset.Validate([]replicaset.Replica{{Name: "router", URL: u}}); err != nil {
			bad("router URL %q: must be an absolute http(s) URL", u)
		}
	}
	if s.AdminURL == "" {
		bad("an external router needs its admin API's URL (--admin: the router's admin.listen) to switch policies")
	} else {
		admins := s.AdminURLs()
		for _, u := range admins {
			if err := replicaset.Validate([]replicaset.Replica{{Name: "admin", URL: u}}); err != nil {
				bad("admin URL %q: must be an absolute http(s) URL", u)
			}
		}
		if len(admins) != len(urls) {
			bad("%d router URLs but %d admin URLs: give one admin API URL per router instance, in the same order (--admin URL1,URL2,...)", len(urls), len(admins))
		}
	}
	if s.Replicas < 0 {
		bad("replicas must not be negative, got %d", s.Replicas)
	}
	if scenario {
		bad("profile %s sets replica speeds or events, which only embedded replicas can follow (the runner does not control an external router's replicas)", pr.Name)
	}
	if s.ScaleAt > 0 && (s.ScaleCmd == "" || s.UnscaleCmd == "") {
		bad("a scale-up on an external router needs both a scale command and an unscale command " +
			"(so that every run starts with the same replicas)")
	}
	if s.Prepare && (s.ScaleCmd == "" || s.UnscaleCmd == "") {
		bad("prepare needs both a scale command and an unscale command")
	}
	if s.RouterConfig != nil {
		bad("a router config applies to the embedded router only; an external router has its own")
	}
}

// TrafficName is what the run records name as the profile: the profile's
// name, or "trace:<name>" for a trace.
func (s *Spec) TrafficName() string {
	if s.Workload != nil {
		return "workload:" + s.Workload.Name
	}
	if s.Trace != nil {
		return "trace:" + s.TraceName
	}
	return s.Profile.Name
}

// Planned is one run of an invocation.
type Planned struct {
	RunID  string // "s<seed>-<policy>-<mode>", e.g. "s1-bounded-live"
	Policy string
	Seed   int64
	Order  int // position in the invocation, from 0
}

// Plan returns the runs of an invocation in order: seed by seed, the policies
// in the given order, reversed on every other seed (the 2nd, 4th, …) when
// alternate is set.
func Plan(policies []string, seeds []int64, alternate bool, mode string) []Planned {
	var out []Planned
	for i, seed := range seeds {
		order := slices.Clone(policies)
		if alternate && i%2 == 1 {
			slices.Reverse(order)
		}
		for _, p := range order {
			out = append(out, Planned{RunID: RunID(seed, p, mode), Policy: p, Seed: seed, Order: len(out)})
		}
	}
	return out
}

// RunID names a run: "s<seed>-<policy>-<mode>".
func RunID(seed int64, policy, mode string) string {
	return fmt.Sprintf("s%d-%s-%s", seed, policy, mode)
}

// maxSeeds bounds a seed list, against typing mistakes such as "1-100000".
const maxSeeds = 1000

// ParseSeeds reads a seed list: comma-separated seeds (non-negative
// integers) or inclusive ranges, such as "1-5", "1,2,3" or "1-3,7". Errors
// name the bad item.
func ParseSeeds(s string) ([]int64, error) {
	if strings.TrimSpace(s) == "" {
		return nil, errors.New("empty seed list (want e.g. 1-5 or 1,2,3)")
	}
	var out []int64
	seen := map[int64]bool{}
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		lo, hi, isRange := strings.Cut(item, "-")
		if !isRange {
			hi = lo
		}
		a, errA := strconv.ParseUint(strings.TrimSpace(lo), 10, 63)
		b, errB := strconv.ParseUint(strings.TrimSpace(hi), 10, 63)
		switch {
		case item == "":
			return nil, fmt.Errorf("seed list %q: empty item", s)
		case errA != nil || errB != nil:
			return nil, fmt.Errorf("seed list %q: %q is not a seed or a range of seeds (want e.g. 1-5 or 1,2,3)", s, item)
		case b < a:
			return nil, fmt.Errorf("seed list %q: range %q goes down", s, item)
		case b-a >= maxSeeds || len(out)+int(b-a+1) > maxSeeds:
			return nil, fmt.Errorf("seed list %q: more than %d seeds", s, maxSeeds)
		}
		for v := int64(a); v <= int64(b); v++ {
			if seen[v] {
				return nil, fmt.Errorf("seed list %q: seed %d listed twice", s, v)
			}
			seen[v] = true
			out = append(out, v)
		}
	}
	return out, nil
}

// DefaultRouterConfig is the embedded router's configuration: the shipped
// config/router.yaml (embedded in the binary) on a free loopback port; each
// run replaces its static replica list by its own replicas.
func DefaultRouterConfig() *config.Router {
	c, err := config.Default()
	if err != nil {
		panic(err) // the shipped file is valid: internal/config's tests say so
	}
	c.Listen = "127.0.0.1:0"
	return c
}
