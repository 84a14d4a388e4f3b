package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"

	"k8s.io/klog/v2"

	"github.com/llm-ring/llm-ring/internal/config"
	"github.com/llm-ring/llm-ring/internal/discovery"
	"github.com/llm-ring/llm-ring/internal/router"
)

func cmdRouter(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("router", stderr)
	path := fs.String("config", "", "router configuration file (YAML; see config/router.yaml)")
	level := fs.String("log-level", "info", "log level: debug, info, warn, error")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *path == "" {
		return usageError{errors.New("--config is required")}
	}
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(*level)); err != nil {
		return usageError{err}
	}
	cfg, err := config.Load(*path)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewJSONHandler(stdout, &slog.HandlerOptions{Level: lv}))
	klog.SetSlogLogger(log) // client-go's own lines, as JSON like the rest
	src, err := discoverySource(cfg, log)
	if err != nil {
		return err
	}
	rt, err := router.New(router.Options{Config: cfg, Logger: log})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return err
	}
	return rt.Serve(ctx, ln, src)
}

// discoverySource builds the configured replica source.
func discoverySource(cfg *config.Router, log *slog.Logger) (discovery.Source, error) {
	if cfg.Discovery.Mode == "static" {
		return discovery.Static(cfg.Discovery.Static), nil
	}
	k := cfg.Discovery.Kubernetes
	return discovery.NewKubernetes(discovery.KubernetesOptions{
		Namespace:  k.Namespace,
		Service:    k.Service,
		PortName:   k.PortName,
		Kubeconfig: k.Kubeconfig,
		Logger:     log,
	})
}
