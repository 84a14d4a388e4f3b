// Package discovery tells the router which replicas exist and are ready.
//
// A Source publishes the full set of ready replicas every time it changes.
// The router rebuilds its ring from each set; it never polls. Two sources
// exist: Static (a fixed list from the configuration) and Kubernetes
// (EndpointSlices of a Service, through a client-go informer).
package discovery

import (
	"context"
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
}

// Source publishes replica sets.
//
// Run calls update with the complete, name-sorted set of ready replicas:
// once at start (possibly empty) and again after every change, until ctx is
// done. update is called from one goroutine at a time and must not block for
// long. Run returns nil when ctx is done, or an error if the source cannot
// work at all.
type Source interface {
	Run(ctx context.Context, update func([]Replica)) error
}

// Static is a fixed replica list.
type Static []Replica

// Run publishes the list once and waits for ctx.
func (s Static) Run(ctx context.Context, update func([]Replica)) error {
	update(Normalize(s))
	<-ctx.Done()
	return nil
}

var _ Source = Static(nil)

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
