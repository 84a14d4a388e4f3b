package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"

	"github.com/llm-ring/llm-ring/internal/model"
	"github.com/llm-ring/llm-ring/internal/replica"
)

// cmdReplica serves one simulated llama.cpp replica.
func cmdReplica(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("replica", stderr)
	listen := fs.String("listen", "127.0.0.1:8081", "address to listen on")
	name := fs.String("name", "llm-0", "replica name (in logs and chat completion ids)")
	speed := fs.Float64("speed", 1, "model time runs this many times faster than wall time (timings stay in model time)")
	loadDelay := fs.Duration("load-delay", 0, "model time during which /health answers 503 \"Loading model\"")
	alias := fs.String("alias", replica.DefaultAlias, "model name reported in answers")
	quiet := fs.Bool("quiet", false, "do not log one line per request")
	cfg := model.DefaultConfig()
	modelFlags(fs, &cfg)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return usageError{err}
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	opts := replica.Options{Model: cfg, Speed: *speed, Alias: *alias}
	if !*quiet {
		opts.Logger = log
	}
	h, err := replica.NewHost(opts)
	if err != nil {
		return usageError{err}
	}
	defer h.Close()
	r, err := h.Add(*name, *loadDelay)
	if err != nil {
		return usageError{err}
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "replica %s listening on http://%s (speed %gx, %d slots of %d tokens, %d MiB RAM cache)\n",
		*name, ln.Addr(), *speed, cfg.NParallel, cfg.SlotContext(), cfg.CacheRAMMiB)
	return replica.Serve(ctx, ln, r)
}

// modelFlags defines a flag for every model parameter, defaulting to cfg.
func modelFlags(fs *flag.FlagSet, cfg *model.Config) {
	fs.IntVar(&cfg.NParallel, "n-parallel", cfg.NParallel, "slots (llama.cpp --parallel)")
	fs.IntVar(&cfg.CtxSize, "ctx-size", cfg.CtxSize, "total context in tokens, split among the slots (llama.cpp --ctx-size)")
	fs.IntVar(&cfg.NBatch, "n-batch", cfg.NBatch, "most tokens per step (llama.cpp --batch-size)")
	fs.IntVar(&cfg.CacheRAMMiB, "cache-ram-mib", cfg.CacheRAMMiB, "RAM prompt cache size in MiB, 0 to disable (llama.cpp --cache-ram)")
	fs.IntVar(&cfg.BytesPerToken, "bytes-per-token", cfg.BytesPerToken, "KV-cache bytes per token (sizes RAM cache entries)")
	fs.DurationVar(&cfg.StepOverhead, "step-overhead", cfg.StepOverhead, "fixed cost of one step (one llama_decode), model time")
	fs.DurationVar(&cfg.TokenCost, "token-cost", cfg.TokenCost, "cost of each token in a step, model time")
	fs.DurationVar(&cfg.AttnCost, "attn-cost", cfg.AttnCost, "extra cost of a token per position of context before it, model time")
	fs.IntVar(&cfg.AnswerMin, "answer-min", cfg.AnswerMin, "shortest natural answer, tokens")
	fs.IntVar(&cfg.AnswerMax, "answer-max", cfg.AnswerMax, "longest natural answer, tokens")
	fs.Func("seed", fmt.Sprintf("seed of the generated answers (default %d)", cfg.Seed), func(s string) error {
		_, err := fmt.Sscan(s, &cfg.Seed)
		return err
	})
}
