// Package pool routes many models behind one router (issue 23): a pool is
// today's whole routing state for one model (its own ring, loads, placement
// memory, prefix index and policy: a state.Table), and a Set holds one pool
// per model served, grouped from the replicas' model lists.
//
//	cfg := pool.Config{Aliases: ..., Rewrites: ...}  // internal/config builds it from `models:`
//	set, err := pool.New(cfg, newTable)               // newTable: one state.Table per model
//	set.SetReplicas(rs)                               // discovery: who serves which models
//	rt, err := set.Resolve(body.Model, convHash)      // a request's model → its pool
//	tk, d, err := rt.Pool.Table().Route(in, now)      // then routing as before, in that pool
//
// A replica whose model list is unknown (nil) joins the catch-all pool "",
// which serves whatever a request asks for: with no models configured and
// no model lists discovered, every replica is in the catch-all pool and
// every request goes there, exactly as before pools existed.
//
// The package is pure core (no clock, no I/O, no goroutines): the live
// router and the simulator drive the same Set. Resolve is allocation-free.
package pool

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/llm-ring/llm-ring/internal/ring"
	"github.com/llm-ring/llm-ring/internal/state"
)

// Config is the resolved models section (internal/config builds it from
// `models:`).
type Config struct {
	Default   string            // model for a request that names none ("": see Resolve)
	Aliases   map[string]string // alias -> model name
	Rewrites  []Rewrite
	Adapters  map[string]string // adapter -> its base model, configured in advance
	MaxLabels int               // bound on distinct metric label values (0: 16); beyond: "other"
}

// Rewrite sends requests for From to one of Targets, chosen per
// conversation with probability proportional to the weights (a canary: 90
// to the current version, 10 to the next; a retired name kept working: one
// target). The choice hashes the conversation with From, so every turn of
// a conversation gets the same target.
type Rewrite struct {
	From    string
	Targets []Target // weights > 0; the split is decided per conversation
}

// Target is one destination of a rewrite.
type Target struct {
	Model  string
	Weight float64
}

// DefaultMaxLabels is the label bound when Config.MaxLabels is 0.
const DefaultMaxLabels = 16

// OtherLabel is the metric label of the pools beyond the bound.
const OtherLabel = "other"

// NewTable builds a new pool's routing table: its policy and settings (the
// global configuration with the pool's overrides), sizes, AdapterAffinity.
type NewTable func(model string) (*state.Table, error)

// Validate checks cfg. Errors name the rule with the configuration's keys
// (internal/config prefixes them with "models."), e.g.
// "rewrites[0].to[1].weight: must be > 0".
func (c Config) Validate() error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", key, fmt.Sprintf(format, args...)))
	}
	c.validateRewrites(bad)
	c.validateNames(bad)
	if c.MaxLabels < 0 {
		bad("max_model_labels", "must be ≥ 0 (0: %d), got %d", DefaultMaxLabels, c.MaxLabels)
	}
	return errors.Join(errs...)
}

// validateRewrites checks the rewrites: each from once and not an alias,
// targets named once each, not aliases, not rewritten themselves (no
// chains, so no cycles), with weights > 0.
func (c Config) validateRewrites(bad func(key, format string, args ...any)) {
	from := map[string]int{}
	for i, rw := range c.Rewrites {
		if rw.From == "" {
			bad(fmt.Sprintf("rewrites[%d].from", i), "must not be empty")
		} else if j, dup := from[rw.From]; dup {
			bad(fmt.Sprintf("rewrites[%d].from", i), "%q is already rewritten by rewrites[%d]", rw.From, j)
		} else {
			from[rw.From] = i
		}
		if _, ok := c.Aliases[rw.From]; ok {
			bad(fmt.Sprintf("rewrites[%d].from", i), "%q is an alias (rewrite its model instead)", rw.From)
		}
		if len(rw.Targets) == 0 {
			bad(fmt.Sprintf("rewrites[%d].to", i), "must list at least one target")
		}
	}
	for i, rw := range c.Rewrites {
		for j, tg := range rw.Targets {
			key := fmt.Sprintf("rewrites[%d].to[%d]", i, j)
			if slices.ContainsFunc(rw.Targets[:j], func(o Target) bool { return o.Model == tg.Model }) {
				bad(key+".model", "%q is listed twice", tg.Model)
			}
			_, alias := c.Aliases[tg.Model]
			k, chained := from[tg.Model]
			switch {
			case tg.Model == "":
				bad(key+".model", "must not be empty")
			case alias:
				bad(key+".model", "%q is an alias: a target must name a model", tg.Model)
			case chained:
				bad(key+".model", "%q is itself rewritten (rewrites[%d]): rewrites are not chained", tg.Model, k)
			}
			if !(tg.Weight > 0) || tg.Weight > 1e12 {
				bad(key+".weight", "must be > 0 (and at most 1e12), got %g", tg.Weight)
			}
		}
	}
}

