package main

import (
	"flag"
	"strings"

	"github.com/llm-ring/llm-ring/internal/model"
)

// presetArg returns the value of --replica-preset in args (the model flags'
// defaults come from the preset, so it is read before they are defined), or
// the CPU preset.
func presetArg(args []string) string {
	for i, a := range args {
		name, v, hasV := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if name != "replica-preset" || !strings.HasPrefix(a, "-") {
			continue
		}
		if hasV {
			return v
		}
		if i+1 < len(args) {
			return args[i+1]
		}
	}
	return model.PresetCPU
}

// simModelFlags defines the replica model flags of `llm-ring replica`
// (modelFlags) on fs, except that the answers' seed is --answer-seed: here
// --seed is the traffic seed.
func simModelFlags(fs *flag.FlagSet, cfg *model.Config) {
	tmp := flag.NewFlagSet("model", flag.ContinueOnError)
	modelFlags(tmp, cfg)
	tmp.VisitAll(func(f *flag.Flag) {
		name := f.Name
		if name == "seed" {
			name = "answer-seed"
		}
		fs.Var(f.Value, name, "replica: "+f.Usage)
	})
}
