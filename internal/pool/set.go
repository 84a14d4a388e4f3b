package pool

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/llm-ring/llm-ring/internal/policy"
	"github.com/llm-ring/llm-ring/internal/replicaset"
)

// Set is the pools of one router, one per model served. It is safe for
// concurrent use; Resolve reads an immutable snapshot (swapped by
// SetReplicas) and is allocation-free (hot path).
type Set struct {
	cfg       Config
	rewrites  map[string]*rewrite
	maxLabels int
	newTable  NewTable
	catchAll  *Pool // always exists: the pool "" (legacy, and "nothing served yet")

	mu       sync.Mutex                 // writers: SetReplicas, SetReported, SetHealthy
	pools    map[string]*Pool           // every pool ever created, by model
	labelled int                        // pools given their own label so far
	member   map[string][]*Pool         // replica name → the pools it is a member of
	reported map[string]policy.Reported // each replica's last report
	down     map[string]bool            // replicas marked unhealthy
	snap     atomic.Pointer[snapshot]
}

// snapshot is what Resolve reads: replaced whole by SetReplicas.
type snapshot struct {
	served   map[string]*Pool      // base models with at least one member
	untagged map[string]*Pool      // NAME → the pool served as NAME:latest (ImplicitTag), when NAME is not served itself
	adapters map[string]adapterRef // adapter → its base: configured, then learned from replicas
	catchAll bool                  // the catch-all pool has members
	only     *Pool                 // the only pool with members (catch-all aside), or nil
	none     bool                  // no pool has any member
	models   []ModelInfo           // GET /v1/models, sorted by ID
	names    []string              // the IDs of models
}

// adapterRef is an adapter and its base model. name is the set's own
// string (a configuration key, or a replica's model entry), which Resolve
// hands out as Route.Adapter: the tables remember it without a copy, and
// it never holds on to a request's memory.
type adapterRef struct{ name, base string }

// New returns a Set for cfg with the catch-all pool (no replicas yet).
// newTable builds each pool's table when the pool is first needed. It
// validates cfg (errors name the rule, see Config.Validate).
func New(cfg Config, newTable NewTable) (*Set, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if newTable == nil {
		return nil, fmt.Errorf("pool.New: no table constructor")
	}
	s := &Set{
		cfg: cfg, rewrites: compile(cfg.Rewrites), maxLabels: cfg.MaxLabels, newTable: newTable,
		pools: map[string]*Pool{}, member: map[string][]*Pool{},
		reported: map[string]policy.Reported{}, down: map[string]bool{},
	}
	if s.maxLabels == 0 {
		s.maxLabels = DefaultMaxLabels
	}
	t, err := newTable("")
	if err != nil {
		return nil, fmt.Errorf("catch-all pool: %w", err)
	}
	s.catchAll = &Pool{model: "", label: "", table: t}
	s.pools[""] = s.catchAll
	s.snap.Store(s.build(nil, nil))
	return s, nil
}

// membership returns the pools replica r is a member of (sorted) and the
// adapters it lists with their parents.
func membership(r replicaset.Replica) (bases []string, adapters []replicaset.Model) {
	if r.Models == nil {
		return []string{""}, nil // unknown: serves anything
	}
	for _, m := range r.Models {
		base := m.Name
		if m.Parent != "" {
			base = m.Parent
			if !slices.Contains(adapters, m) {
				adapters = append(adapters, m)
			}
		}
		if base != "" && !slices.Contains(bases, base) {
			bases = append(bases, base)
		}
	}
	if r.AnyModel && !slices.Contains(bases, "") {
		bases = append(bases, "") // and whatever else a request names
	}
	slices.Sort(bases)
	return bases, adapters
}

