package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"

	"github.com/llm-ring/llm-ring/internal/config"
	"github.com/llm-ring/llm-ring/internal/discovery"
	"github.com/llm-ring/llm-ring/internal/epp"
	"github.com/llm-ring/llm-ring/internal/router"
)

// cmdEPP serves llm-ring as a Gateway API Inference Extension endpoint
// picker: the ext_proc and gRPC health services on --grpc-listen, and the
// router (the pool: discovery, health checks, gossip, /metrics, /replicas,
// the proxy itself) on the configuration's listen address.
func cmdEPP(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("epp", stderr)
	path := fs.String("config", "", "router configuration file (YAML; see config/router.yaml)")
	level := fs.String("log-level", "info", "log level: debug, info, warn, error")
	grpcAddr := fs.String("grpc-listen", ":9002", "address of the ext_proc and gRPC health services")
	fallbacks := fs.Int("fallbacks", 2, "endpoints after the pick in x-gateway-destination-endpoint (the policy's failover order)")
	pool := fs.String("inference-pool", "", "discover replicas from this InferencePool (inference.networking.k8s.io/v1) instead of the configured discovery")
	poolNS := fs.String("pool-namespace", "", "the InferencePool's namespace (default: the configuration's discovery.kubernetes.namespace)")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig for --inference-pool outside the cluster (default: in-cluster)")
	eppService := fs.String("epp-service", "", "this EPP's Service name: warn when the pool's endpointPickerRef names another")
	flush := logFlushFlag(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *fallbacks < 0 {
		return usageError{fmt.Errorf("--fallbacks must be ≥ 0, got %d", *fallbacks)}
	}
	cfg, log, stopLog, err := loadRouterConfig(*path, *level, *flush, stdout)
	if err != nil {
		return err
	}
	defer stopLog()
	src, err := eppSource(cfg, log, *pool, *poolNS, *kubeconfig, *eppService)
	if err != nil {
		return err
	}
	rt, err := router.New(router.Options{Config: cfg, Logger: log})
	if err != nil {
		return err
	}
	s, err := epp.New(epp.Options{Router: rt, Fallbacks: *fallbacks, MaxBody: int(cfg.MaxBodyBytes)})
	if err != nil {
		return err
	}
	gln, err := net.Listen("tcp", *grpcAddr)
	if err != nil {
		return fmt.Errorf("--grpc-listen: %w", err)
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		gln.Close()
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	rtErr := make(chan error, 1)
	go func() {
		err := rt.Serve(ctx, ln, src)
		cancel() // the pool stopped (or failed): stop the EPP too
		rtErr <- err
	}()
	log.Info("epp listening", slog.String("grpc", gln.Addr().String()), slog.Int("fallbacks", *fallbacks))
	err = s.Serve(ctx, gln, cfg.ShutdownGrace.D()+cfg.ShutdownDelay.D())
	cancel()
	if rerr := <-rtErr; rerr != nil && err == nil {
		err = rerr
	}
	return err
}

// eppSource is the InferencePool named by --inference-pool, else the
// configured discovery.
func eppSource(cfg *config.Router, log *slog.Logger, pool, ns, kubeconfig, service string) (discovery.Source, error) {
	if pool == "" {
		return discoverySource(cfg, log)
	}
	if ns == "" && cfg.Discovery.Kubernetes != nil {
		ns = cfg.Discovery.Kubernetes.Namespace
	}
	if ns == "" {
		return nil, usageError{errors.New("--inference-pool needs --pool-namespace")}
	}
	return discovery.NewInferencePool(discovery.InferencePoolOptions{Namespace: ns, Pool: pool, Kubeconfig: kubeconfig,
		EPPService: service, Logger: log})
}
