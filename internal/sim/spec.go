package sim

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/llm-ring/llm-ring/internal/config"
	"github.com/llm-ring/llm-ring/internal/model"
	"github.com/llm-ring/llm-ring/internal/policy"
	"github.com/llm-ring/llm-ring/internal/replicaset"
	"github.com/llm-ring/llm-ring/internal/ring"
	"github.com/llm-ring/llm-ring/internal/strict"
	"github.com/llm-ring/llm-ring/internal/traffic"
)

// Spec is one simulated run: one policy, one seed, one traffic profile, one
// replica set.
type Spec struct {
	// RunID names the run's files and is written in every row.
	RunID string
	// Policy is a name from PolicyNames: a policy, or a variant of one
	// (llm-aware-no-memory, ...). It is recorded as the run's policy.
	Policy string
	// Seed selects the traffic (and nothing else).
	Seed int64
	// Order is the run's position in its invocation (record.Run.Order).
	Order int
	// Profile is the traffic shape (with any overrides already applied).
	Profile traffic.Profile
	// Replicas is the number of replicas at the start: llm-0, llm-1, ...
	Replicas int
	// Model configures every replica.
	Model model.Config
	// SharedCPU makes the replicas share one compute budget (processor
	// sharing: while k of them are busy, each one's steps take k× longer),
	// as the seed's replicas shared one laptop CPU.
	SharedCPU bool
	// Router holds the routing settings: PolicyParams and StateConfig are
	// used; the other keys (listen, discovery, upstream, ...) are not.
	Router config.Router
	// ScaleAt, when positive, starts an extra replica at that virtual time;
	// it joins the ring LoadDelay later, if the run is still going.
	ScaleAt   time.Duration
	LoadDelay time.Duration

	// Routers is the number of router instances (0 and 1: one), each with
	// its own view; a request goes to instance hash(conversation, turn)
	// mod Routers. With Gossip, what each instance learns (placement,
	// prefix inserts, in-flight load) reaches the others GossipDelay later
	// (routers.go).
	Routers     int
	Gossip      bool
	GossipDelay time.Duration
	// GossipBatch, when positive, models the live node's batching
	// (flush_interval): load increases and prefix inserts wait
	// GossipBatch more; turns and releases do not, and take everything
	// held with them. 0: every change waits GossipDelay alone.
	GossipBatch time.Duration

	// Source, when set, replaces the profile's generator (tests use it for
	// hand-made conversations). Profile still gives the number of
	// conversations, the users and the context budget.
	Source Source
	// IdealCachedShare, when positive, is the traffic's ideal cached share
	// (traffic.IdealCachedShare), recorded in the run's metrics as
	// sim_ideal_cached_share for the analysis.
	IdealCachedShare float64
	// IdealByStage is the same per stage of an open-loop load, recorded as
	// sim_ideal_cached_share{stage="K"}.
	IdealByStage []float64
	// Hash, when set, replaces the ring's hash and the conversation-key
	// hash (tests inject a readable one); nil means xxhash64, as the router.
	Hash ring.Hash
	// Admission, when set, puts admission control in front of routing
	// (admit.go); nil: every request is routed at once, as before.
	Admission *Admission
	// Pools, when set, makes the replicas serve models (Pools.Fleet) and
	// routes each request through the pool of its model (pools.go); nil:
	// one routing table, every replica serving every request, as before.
	Pools *Pools
}

// Source produces conversation i of a run; *traffic.Generator is one.
type Source interface {
	Conversation(i int) traffic.Conversation
}

// ReplicaName is the name of replica i: llm-0, llm-1, ... The extra
// replica of a scale-up is ReplicaName(Replicas).
func ReplicaName(i int) string { return fmt.Sprintf("llm-%d", i) }

func simReplica(name string) replicaset.Replica {
	return replicaset.Replica{Name: name, URL: "sim://" + name}
}

