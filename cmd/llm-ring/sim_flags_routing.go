package main

import (
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/llm-ring/llm-ring/internal/config"
	"github.com/llm-ring/llm-ring/internal/policy"
	"github.com/llm-ring/llm-ring/internal/sim"
)

// simRoutingFlags are the router's configuration: a file (--config), the
// routing keys that belong to no policy as flags, and a policy's settings
// (--set), in that order of precedence from the lowest.
type simRoutingFlags struct {
	cfgPath *string
	sets    []string
	keys    simRouterFlags
}

func (f *simRoutingFlags) register(fs *flag.FlagSet) {
	fs.Func("set", "a policy setting, repeatable: NAME.KEY=VALUE (e.g. llm-aware.long_cap_factor=3), or policy.KEY=VALUE for every chosen policy that has KEY; see docs/design.md for each policy's keys", func(v string) error {
		f.sets = append(f.sets, v)
		return nil
	})
	f.cfgPath = fs.String("config", "", "router configuration file (YAML, as for llm-ring router): its routing keys are used; flags below override them")
	def := sim.DefaultRouter()
	f.keys.define(fs, &def)
}

// apply builds the router's configuration: the simulator's default or the
// file's, the router flags given, then each --set (checkSpecs validates it).
func (f *simRoutingFlags) apply(o *simOptions, set map[string]bool) error {
	o.router = sim.DefaultRouter()
	if *f.cfgPath != "" {
		c, err := config.Load(*f.cfgPath)
		if err != nil {
			return usageError{err}
		}
		o.router = *c
	}
	f.keys.apply(set, &o.router)
	for _, kv := range f.sets {
		if err := applySet(&o.router, o.policies, kv); err != nil {
			return usageError{fmt.Errorf("--set %s: %w", kv, err)}
		}
	}
	return nil
}

// simSweepFlags are --sweep KEY=V1,V2,...: one run of the whole command
// per value of a flag or a policy setting (cmdSim reparses the command
// line with each value).
type simSweepFlags struct {
	sweep *string
	fs    *flag.FlagSet // the flags a key may name
}

// simNoSweep lists the flags that cannot be swept: they choose what runs
// and where it goes, not a setting of the system.
var simNoSweep = []string{"policies", "profile", "profiles", "workload", "workloads", "arena-focus", "seeds", "seed", "out-dir", "force", "workers", "analyze", "sweep", "config", "cpuprofile"}

func (f *simSweepFlags) register(fs *flag.FlagSet) {
	f.sweep = fs.String("sweep", "", "run once per value of a flag or policy setting and chart the results, e.g. policy.epsilon=0.1,0.25,0.5,1.0, cache-ram-mib=64,512, replicas=2,3,4")
	f.fs = fs
}

// apply checks the key (a flag that can be swept, or a setting one of the
// policies has) and the values (at least one, each once).
func (f *simSweepFlags) apply(o *simOptions, _ map[string]bool) error {
	if *f.sweep == "" {
		return nil
	}
	if o.arena != nil {
		return usageError{errors.New("--sweep and --profiles: give one (a sweep runs one profile)")}
	}
	key, vals, ok := strings.Cut(*f.sweep, "=")
	key = strings.TrimLeft(strings.TrimSpace(key), "-")
	if !ok || key == "" {
		return usageError{fmt.Errorf("--sweep: want KEY=V1,V2,..., got %q", *f.sweep)}
	}
	if strings.Contains(key, ".") {
		if err := applySet(&o.router, o.policies, key+"="); err != nil && strings.Contains(err.Error(), "has key") {
			return usageError{fmt.Errorf("--sweep: %w", err)}
		}
	} else if f.fs.Lookup(key) == nil {
		return usageError{fmt.Errorf("--sweep: no flag named %q to sweep", key)}
	}
	if slices.Contains(simNoSweep, key) {
		return usageError{fmt.Errorf("--sweep: %s cannot be swept (sweep a setting: policy.epsilon, cache-ram-mib, replicas, ...)", key)}
	}
	for _, v := range strings.Split(vals, ",") {
		if v = strings.TrimSpace(v); v == "" {
			continue
		}
		if slices.Contains(o.sweepVals, v) {
			return usageError{fmt.Errorf("--sweep: value %q given twice", v)}
		}
		o.sweepVals = append(o.sweepVals, v)
	}
	if len(o.sweepVals) == 0 {
		return usageError{fmt.Errorf("--sweep %s: give at least one value", key)}
	}
	o.sweepKey = key
	return nil
}

