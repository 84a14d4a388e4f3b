// Package discovery tells the router which replicas exist and are ready.
//
// A Source publishes the full set of ready replicas every time it changes.
// The router rebuilds its ring from each set; it never polls. Two sources
// exist: Static (a fixed list from the configuration) and Kubernetes
// (EndpointSlices of a Service, through a client-go informer).
package discovery

import (
	"context"

	"github.com/llm-ring/llm-ring/internal/replicaset"
)

// Source publishes replica sets.
//
// Run calls update with the complete, name-sorted set of ready replicas:
// once at start (possibly empty) and again after every change, until ctx is
// done. update is called from one goroutine at a time and must not block for
// long. Run returns nil when ctx is done, or an error if the source cannot
// work at all.
type Source interface {
	Run(ctx context.Context, update func([]replicaset.Replica)) error
}

// Static is a fixed replica list.
type Static []replicaset.Replica

// Run publishes the list once and waits for ctx.
func (s Static) Run(ctx context.Context, update func([]replicaset.Replica)) error {
	update(replicaset.Normalize(s))
	<-ctx.Done()
	return nil
}

var _ Source = Static(nil)
