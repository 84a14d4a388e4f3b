package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"

	"github.com/llm-ring/llm-ring/internal/model"
	"github.com/llm-ring/llm-ring/internal/replica"
)

// cmdReplica serves simulated llama.cpp replicas: one by default, or
// several in this process (comma-separated --name and --listen), which
// can share one compute budget (--shared-cpu).
func cmdReplica(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("replica", stderr)
	listen := fs.String("listen", "127.0.0.1:8081", "address to listen on; a comma-separated list for several replicas")
	names := fs.String("name", "llm-0", "replica name; a comma-separated list (one per --listen address) for several replicas")
	shared := fs.Bool("shared-cpu", false, "replicas of this process share one compute budget (k busy replicas each run k times slower)")
	speed := fs.Float64("speed", 1, "model time runs this many times faster than wall time (timings stay in model time)")
	loadDelay := fs.Duration("load-delay", 0, "model time during which the replica answers 503 \"Loading model\"")
	alias := fs.String("alias", replica.DefaultAlias, "model name reported in answers")
	quiet := fs.Bool("quiet", false, "do not log one line per request")
	api := fs.String("api", replica.APILlamaCpp, "engine face: "+strings.Join(replica.APIs, ", ")+" (response shapes, streaming rules, health, /metrics names; default: --engine's face for vllm and sglang)")
	apiKey := fs.String("api-key", "", "require this API key (Authorization: Bearer KEY or X-Api-Key); a comma-separated list for several")
	cacheReport := fs.Bool("enable-prompt-tokens-details", false, "vllm face: report usage.prompt_tokens_details.cached_tokens (vLLM's flag)")
	fs.BoolVar(cacheReport, "enable-cache-report", false, "sglang face: report usage.prompt_tokens_details.cached_tokens (SGLang's flag)")
	preset := fs.String("replica-preset", model.PresetCPU, "the model's preset: "+strings.Join(model.PresetNames(), ", ")+"; model flags given too override its values")
	cfg, err := model.Preset(presetArg(args))
	if err != nil {
		return usageError{fmt.Errorf("--replica-preset: %w", err)}
	}
	modelFlags(fs, &cfg)
	served := servedFlags(fs)
	_ = preset // read before the model flags are defined (presetArg): their defaults come from it
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return usageError{err}
	}
	apiSet := false
	fs.Visit(func(f *flag.Flag) { apiSet = apiSet || f.Name == "api" })
	if !apiSet && cfg.Paged() {
		*api = cfg.Engine // a paged engine speaks its own face (and /metrics names) unless told otherwise
	}
	nameList, addrList := splitList(*names), splitList(*listen)
	if len(nameList) == 0 || len(nameList) != len(addrList) {
		return usageError{fmt.Errorf("--name has %d names and --listen %d addresses: give one address per replica", len(nameList), len(addrList))}
	}
	adapters, err := replica.ParseAdapters(splitList(*served.adapters))
	if err != nil {
		return usageError{fmt.Errorf("--adapters: %w", err)}
	}
	opts := replica.Options{Model: cfg, SharedCPU: *shared, Speed: *speed, Alias: *alias,
		API: *api, APIKeys: splitList(*apiKey), CacheReport: *cacheReport,
		Models: splitList(*served.models), Adapters: adapters}
	if !*quiet {
		opts.Logger = slog.New(slog.NewTextHandler(stderr, nil))
	}
	h, err := replica.NewHost(opts)
	if err != nil {
		return usageError{err}
	}
	defer h.Close()

	errc := make(chan error, len(nameList))
	for i, name := range nameList {
		r, err := h.Add(name, *loadDelay)
		if err != nil {
			return usageError{err}
		}
		ln, err := net.Listen("tcp", addrList[i])
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "replica %s (%s face) listening on http://%s (%s)\n", name, *api, ln.Addr(), describeModel(cfg, *speed, *shared))
		go func() { errc <- replica.Serve(ctx, ln, r) }()
	}
	var errs []error
	for range nameList {
		if err := <-errc; err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// servedFlagValues are the flags of the models and LoRA adapters served.
type servedFlagValues struct{ models, adapters *string }

// servedFlags defines --models and --adapters (the adapter slots are
// model flags: --max-loras, --adapter-load).
func servedFlags(fs *flag.FlagSet) servedFlagValues {
	v := servedFlagValues{
		models:   fs.String("models", "", "base models served, comma-separated (GET /v1/models lists them; a request naming another gets 404); empty: any model name is accepted"),
		adapters: fs.String("adapters", "", "LoRA adapters served, comma-separated name:base (name alone: the first model); a request naming one runs with it"),
	}
	return v
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
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
	fs.StringVar(&cfg.Engine, "engine", cfg.Engine, "engine modelled: "+strings.Join(model.Engines, ", ")+" (empty: llamacpp); vllm and sglang keep a paged KV pool shared by --n-parallel running requests (max_num_seqs), --n-batch tokens per step (max_num_batched_tokens)")
	fs.IntVar(&cfg.BlockSize, "block-size", cfg.BlockSize, "vllm/sglang: tokens per KV block (0: vLLM's 16, SGLang's 1)")
	fs.IntVar(&cfg.KVTokens, "kv-tokens", cfg.KVTokens, "KV pool shared by the slots, in tokens (0: none for llamacpp; --ctx-size for vllm/sglang)")
	fs.StringVar(&cfg.SchedulePolicy, "schedule-policy", cfg.SchedulePolicy, "sglang: fcfs or lpm (longest prefix match first)")
	fs.IntVar(&cfg.MaxLoras, "max-loras", cfg.MaxLoras, "vllm/sglang: LoRA adapter slots (vLLM --max-loras); 0: adapters are free and unlimited")
	fs.DurationVar(&cfg.AdapterLoad, "adapter-load", cfg.AdapterLoad,
		fmt.Sprintf("vllm/sglang: model time to load one adapter into a slot (0: %v, from vLLM's CPU cache)", model.DefaultAdapterLoad))
	fs.IntVar(&cfg.AnswerMin, "answer-min", cfg.AnswerMin, "shortest natural answer, tokens")
	fs.IntVar(&cfg.AnswerMax, "answer-max", cfg.AnswerMax, "longest natural answer, tokens")
	fs.Func("seed", fmt.Sprintf("seed of the generated answers (default %d)", cfg.Seed), func(s string) error {
		_, err := fmt.Sscan(s, &cfg.Seed)
		return err
	})
}

// describeModel is the startup line's summary of the model.
func describeModel(cfg model.Config, speed float64, shared bool) string {
	if cfg.Paged() {
		st := model.PoolShape(cfg)
		lora := ""
		if cfg.MaxLoras > 0 {
			lora = fmt.Sprintf(", %d adapter slots", cfg.MaxLoras)
		}
		return fmt.Sprintf("%s engine, speed %gx, up to %d sequences of %d tokens, %d KV blocks of %d tokens, %d tokens per step%s, shared CPU %v",
			cfg.Engine, speed, cfg.NParallel, cfg.SlotContext(), st.NumBlocks, st.BlockSize, cfg.NBatch, lora, shared)
	}
	return fmt.Sprintf("speed %gx, %d slots of %d tokens, %d MiB RAM cache, shared CPU %v",
		speed, cfg.NParallel, cfg.SlotContext(), cfg.CacheRAMMiB, shared)
}
