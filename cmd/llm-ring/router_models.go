package main

import (
	"log/slog"

	"github.com/llm-ring/llm-ring/internal/config"
	"github.com/llm-ring/llm-ring/internal/discovery"
)

// withModelDiscovery decorates the replica source with where each
// replica's models come from (discovery.model_source; issue 23,
// docs/pools-discovery.md): replicas polls each replica's model list;
// labels is read by the Kubernetes source itself (its ModelLabel), static
// by the static list itself; none leaves them unknown.
func withModelDiscovery(src discovery.Source, cfg *config.Router, log *slog.Logger) (discovery.Source, error) {
	m := cfg.Discovery.Models()
	if m.Source != config.ModelSourceReplicas {
		return src, nil
	}
	return discovery.NewModelPoller(src, discovery.ModelPollOptions{
		Refresh: m.Refresh,
		Engine:  cfg.EngineName(),
		Logger:  log,
	})
}
