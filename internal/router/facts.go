package router

import (
	"encoding/json"
	"log/slog"
	"maps"
	"reflect"
	"sync"

	"github.com/llm-ring/llm-ring/internal/config"
	"github.com/llm-ring/llm-ring/internal/policy"
	"github.com/llm-ring/llm-ring/internal/pool"
	"github.com/llm-ring/llm-ring/internal/signals"
	"github.com/llm-ring/llm-ring/internal/state"
)

// Engine facts of the live router (issue 19). A policy setting that is a
// fact about the engine (predictive's slots and cache_tokens, kv-cost's
// block_size: policy.FactTaker) takes it from what the pool's replicas
// report (signals.Sample.Slots, CacheTokens, BlockSize) unless the
// configuration (policies.NAME, models.pools.MODEL.policies.NAME) or a PUT
// /admin/policy set the key. A pool's fact is the smallest its replicas
// report: a pool has one policy for all its replicas, and a policy that
// counts on more cache than a replica has predicts hits that replica has
// already evicted; counting on less only makes it cautious. A fact no
// replica reports stays as configured.
//
// The facts change rarely (once, after the first scrapes; when a replica
// with another pool joins or leaves): then the pool's policy is rebuilt
// with them, off the request path (in the scraper's goroutine or on a
// membership change), and swapped in with Table.SetPolicy as the admin API
// does. A pick never waits on it and allocates nothing for it. A rebuilt
// policy starts afresh, as after a PUT /admin/policy.
type liveFacts struct {
	r *Router

	mu        sync.Mutex
	byReplica map[string]policy.Facts       // the last facts each replica reported
	applied   map[*state.Table]policy.Facts // the facts each pool's policy was built with
	put       map[*state.Table]adminPut     // what PUT /admin/policy set, per pool's table
	byModel   map[string]policy.Facts       // applied, by the pool's model (config: no pool.Set lock)
}

// adminPut is the settings keys PUT /admin/policy set for the pool's
// current policy: they win over the facts, as the configuration's do.
type adminPut struct {
	name string
	keys map[string]json.RawMessage
}

func newLiveFacts(r *Router) *liveFacts {
	return &liveFacts{r: r, byReplica: map[string]policy.Facts{},
		applied: map[*state.Table]policy.Facts{}, put: map[*state.Table]adminPut{}, byModel: map[string]policy.Facts{}}
}

// sampleFacts are the engine facts a scrape of a replica gave.
func sampleFacts(sm signals.Sample) policy.Facts {
	return policy.Facts{Slots: sm.Slots, CacheTokens: sm.CacheTokens, BlockSize: sm.BlockSize}
}

// report takes one scrape's outcome (signals.Sink): a replica's facts are
// kept across failed scrapes (an engine's pool does not shrink because one
// scrape timed out); new facts rebuild the pools' policies that change.
func (lf *liveFacts) report(name string, sm signals.Sample, ok bool) {
	f := sampleFacts(sm)
	if lf == nil || !ok || f == (policy.Facts{}) {
		return
	}
	lf.mu.Lock()
	same := lf.byReplica[name] == f
	if !same {
		lf.byReplica[name] = f
	}
	lf.mu.Unlock()
	if !same {
		lf.apply()
	}
}

// members sets the replicas known (a membership change): the facts of
// replicas gone are dropped, and the pools' policies follow.
func (lf *liveFacts) members(names []string) {
	if lf == nil {
		return
	}
	keep := make(map[string]bool, len(names))
	for _, n := range names {
		keep[n] = true
	}
	lf.mu.Lock()
	maps.DeleteFunc(lf.byReplica, func(n string, _ policy.Facts) bool { return !keep[n] })
	lf.mu.Unlock()
	lf.apply()
}

// apply rebuilds the policy of every pool whose facts changed. It holds
// the router's policy lock (r.mu, as PUT /admin/policy does), then lf.mu.
func (lf *liveFacts) apply() {
	r := lf.r
	r.mu.Lock()
	defer r.mu.Unlock()
	pools := r.pools.Pools()
	live := make(map[*state.Table]bool, len(pools))
	models := make(map[string]bool, len(pools))
	for _, p := range pools {
		live[p.Table()], models[p.Model()] = true, true
		f := lf.poolFacts(p)
		lf.mu.Lock()
		old, had := lf.applied[p.Table()]
		lf.applied[p.Table()], lf.byModel[p.Model()] = f, f
		lf.mu.Unlock()
		r.adm.kvTokens(p.Table(), f.CacheTokens) // admission's token_share (admit_facts.go)
		if had && old == f || !had && f == (policy.Facts{}) {
			continue
		}
		lf.rebuild(p, f)
	}
	lf.mu.Lock()
	maps.DeleteFunc(lf.applied, func(t *state.Table, _ policy.Facts) bool { return !live[t] })
	maps.DeleteFunc(lf.put, func(t *state.Table, _ adminPut) bool { return !live[t] })
	maps.DeleteFunc(lf.byModel, func(m string, _ policy.Facts) bool { return !models[m] })
	lf.mu.Unlock()
}