// Validate reports the first problem of a spec, naming the setting.
func (s *Spec) Validate() error {
	var errs []error
	if s.RunID == "" {
		errs = append(errs, errors.New("run id: must not be empty"))
	}
	if s.Replicas < 1 {
		errs = append(errs, fmt.Errorf("replicas: must be at least 1, got %d", s.Replicas))
	}
	if s.ScaleAt < 0 {
		errs = append(errs, fmt.Errorf("scale-at: must not be negative, got %v", s.ScaleAt))
	}
	if s.LoadDelay < 0 {
		errs = append(errs, fmt.Errorf("load-delay: must not be negative, got %v", s.LoadDelay))
	}
	if s.Routers < 0 || s.Routers > 64 {
		errs = append(errs, fmt.Errorf("routers: must be between 1 and 64, got %d", s.Routers))
	}
	if s.GossipDelay < 0 {
		errs = append(errs, fmt.Errorf("gossip-delay: must not be negative, got %v", s.GossipDelay))
	}
	if s.GossipBatch < 0 {
		errs = append(errs, fmt.Errorf("gossip-batch: must not be negative, got %v", s.GossipBatch))
	}
	if err := s.Profile.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("profile %s: %w", s.Profile.Name, err))
	} else if len(s.Profile.ReplicaEvents) > 0 {
		if s.SharedCPU {
			errs = append(errs, fmt.Errorf("profile %s: replica events need a CPU per replica (--shared-cpu=false)", s.Profile.Name))
		}
		if err := traffic.ValidateReplicaEvents(s.Replicas, s.Profile.ReplicaEvents); err != nil {
			errs = append(errs, fmt.Errorf("profile %s with %d replicas: %w", s.Profile.Name, s.Replicas, err))
		}
	}
	if s.Admission != nil {
		if err := s.Admission.Validate(); err != nil {
			errs = append(errs, err)
		}
		if s.Routers > 1 {
			errs = append(errs, errors.New("admission: needs one router instance (--routers 1)"))
		}
	}
	if s.Pools != nil {
		errs = append(errs, s.Pools.validate(s)...)
	}
	if err := s.Model.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("model: %w", err))
	}
	if err := s.Router.ValidateRouting(); err != nil {
		errs = append(errs, err)
	} else if _, err := NewPolicy(s.Policy, &s.Router); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// DefaultRouter returns the routing settings of the shipped
// config/router.yaml (embedded in the binary: internal/config.Default).
func DefaultRouter() config.Router {
	c, err := config.Default()
	if err != nil {
		panic(err) // the shipped file is valid: internal/config's tests say so
	}
	return *c
}

// variant is a policy the simulator accepts by name: a registered policy
// with some of its settings changed (a JSON patch of its keys), for
// ablations.
type variant struct {
	name, base, doc string
	patch           string
}

// variants is the list of policy variants. It is never modified.
var variants = [...]variant{
	{"bounded-requests", "bounded", "bounded with load counted in requests", `{"load_unit":"requests"}`},
	{"bounded-tokens", "bounded", "bounded with load counted in tokens", `{"load_unit":"tokens"}`},
	{"llm-aware-no-cache", "llm-aware", "llm-aware without cache-aware token load", `{"cache_aware_load":false}`},
	{"llm-aware-no-memory", "llm-aware", "llm-aware without placement memory", `{"placement_memory":false}`},
	{"llm-aware-no-long", "llm-aware", "llm-aware without long-conversation stickiness", `{"long_stickiness":false}`},
	{"llm-aware-only-cache", "llm-aware", "llm-aware with cache-aware token load only",
		`{"cache_aware_load":true,"placement_memory":false,"long_stickiness":false}`},
	{"llm-aware-only-memory", "llm-aware", "llm-aware with placement memory only",
		`{"cache_aware_load":false,"placement_memory":true,"long_stickiness":false}`},
	{"llm-aware-only-long", "llm-aware", "llm-aware with long-conversation stickiness only",
		`{"cache_aware_load":false,"placement_memory":false,"long_stickiness":true}`},
}

// PolicyNames lists every name NewPolicy accepts: the registered policies
// (policy.Names), then the variants.
func PolicyNames() []string {
	out := policy.Names()
	for _, v := range variants {
		out = append(out, v.name)
	}
	return out
}

// DescribeVariants returns one line per variant: "name: description".
func DescribeVariants() []string {
	out := make([]string, len(variants))
	for i, v := range variants {
		out[i] = v.name + ": " + v.doc
	}
	return out
}