// validateNames checks aliases (named, not chained) and adapters (named,
// not aliases, their base not an adapter).
func (c Config) validateNames(bad func(key, format string, args ...any)) {
	for _, a := range slices.Sorted(maps.Keys(c.Aliases)) {
		m := c.Aliases[a]
		switch _, chained := c.Aliases[m]; {
		case a == "":
			bad("aliases", "an alias must not be empty")
		case m == "":
			bad("aliases."+a, "must name a model")
		case chained:
			bad("aliases."+a, "%q is itself an alias: aliases are not chained", m)
		}
	}
	for _, a := range slices.Sorted(maps.Keys(c.Adapters)) {
		base := c.Adapters[a]
		switch _, alias := c.Aliases[a]; {
		case a == "" || base == "":
			bad("adapters", "an adapter and its base model must be named (got %q -> %q)", a, base)
		case alias:
			bad("adapters."+a, "%q is also an alias", a)
		case c.Adapters[base] != "":
			bad("adapters."+a, "its base %q is itself an adapter", base)
		}
	}
}

// Pool is the routing state of one model: its table, its members.
type Pool struct {
	model   string
	label   string
	table   *state.Table
	members atomic.Int64
}

// Model is the pool's model ("" for the catch-all pool).
func (p *Pool) Model() string { return p.model }

// Table is the pool's routing state (ring, loads, memory, policy).
func (p *Pool) Table() *state.Table { return p.table }

// Replicas is how many replicas are members now.
func (p *Pool) Replicas() int { return int(p.members.Load()) }

// Label is the pool's bounded metric label: its model for the first
// MaxLabels pools created (the catch-all is "" and does not count),
// OtherLabel for the pools after them.
func (p *Pool) Label() string { return p.label }

// Route is where Resolve sends a request.
type Route struct {
	Pool      *Pool
	Model     string // the name to send upstream (after alias / rewrite)
	Adapter   string // the LoRA adapter asked for, "" none
	Requested string // the name as the request gave it
	Rewritten bool   // Model != Requested: the driver rewrites the body's "model"
}

// UnknownModelError is Resolve's error for a model no replica serves.
type UnknownModelError struct {
	Model  string   // "" when the request named none and no default applies
	Served []string // the models served (with replicas), sorted
}

func (e *UnknownModelError) Error() string {
	served := "none"
	if len(e.Served) > 0 {
		served = strings.Join(e.Served, ", ")
	}
	if e.Model == "" {
		return "the request names no model and no default applies; models served: " + served
	}
	return fmt.Sprintf("model %q is not served; models served: %s", e.Model, served)
}

// ModelInfo is one entry of GET /v1/models.
type ModelInfo struct {
	ID     string
	Parent string // adapters: their base model
	// Replicas are the members of its pool; an adapter: the replicas
	// listing it, or its base's pool size when configured in advance.
	Replicas int
}

// rewrite is a Rewrite ready for Resolve: cumulative weights.
type rewrite struct {
	from    string
	salt    uint64 // ring.HashString(from)
	targets []string
	cum     []float64 // cum[i]: Σ weights[0..i] / Σ weights
}

func compile(rws []Rewrite) map[string]*rewrite {
	out := make(map[string]*rewrite, len(rws))
	for _, rw := range rws {
		c := &rewrite{from: rw.From, salt: ring.HashString(rw.From)}
		total := 0.0
		for _, tg := range rw.Targets {
			total += tg.Weight
		}
		sum := 0.0
		for _, tg := range rw.Targets {
			sum += tg.Weight
			c.targets = append(c.targets, tg.Model)
			c.cum = append(c.cum, sum/total)
		}
		c.cum[len(c.cum)-1] = 1
		out[rw.From] = c
	}
	return out
}

// pick returns the target of conversation conv: a point in [0, 1) from
// the hash of (conv, from), then the first target whose cumulative weight
// exceeds it.
func (rw *rewrite) pick(conv uint64) string {
	u := float64(mix(conv^rw.salt)>>11) / (1 << 53)
	for i, c := range rw.cum {
		if u < c {
			return rw.targets[i]
		}
	}
	return rw.targets[len(rw.targets)-1]
}

// mix is SplitMix64's finalizer: consecutive inputs give unrelated outputs.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