// SetReplicas groups rs by model: a replica joins the pool of each base
// model it lists; an adapter entry (Parent != "") makes it a member of its
// Parent's pool and teaches the set that adapter → parent; a replica whose
// Models is nil joins the catch-all pool "" (it serves anything, as every
// replica did before pools; an empty, non-nil list serves nothing and joins
// no pool), and so does one with AnyModel besides its models' pools.
// Pools are created on first sight (newTable) and kept while empty (their
// memory survives a rollout). Each pool's
// Table gets its members (state.Table.SetReplicas). It returns the models
// whose membership changed, sorted. On an error (newTable failed) nothing
// is changed.
func (s *Set) SetReplicas(rs []replicaset.Replica) ([]string, error) {
	rs = replicaset.Normalize(rs)
	groups := map[string][]replicaset.Replica{}
	learned := map[string]string{}
	listing := map[string]int{}
	for _, r := range rs {
		bases, adapters := membership(r)
		for _, b := range bases {
			groups[b] = append(groups[b], r)
		}
		for _, a := range adapters {
			if _, ok := learned[a.Name]; !ok {
				learned[a.Name] = a.Parent
			}
			listing[a.Name]++
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.create(groups); err != nil {
		return nil, err
	}
	member := map[string][]*Pool{}
	var changed []string
	for _, model := range slices.Sorted(maps.Keys(s.pools)) {
		p := s.pools[model]
		for _, r := range groups[model] {
			if !slices.Contains(s.member[r.Name], p) {
				s.teach(p, r.Name) // joined: its report and health reach this pool's table
			}
			member[r.Name] = append(member[r.Name], p)
		}
		if p.table.SetReplicas(groups[model]) {
			changed = append(changed, model)
		}
		p.members.Store(int64(len(groups[model])))
	}
	s.member = member
	s.snap.Store(s.build(learned, listing))
	return changed, nil
}

// create makes the pools of groups that do not exist yet, in model order,
// all or none.
func (s *Set) create(groups map[string][]replicaset.Replica) error {
	var fresh []*Pool
	for _, model := range slices.Sorted(maps.Keys(groups)) {
		if s.pools[model] != nil {
			continue
		}
		t, err := s.newTable(model)
		if err != nil {
			return fmt.Errorf("pool %q: %w", model, err)
		}
		fresh = append(fresh, &Pool{model: model, table: t})
	}
	for _, p := range fresh {
		p.label = OtherLabel
		if s.labelled < s.maxLabels {
			p.label = p.model
			s.labelled++
		}
		s.pools[p.model] = p
	}
	return nil
}

// teach hands a replica's last report and health to a pool it joins. The
// caller holds s.mu.
func (s *Set) teach(p *Pool, name string) {
	if r, ok := s.reported[name]; ok {
		p.table.SetReported(name, r)
	}
	p.table.SetHealthy(name, !s.down[name])
}

// build makes Resolve's snapshot from the pools' members (s.mu held):
// learned are the adapters the replicas list (→ their parent), listing
// counts the replicas listing each.
func (s *Set) build(learned map[string]string, listing map[string]int) *snapshot {
	sn := &snapshot{served: map[string]*Pool{}, catchAll: s.catchAll.Replicas() > 0,
		adapters: make(map[string]adapterRef, len(s.cfg.Adapters)+len(learned))}
	for a, base := range learned {
		sn.adapters[a] = adapterRef{name: a, base: base}
	}
	for a, base := range s.cfg.Adapters {
		sn.adapters[a] = adapterRef{name: a, base: base} // configured in advance: the configuration wins
	}
	for model, p := range s.pools {
		if model != "" && p.Replicas() > 0 {
			sn.served[model] = p
			sn.models = append(sn.models, ModelInfo{ID: model, Replicas: p.Replicas()})
		}
	}
	for a, n := range listing {
		if _, configured := s.cfg.Adapters[a]; !configured {
			sn.models = append(sn.models, ModelInfo{ID: a, Parent: learned[a], Replicas: n})
		}
	}
	for a, base := range s.cfg.Adapters {
		if p := sn.served[base]; p != nil {
			sn.models = append(sn.models, ModelInfo{ID: a, Parent: base, Replicas: p.Replicas()})
		}
	}
	slices.SortFunc(sn.models, func(a, b ModelInfo) int { return strings.Compare(a.ID, b.ID) })
	sn.models = slices.CompactFunc(sn.models, func(a, b ModelInfo) bool { return a.ID == b.ID })
	for _, m := range sn.models {
		sn.names = append(sn.names, m.ID)
	}
	if len(sn.served) == 1 && !sn.catchAll {
		for _, p := range sn.served {
			sn.only = p
		}
	}
	sn.none = len(sn.served) == 0 && !sn.catchAll
	for model, p := range sn.served {
		if bare, ok := strings.CutSuffix(model, ImplicitTag); ok && bare != "" && sn.served[bare] == nil {
			if sn.untagged == nil {
				sn.untagged = map[string]*Pool{}
			}
			sn.untagged[bare] = p
		}
	}
	return sn
}

// ImplicitTag is the tag a model name without one means, as Ollama (and
// the image registries its names follow) read it: a request for "llama3"
// is served by the pool of "llama3:latest", the name Ollama's /api/tags
// lists, unless "llama3" is served itself. The request keeps the name it
// gave (Ollama accepts both).
const ImplicitTag = ":latest"

// SetReported records what a replica reported about itself into every
// pool holding it (and remembers it for the pools it joins later).
func (s *Set) SetReported(replica string, r policy.Reported) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reported[replica] = r
	for _, p := range s.member[replica] {
		p.table.SetReported(replica, r)
	}
}

// SetHealthy records a replica's health into every pool holding it (and
// remembers it for the pools it joins later). It reports whether anything
// changed.
func (s *Set) SetHealthy(replica string, healthy bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	changed := s.down[replica] == healthy
	if healthy {
		delete(s.down, replica)
	} else {
		s.down[replica] = true
	}
	for _, p := range s.member[replica] {
		if p.table.SetHealthy(replica, healthy) {
			changed = true
		}
	}
	return changed
}

// Pools returns every pool, sorted by model (the catch-all "" first).
func (s *Set) Pools() []*Pool {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*Pool, 0, len(s.pools))
	for _, model := range slices.Sorted(maps.Keys(s.pools)) {
		out = append(out, s.pools[model])
	}
	return out
}

// Reset resets every pool's table (state.Table.Reset: placement memory
// and idle adapters forgotten, in-flight load kept), so that an experiment
// run starts as a fresh router would.
func (s *Set) Reset() {
	for _, p := range s.Pools() {
		p.table.Reset()
	}
}

// Pool returns the pool of model ("" the catch-all), nil when none.
func (s *Set) Pool(model string) *Pool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pools[model]
}

// Models returns the models served (GET /v1/models): every base model with
// members and every adapter (learned from the replicas' lists, or
// configured in advance for a base model with members), sorted by ID. The
// catch-all pool is not a model: it is absent.
func (s *Set) Models() []ModelInfo {
	return slices.Clone(s.snap.Load().models)
}
