package discovery

import (
	"log/slog"

	"github.com/llm-ring/llm-ring/internal/config"
)

// FromConfig builds the replica source the configuration describes: the
// static list or the Kubernetes EndpointSlices (discovery.mode), each
// replica's models from discovery.model_source (replicas: polled from each
// replica's model list, ModelPoller; labels: read by the Kubernetes source
// itself; static: the list's own; none: unknown). The router and the
// endpoint picker start from it, and so do the end-to-end tests, so that
// what they test is what the binary runs.
func FromConfig(cfg *config.Router, log *slog.Logger) (Source, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var src Source = Static(cfg.Discovery.Static)
	if cfg.Discovery.Mode != "static" {
		k := cfg.Discovery.Kubernetes
		var err error
		if src, err = NewKubernetes(KubernetesOptions{
			Namespace:  k.Namespace,
			Service:    k.Service,
			PortName:   k.PortName,
			Kubeconfig: k.Kubeconfig,
			ModelLabel: cfg.Discovery.KubernetesModelLabel(),
			Logger:     log,
		}); err != nil {
			return nil, err
		}
	}
	m := cfg.Discovery.Models()
	if m.Source != config.ModelSourceReplicas {
		return src, nil
	}
	return NewModelPoller(src, ModelPollOptions{Refresh: m.Refresh, Engine: cfg.EngineName(), Logger: log})
}