// poolFacts is the smallest of each fact over the pool's replicas that
// report it (0: none does).
func (lf *liveFacts) poolFacts(p *pool.Pool) policy.Facts {
	st := p.Table().Status()
	lf.mu.Lock()
	defer lf.mu.Unlock()
	var f policy.Facts
	for _, x := range st.Replicas {
		g, ok := lf.byReplica[x.Name]
		if !ok {
			continue
		}
		if g.CacheTokens > 0 && (f.CacheTokens == 0 || g.CacheTokens < f.CacheTokens) {
			f.CacheTokens = g.CacheTokens
		}
		if g.BlockSize > 0 && (f.BlockSize == 0 || g.BlockSize < f.BlockSize) {
			f.BlockSize = g.BlockSize
		}
		if g.Slots > 0 && (f.Slots == 0 || g.Slots < f.Slots) {
			f.Slots = g.Slots
		}
	}
	return f
}

// rebuild gives pool p its current policy again, its settings built from
// the configuration with facts f and the admin API's keys on top; nothing
// happens when the settings come out as they are (a policy with no fact
// keys, or every fact key set explicitly).
func (lf *liveFacts) rebuild(p *pool.Pool, f policy.Facts) {
	cur := p.Table().Policy()
	name := cur.Name()
	s, err := lf.settings(p, name, f)
	if err == nil && reflect.DeepEqual(s, policy.SettingsOf(cur)) {
		return
	}
	var pol policy.Policy
	if err == nil {
		pol, err = policy.New(name, s)
	}
	if err != nil {
		lf.r.log.Warn("policy_facts_rejected", slog.String("model", p.Model()), slog.String("policy", name),
			slog.Any("facts", f), slog.String("error", err.Error()))
		return
	}
	p.Table().SetPolicy(pol)
	lf.r.log.Info("policy_facts", slog.String("model", p.Model()), slog.String("policy", name),
		slog.Any("facts", f), slog.Any("settings", policy.SettingsMap(s)))
}

// settings are policy name's settings in pool p with facts f: the
// configuration's (PoolPolicySettings, whose explicit keys win over f),
// then the keys PUT /admin/policy set for that policy.
func (lf *liveFacts) settings(p *pool.Pool, name string, f policy.Facts) (policy.Settings, error) {
	s, err := lf.r.cfg.WithFacts(f).PoolPolicySettings(p.Model(), name)
	if err != nil {
		return nil, err
	}
	lf.mu.Lock()
	put := lf.put[p.Table()]
	lf.mu.Unlock()
	if put.name != name || len(put.keys) == 0 {
		return s, nil
	}
	raw, err := json.Marshal(put.keys)
	if err != nil {
		return nil, err
	}
	sp, err := policy.Lookup(name)
	if err != nil {
		return nil, err
	}
	return sp.Decode(s, raw)
}

// config is the configuration with the facts the policy of model's pool
// was built with (nil when none): a PUT /admin/policy that switches the
// pool's policy starts from it, so the new policy takes the facts too. It
// takes no lock of the pool.Set: a pool being created (under that lock)
// asks it.
func (lf *liveFacts) config(model string) *config.Router {
	if lf == nil {
		return nil
	}
	lf.mu.Lock()
	f, ok := lf.byModel[model]
	lf.mu.Unlock()
	if !ok {
		return nil
	}
	return lf.r.cfg.WithFacts(f)
}

// putSettings records the keys of a PUT /admin/policy's settings (a JSON
// object, validated by then) for policy name of the pool whose table is t
// (a pool created after a PUT for every pool gets its keys too): they win
// over the facts at the next rebuild. A switch to another policy forgets
// the keys set for the previous one.
func (lf *liveFacts) putSettings(t *state.Table, name string, settings json.RawMessage) {
	if lf == nil {
		return
	}
	var keys map[string]json.RawMessage
	_ = json.Unmarshal(settings, &keys) // Decode accepted it: an object, or empty
	lf.mu.Lock()
	defer lf.mu.Unlock()
	put := lf.put[t]
	if put.name != name {
		put = adminPut{name: name}
	}
	if len(keys) > 0 {
		put.keys = maps.Clone(put.keys)
		if put.keys == nil {
			put.keys = map[string]json.RawMessage{}
		}
		maps.Copy(put.keys, keys)
	}
	lf.put[t] = put
}

// factsConfig is the configuration with the facts of model's pool (the
// router's own when none are known).
func (r *Router) factsConfig(model string) *config.Router {
	if c := r.facts.config(model); c != nil {
		return c
	}
	return r.cfg
}
