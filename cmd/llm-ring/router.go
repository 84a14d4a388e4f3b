package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"time"

	"k8s.io/klog/v2"

	"github.com/llm-ring/llm-ring/internal/config"
	"github.com/llm-ring/llm-ring/internal/discovery"
	"github.com/llm-ring/llm-ring/internal/router"
)

func cmdRouter(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("router", stderr)
	path := fs.String("config", "", "router configuration file (YAML; see config/router.yaml)")
	level := fs.String("log-level", "info", "log level: debug, info, warn, error")
	flush := logFlushFlag(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	cfg, log, stopLog, err := loadRouterConfig(*path, *level, *flush, stdout)
	if err != nil {
		return err
	}
	defer stopLog()
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
	if cfg.Admin.Listen == "" {
		return rt.Serve(ctx, ln, src)
	}
	// The admin API on its own listener; it stops with the router.
	aln, err := net.Listen("tcp", cfg.Admin.Listen)
	if err != nil {
		ln.Close()
		return fmt.Errorf("admin.listen: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	adminErr := make(chan error, 1)
	go func() {
		err := rt.ServeAdmin(ctx, aln)
		if err != nil {
			cancel() // the admin listener failed: stop the router too
		}
		adminErr <- err
	}()
	err = rt.Serve(ctx, ln, src)
	cancel()
	if aerr := <-adminErr; aerr != nil && err == nil {
		err = fmt.Errorf("admin: %w", aerr)
	}
	return err
}

// discoverySource builds the configured replica source, with each
// replica's models from the configured model source (discovery.FromConfig).
func discoverySource(cfg *config.Router, log *slog.Logger) (discovery.Source, error) {
	return discovery.FromConfig(cfg, log)
}

// logFlushFlag is --log-flush of the router and the endpoint picker.
func logFlushFlag(fs *flag.FlagSet) *time.Duration {
	return fs.Duration("log-flush", 200*time.Millisecond,
		"write the per-request log lines together at most this often (or per 64 KiB), not one write per request; other lines are written at once; 0: every line at once")
}

// loadRouterConfig is the start of the router and the endpoint picker:
// --config (required) loaded and validated, and the JSON logger at
// --log-level, which client-go's own lines go through too: slog's
// JSONHandler, with the per-request line written directly and buffered
// for flush (router.NewBufferedLogHandler, the same bytes); stopLog
// writes what is buffered.
func loadRouterConfig(path, level string, flush time.Duration, stdout io.Writer) (cfg *config.Router, log *slog.Logger, stopLog func(), err error) {
	if path == "" {
		return nil, nil, nil, usageError{errors.New("--config is required")}
	}
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, nil, nil, usageError{err}
	}
	if flush < 0 {
		return nil, nil, nil, usageError{fmt.Errorf("--log-flush must be ≥ 0, got %v", flush)}
	}
	if cfg, err = config.Load(path); err != nil {
		return nil, nil, nil, err
	}
	h, stopLog := router.NewBufferedLogHandler(stdout, &slog.HandlerOptions{Level: lv}, flush)
	log = slog.New(h)
	klog.SetSlogLogger(log) // client-go's own lines, as JSON like the rest
	return cfg, log, stopLog, nil
}