// simRouterFlags are the routing keys of the router configuration that
// belong to no policy, as flags (a policy's own settings go through --set).
type simRouterFlags struct {
	charsPerToken             *float64
	vnodes, maxEntries        *int
	blockChars                *int
	capacityTokens            *int64
	ttl, prefixTTL, sigPeriod *time.Duration
}

func (r *simRouterFlags) define(fs *flag.FlagSet, d *config.Router) {
	r.vnodes = fs.Int("virtual-nodes", d.VirtualNodes, "ring positions per replica (router key virtual_nodes)")
	r.charsPerToken = fs.Float64("chars-per-token", d.CharsPerToken, "router's token estimate for unanswered text (router key chars_per_token)")
	r.maxEntries = fs.Int("placement-memory-max-entries", d.PlacementMemory.MaxEntries, "conversations remembered (placement_memory.max_entries)")
	r.ttl = fs.Duration("placement-memory-ttl", d.PlacementMemory.TTL.D(), "forget a conversation unseen this long, model time (placement_memory.ttl)")
	r.blockChars = fs.Int("prefix-block-chars", d.PrefixIndex.BlockChars, "prefix index block size in characters (prefix_index.block_chars)")
	r.capacityTokens = fs.Int64("prefix-capacity-tokens", d.PrefixIndex.CapacityTokens, "prefix index capacity per replica, tokens (prefix_index.capacity_tokens)")
	r.prefixTTL = fs.Duration("prefix-ttl", d.PrefixIndex.TTL.D(), "prefix index: forget a block unsent this long, model time (prefix_index.ttl)")
	r.sigPeriod = fs.Duration("signals-interval", d.Signals.Interval.D(), "how often replicas' own signals are sampled, model time; 0: never (signals.interval)")
}

// apply sets the flags given on the command line (set) onto c.
func (r *simRouterFlags) apply(set map[string]bool, c *config.Router) {
	if set["virtual-nodes"] {
		c.VirtualNodes = *r.vnodes
	}
	if set["chars-per-token"] {
		c.CharsPerToken = *r.charsPerToken
	}
	if set["placement-memory-max-entries"] {
		c.PlacementMemory.MaxEntries = *r.maxEntries
	}
	if set["placement-memory-ttl"] {
		c.PlacementMemory.TTL = config.Duration(*r.ttl)
	}
	if set["prefix-block-chars"] {
		c.PrefixIndex.BlockChars = *r.blockChars
	}
	if set["prefix-capacity-tokens"] {
		c.PrefixIndex.CapacityTokens = *r.capacityTokens
	}
	if set["prefix-ttl"] {
		c.PrefixIndex.TTL = config.Duration(*r.prefixTTL)
	}
	if set["signals-interval"] {
		c.Signals.Interval = config.Duration(*r.sigPeriod)
	}
}

// applySet applies one --set NAME.KEY=VALUE to c. NAME "policy" means every
// policy of runs (variants count as their base) that has KEY.
func applySet(c *config.Router, runs []string, kv string) error {
	k, value, ok := strings.Cut(kv, "=")
	name, key, ok2 := strings.Cut(k, ".")
	if !ok || !ok2 || name == "" || key == "" {
		return errors.New("want NAME.KEY=VALUE or policy.KEY=VALUE")
	}
	if name != "policy" {
		return c.SetPolicySetting(name, key, value)
	}
	var bases, with []string
	for _, run := range runs {
		base, set, err := sim.Settings(run, c)
		if err != nil || slices.Contains(bases, base) {
			continue
		}
		bases = append(bases, base)
		if slices.Contains(policy.SettingKeys(set), key) {
			with = append(with, base)
		}
	}
	if len(with) == 0 {
		return fmt.Errorf("none of the policies (%s) has key %q", strings.Join(bases, ", "), key)
	}
	if value == "" {
		return nil // a key check only (--sweep)
	}
	for _, base := range with {
		if err := c.SetPolicySetting(base, key, value); err != nil {
			return err
		}
	}
	return nil
}
