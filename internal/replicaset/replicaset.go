// Package replicaset defines a replica as routing sees it: a stable name and
// the base URL the router forwards to. It is pure (no I/O) so that the core
// packages (state, sim) can use it without importing discovery, which pulls
// in client-go.
package replicaset

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
)

// Replica is one ready replica: a stable name (the pod name on Kubernetes)
// and the base URL the router forwards to.
type Replica struct {
	Name string `json:"name"`
	URL  string `json:"url"`
	// Engine names the replica's engine (package engine's presets) when it
	// differs from the replica set's (the configuration's engine key); ""
	// means the set's.
	Engine string `json:"engine,omitempty" cfg:"optional"`
	// Models are the models the replica serves (issue 23: pools by model):
	// base models, and LoRA adapters with their base as Parent. nil means
	// unknown (not yet discovered, or never configured): such a replica
	// serves whatever a request asks for (the catch-all pool), as every
	// replica did before pools.
	Models []Model `json:"models,omitempty" cfg:"optional"`
	// AnyModel: besides the models it lists, the replica serves requests
	// for any other model name (its engine ignores the name: llama.cpp,
	// SGLang), so it is also a member of the catch-all pool.
	AnyModel bool `json:"any_model,omitempty" cfg:"optional"`
}

// Model is one model a replica serves.
type Model struct {
	Name string `json:"name"`
	// Parent is the base model of a LoRA adapter ("" for a base model), as
	// vLLM's GET /v1/models reports it.
	Parent string `json:"parent,omitempty" cfg:"optional"`
}

// Normalize returns a copy of rs sorted by name, with duplicate names removed
// (the first one wins).
func Normalize(rs []Replica) []Replica {
	out := slices.Clone(rs)
	slices.SortStableFunc(out, func(a, b Replica) int { return strings.Compare(a.Name, b.Name) })
	return slices.CompactFunc(out, func(a, b Replica) bool { return a.Name == b.Name })
}

// Validate checks a static list: names non-empty and unique, URLs absolute
// http(s) URLs. Errors name the offending entry.
func Validate(rs []Replica) error {
	seen := make(map[string]bool, len(rs))
	for i, r := range rs {
		if r.Name == "" {
			return fmt.Errorf("[%d].name: must not be empty", i)
		}
		if seen[r.Name] {
			return fmt.Errorf("[%d].name: duplicate replica name %q", i, r.Name)
		}
		seen[r.Name] = true
		u, err := url.Parse(r.URL)
		if err != nil {
			return fmt.Errorf("[%d].url: %v", i, err)
		}
		if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("[%d].url: %q is not an absolute http(s) URL", i, r.URL)
		}
	}
	return nil
}

// Equal reports whether a and b are the same replica (name, URL, engine and
// models, in order).
func Equal(a, b Replica) bool {
	return a.Name == b.Name && a.URL == b.URL && a.Engine == b.Engine && a.AnyModel == b.AnyModel && slices.Equal(a.Models, b.Models)
}