// Settings returns the settings run `name` uses: the policy's settings in
// r (its section of policies, over its defaults), with a variant's patch on
// top; and the registered policy's name.
func Settings(name string, r *config.Router) (base string, s policy.Settings, err error) {
	for _, v := range variants {
		if v.name != name {
			continue
		}
		if s, err = r.PolicySettings(v.base); err != nil {
			return "", nil, err
		}
		sp, _ := policy.Lookup(v.base)
		s, err = sp.Decode(s, []byte(v.patch))
		return v.base, s, err
	}
	if _, err := policy.Lookup(name); err != nil {
		return "", nil, fmt.Errorf("%w %q (want one of %s)", policy.ErrUnknownPolicy, name, strings.Join(PolicyNames(), ", "))
	}
	s, err = r.PolicySettings(name)
	return name, s, err
}

// NewPoolPolicy is NewPolicy for model's pool: the run's policy with the
// configuration's models.pools.MODEL.policies settings of it on top (as the
// live router's pools take them, config.Router.PoolPolicySettings).
func NewPoolPolicy(name, model string, r *config.Router) (policy.Policy, error) {
	base, s, err := Settings(name, r)
	if err != nil {
		return nil, err
	}
	if raw, ok := r.Models.Pools[model].Policies[base]; ok && s != nil {
		sp, _ := policy.Lookup(base)
		if s, err = sp.Decode(s, raw); err != nil {
			return nil, fmt.Errorf("models.pools.%s.policies.%s.%w", model, base, err)
		}
	}
	return policy.New(base, s)
}

// NewPolicy returns the policy called name (a registered policy or a
// variant) with its settings from r (llm-aware-no-memory is llm-aware with
// placement_memory off; the policy's own Name stays "llm-aware").
func NewPolicy(name string, r *config.Router) (policy.Policy, error) {
	base, s, err := Settings(name, r)
	if err != nil {
		return nil, err
	}
	return policy.New(base, s)
}

// replicaConfig is what a run's JSON records of its replicas' model: every
// key a model has, and the optional ones (a GPU engine's) where they are set,
// so a llama.cpp run's file stays as it was.
func replicaConfig(m model.Config, sharedCPU bool) map[string]any {
	out := strict.Fields(m)
	out["shared_cpu"] = sharedCPU
	return out
}

// runConfig is the free-form configuration recorded in a run's JSON: what a
// reader needs to rerun it.
func runConfig(s *Spec) map[string]any {
	_, set, _ := Settings(s.Policy, &s.Router) // validated
	prof := s.Profile
	out := map[string]any{
		"engine": "llm-ring sim (discrete-event, virtual time)",
		// The profile's required keys, named and valued as its file gives them
		// (the optional ones are left out: earlier runs' files stay the same).
		"profile": strict.Required(prof),
		"replica": replicaConfig(s.Model, s.SharedCPU),
		"router": map[string]any{
			"policy": s.Policy, "settings": policy.SettingsMap(set), "virtual_nodes": s.Router.VirtualNodes,
			// As the router's configuration names them (a config.Duration is
			// written as its string).
			"placement_memory": strict.Required(s.Router.PlacementMemory),
			"prefix_index":     strict.Required(s.Router.PrefixIndex),
			"signals_interval": s.Router.Signals.Interval.D().String(),
			"chars_per_token":  s.Router.CharsPerToken,
		},
		"scale_at_s":   s.ScaleAt.Seconds(),
		"load_delay_s": s.LoadDelay.Seconds(),
	}
	if s.Admission != nil { // absent without: earlier runs' files stay the same
		out["admission"] = admConfig(s.Admission)
	}
	if s.Pools != nil { // likewise
		out["pools"] = poolsConfig(s.Pools)
	}
	if s.Routers > 1 { // absent for one router: earlier runs' files stay the same
		out["routers"] = map[string]any{"instances": s.Routers, "gossip": s.Gossip, "gossip_delay": s.GossipDelay.String()}
		if s.GossipBatch > 0 {
			out["routers"].(map[string]any)["gossip_batch"] = s.GossipBatch.String()
		}
	}
	return out
}
