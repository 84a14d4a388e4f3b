package sim

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/llm-ring/llm-ring/internal/model"
	"github.com/llm-ring/llm-ring/internal/policy"
	"github.com/llm-ring/llm-ring/internal/pool"
	"github.com/llm-ring/llm-ring/internal/replicaset"
	"github.com/llm-ring/llm-ring/internal/state"
	"github.com/llm-ring/llm-ring/internal/strict"
	"github.com/llm-ring/llm-ring/internal/traffic"
)

// Many models (issue 23). With Spec.Pools the replicas serve models (each
// its own list, Fleet[i].Models) and the simulated router is a pool.Set,
// as the live router is: each request's model (the conversation's Model,
// or its Adapter, which the body names as vLLM clients do) is resolved by
// Set.Resolve(model, conversation hash) to a pool, and routed by that
// pool's own state.Table (its own ring, load, placement memory, prefix
// index and policy) with Input.Adapter set; the simulated scraper hands
// each replica's report, its LoRA adapters included, to Set.SetReported.
// Without Spec.Pools nothing of this runs: one table, as before pools.

// Pools is the many-model setup of a run.
type Pools struct {
	// Fleet lists the replicas: Fleet[i] is ReplicaName(i), and
	// Spec.Replicas must equal len(Fleet).
	Fleet []FleetReplica
	// Config is the models section, as internal/config resolves the
	// router's: default model, aliases, rewrites, adapters known in
	// advance (adapter -> base model).
	Config pool.Config
	// AdapterAffinity is state.Config.AdapterAffinity of every pool: route
	// an adapter's request to a replica with it resident, then one with a
	// free slot, ...; false: routing ignores adapters (the baseline).
	AdapterAffinity bool
}

// FleetReplica is one replica of a many-model fleet.
type FleetReplica struct {
	// Models is what it serves, as its GET /v1/models lists it.
	Models []replicaset.Model
	// Model is its engine and hardware (a preset of internal/model).
	Model model.Config
}

// WorkloadPools returns the pools of workload w's runs: its fleet, each
// replica the preset of its model (with the workload's adapter slots and
// load cost, and answerSeed for its answers), and the adapters
// known in advance; nil for a workload naming no models.
func WorkloadPools(w *traffic.Workload, affinity bool, answerSeed uint64) (*Pools, error) {
	if len(w.Models) == 0 {
		return nil, nil
	}
	p := &Pools{AdapterAffinity: affinity}
	for _, m := range w.Models {
		cfg, err := model.Preset(m.Preset)
		if err != nil {
			return nil, fmt.Errorf("workload %s: %w", w.Name, err)
		}
		cfg.Seed = answerSeed
		if a := w.Adapters; a != nil {
			cfg.MaxLoras = a.MaxLoRAs
			cfg.AdapterLoad = time.Duration(a.LoadMS * float64(time.Millisecond))
		}
		for range m.Replicas {
			p.Fleet = append(p.Fleet, FleetReplica{Models: []replicaset.Model{{Name: m.Name}}, Model: cfg})
		}
	}
	if names := w.AdapterNames(); names != nil {
		p.Config.Adapters = map[string]string{}
		for _, a := range names {
			p.Config.Adapters[a] = w.Models[0].Name
		}
	}
	if err := p.Config.Validate(); err != nil {
		return nil, fmt.Errorf("workload %s: %w", w.Name, err)
	}
	return p, nil
}

// validate checks p against the rest of the spec.
func (p *Pools) validate(s *Spec) []error {
	var errs []error
	if len(p.Fleet) != s.Replicas {
		errs = append(errs, fmt.Errorf("pools: the fleet has %d replicas, the spec %d", len(p.Fleet), s.Replicas))
	}
	for i, r := range p.Fleet {
		if len(r.Models) == 0 {
			errs = append(errs, fmt.Errorf("pools: replica %s serves no model", ReplicaName(i)))
		}
		if err := r.Model.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("pools: replica %s: model: %w", ReplicaName(i), err))
		}
	}
	if err := p.Config.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("pools: %w", err))
	}
	switch {
	case s.Routers > 1:
		errs = append(errs, errors.New("pools: need one router instance (--routers 1)"))
	case s.Admission != nil:
		errs = append(errs, errors.New("pools: admission control is not simulated with pools"))
	case s.ScaleAt > 0:
		errs = append(errs, errors.New("pools: no scale-up replica with pools (which model would it serve?)"))
	case len(s.Profile.ReplicaEvents) > 0:
		errs = append(errs, errors.New("pools: no replica events with pools"))
	}
	return errs
}

// newPools makes the run's pool.Set: each pool gets a table of its own
// with the run's settings, its own instance of the run's policy (with the
// configuration's models.pools.MODEL.policies settings of that policy on
// top, and the engine facts of the pool's replicas), and the adapter
// affinity of the spec. The policy is the run's in every pool: it is what
// a run compares (the live router takes models.pools.MODEL.policy too).
func (s *sim) newPools(scfg state.Config) error {
	p := s.spec.Pools
	scfg.AdapterAffinity = p.AdapterAffinity
	set, err := pool.New(p.Config, func(m string) (*state.Table, error) {
		rc := s.spec.Router
		rc.Facts = p.facts(m, s.spec.Model)
		pol, err := NewPoolPolicy(s.spec.Policy, m, &rc)
		if err != nil {
			return nil, err
		}
		return state.New(scfg, pol), nil
	})
	if err != nil {
		return fmt.Errorf("pools: %w", err)
	}
	s.set = set
	s.slotByName = map[string]int32{}
	return nil
}

