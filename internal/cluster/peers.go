package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"slices"

	"github.com/llm-ring/llm-ring/internal/config"
	"github.com/llm-ring/llm-ring/internal/discovery"
	"github.com/llm-ring/llm-ring/internal/replicaset"
)

// PeerSource publishes the gossip addresses (host:port) of the router
// instances, this one possibly included (the node skips its own address).
//
// Run calls update with the complete, sorted set once at start and after
// every change, until ctx is done; calls come from one goroutine at a time
// and must not block for long (the same contract as discovery.Source).
type PeerSource interface {
	Run(ctx context.Context, update func(addrs []string)) error
}

// StaticPeers is a fixed list of host:port.
type StaticPeers []string

// Run publishes the list once and waits for ctx.
func (s StaticPeers) Run(ctx context.Context, update func([]string)) error {
	out := slices.Clone(s)
	slices.Sort(out)
	update(slices.Compact(out))
	<-ctx.Done()
	return nil
}

// SourcePeers adapts a replica discovery.Source (the EndpointSlices of the
// headless router-peers Service): each published replica's URL,
// http://<pod IP>:<gossip port>, becomes the peer address <pod IP>:<port>.
type SourcePeers struct {
	Source discovery.Source
	Logger *slog.Logger
}

// Run runs the source and converts each set.
func (s SourcePeers) Run(ctx context.Context, update func([]string)) error {
	return s.Source.Run(ctx, func(rs []replicaset.Replica) {
		addrs := make([]string, 0, len(rs))
		for _, r := range rs {
			u, err := url.Parse(r.URL)
			if err != nil || u.Host == "" {
				if s.Logger != nil {
					s.Logger.Warn("cluster_peer_bad_url", "peer", r.Name, "url", r.URL)
				}
				continue
			}
			addrs = append(addrs, u.Host)
		}
		slices.Sort(addrs)
		update(slices.Compact(addrs))
	})
}

// NewPeerSource builds the source cfg.Peers selects.
func NewPeerSource(cfg config.ClusterPeers, log *slog.Logger) (PeerSource, error) {
	switch cfg.Mode {
	case config.ClusterPeersStatic:
		return StaticPeers(cfg.Static), nil
	case config.ClusterPeersKubernetes:
		if cfg.Kubernetes == nil {
			return nil, fmt.Errorf("cluster.peers.kubernetes: missing")
		}
		k, err := discovery.NewKubernetes(discovery.KubernetesOptions{
			Namespace:  cfg.Kubernetes.Namespace,
			Service:    cfg.Kubernetes.Service,
			PortName:   cfg.Kubernetes.PortName,
			Kubeconfig: cfg.Kubernetes.Kubeconfig,
			Logger:     log,
		})
		if err != nil {
			return nil, fmt.Errorf("cluster.peers.kubernetes: %w", err)
		}
		return SourcePeers{Source: k, Logger: log}, nil
	}
	return nil, fmt.Errorf("cluster.peers.mode: must be static or kubernetes, got %q", cfg.Mode)
}