// replicaModel is the model configuration of replica index i.
func (s *sim) replicaModel(i int) model.Config {
	if p := s.spec.Pools; p != nil {
		return p.Fleet[i].Model
	}
	return s.spec.Model
}

// setPoolMembers gives the set the replicas in s.up with their models, as
// discovery would.
func (s *sim) setPoolMembers() error {
	rs := make([]replicaset.Replica, len(s.up))
	clear(s.slotByName)
	for i, slot := range s.up {
		name := s.reps[slot].name
		rs[i] = simReplica(name)
		rs[i].Models = s.spec.Pools.Fleet[s.reps[slot].index].Models
		s.slotByName[name] = slot
	}
	_, err := s.set.SetReplicas(rs)
	return err
}

// poolRoute resolves the user's request to its pool: the table that
// routes it and the adapter it asks for. A model no pool serves is the
// router's 404 (err: its message).
func (s *sim) poolRoute(us *user) (*state.Table, string, error) {
	name := us.conv.Model
	if us.conv.Adapter != "" {
		name = us.conv.Adapter // the body names the adapter, as vLLM's clients do
	}
	rt, err := s.set.Resolve(name, us.hash)
	if err != nil {
		return nil, "", err
	}
	us.model = rt.Pool.Model()
	if us.model == "" { // the catch-all pool: the model as asked
		us.model = rt.Model
	}
	return rt.Pool.Table(), rt.Adapter, nil
}

// needsLoad tells whether a request of adapter a sent to replica r will
// have to load it: it is not resident there, and no request of it is in
// flight there (that one would load it first). An eviction between now
// and the request's start is not foreseen: the run's exact count is the
// model's (Stats.AdapterLoads), which TestPoolsLoadFlagsMatchModel
// compares with these flags.
func (s *sim) needsLoad(r int32, a string) bool {
	if a == "" {
		return false
	}
	ref := &s.reps[r]
	if slices.Contains(s.groups[ref.group].Server(int(ref.member)).ResidentAdapters(), a) {
		return false
	}
	for _, f := range s.flights[r] {
		if s.users[f.user].adapter == a {
			return false
		}
	}
	return true
}

// samplePools hands every replica's report to the set (every pool that
// holds it), its LoRA adapters included.
func (s *sim) samplePools() {
	for _, slot := range s.up {
		ref := &s.reps[slot]
		srv := s.groups[ref.group].Server(int(ref.member))
		l := srv.Load()
		s.set.SetReported(ref.name, policy.Reported{
			Running: float64(l.Processing), Waiting: float64(l.Deferred), KVUse: l.KVUsage,
			HasQueue: true, HasKV: true, At: int64(s.now), Adapters: srv.Adapters(),
		})
	}
}

// poolMetrics adds the adapter counters to a pools run's metrics: loads and
// evictions per model (a replica belongs to the pools of its models; the
// first one counts it).
func (s *sim) poolMetrics(m map[string]float64) {
	for _, ref := range s.reps {
		st := s.groups[ref.group].Server(int(ref.member)).Stats()
		name := s.spec.Pools.Fleet[ref.index].Models[0].Name
		m[fmt.Sprintf(`sim_adapter_loads_total{model="%s"}`, name)] += float64(st.AdapterLoads)
		m[fmt.Sprintf(`sim_adapter_evictions_total{model="%s"}`, name)] += float64(st.AdapterEvictions)
	}
}

// poolsConfig is what a pools run's JSON records of its fleet.
func poolsConfig(p *Pools) map[string]any {
	fleet := make([]any, len(p.Fleet))
	for i, r := range p.Fleet {
		names := make([]string, len(r.Models))
		for k, m := range r.Models {
			names[k] = m.Name
		}
		rec := strict.Fields(r.Model)
		rec["name"], rec["models"] = ReplicaName(i), names
		fleet[i] = rec
	}
	return map[string]any{"fleet": fleet, "adapter_affinity": p.AdapterAffinity, "default": p.Config.Default,
		"adapters_configured": len(p.Config.Adapters)}
}

// tableOf is the table that routed the user's request in flight.
func (s *sim) tableOf(us *user) *state.Table {
	if us.tab != nil {
		return us.tab
	}
	return s.tables[us.router]
}

// replicaIndex is the replica a ticket picked: by its position in the
// table's snapshot, or, with pools (each pool's snapshot its own), by name.
func (s *sim) replicaIndex(tk *state.Ticket) int32 {
	if s.set != nil {
		return s.slotByName[tk.Replica.Name]
	}
	return s.snapIdx[tk.Index]
}

// facts are the engine facts of model m's pool: those of the first replica
// of the fleet that serves it (a pool's replicas share a preset in the
// workloads), else def's (the catch-all pool).
func (p *Pools) facts(m string, def model.Config) policy.Facts {
	for _, r := range p.Fleet {
		for _, rm := range r.Models {
			if rm.Name == m || (rm.Parent == m && m != "") {
				return r.Model.Facts()
			}
		}
	}
	return def.Facts()
}
