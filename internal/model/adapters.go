package model

import (
	"time"

	"github.com/llm-ring/llm-ring/internal/policy"
)

// DefaultAdapterLoad is the cost of loading one LoRA adapter into a GPU
// slot when Config.AdapterLoad is 0: a rank-16 adapter of Llama-3.1-8B on
// all seven projections is 32 layers × 16 × (8192+5120+5120+8192+3·18432)
// × 2 bytes ≈ 84 MB, 3.4 ms over PCIe at 25 GB/s from vLLM's pinned CPU
// cache, plus ~450 per-module copies; TensorRT-LLM reports 1–2 ms from CPU
// memory. Loading from disk (vLLM's --max-cpu-loras defaults to
// --max-loras, so an evicted adapter leaves the CPU cache too) takes tens
// to hundreds of ms: set AdapterLoad for that. See docs/engines.md.
const DefaultAdapterLoad = 5 * time.Millisecond

// adapterSet is a paged engine's LoRA adapters: Config.MaxLoras GPU slots
// (vLLM's --max-loras), each holding one adapter, least recently used
// idle adapters evicted for a new one. The scheduler admits a waiting
// request whose adapter is not among the running requests' only while
// fewer than MaxLoras adapters have running requests (vLLM V1's
// scheduled_loras check); others are skipped, not blocking the queue.
type adapterSet struct {
	max    int // slots; 0: adapters not modelled (free, unlimited)
	cost   time.Duration
	ids    map[string]int32 // name → index+1 in list
	list   []adapterState
	active int // adapters with running requests
	held   int // adapters resident in a slot
	tick   uint64
	loads  int64 // loads so far
	evicts int64 // resident adapters evicted for another
	step   int   // loads of the step being planned

	version uint64 // bumped when what report shows changes
	seen    uint64 // version of cached
	cached  policy.Adapters
}

type adapterState struct {
	name             string
	seed             uint64 // chain-hash seed of its KV blocks
	running, waiting int
	resident         bool
	idleSince        uint64 // tick at which its last running request left
}

func newAdapterSet(cfg Config) adapterSet {
	cost := cfg.AdapterLoad
	if cost == 0 {
		cost = DefaultAdapterLoad
	}
	return adapterSet{max: cfg.MaxLoras, cost: cost, version: 1}
}

// intern returns the adapter's id (1-based; "" is 0, the base model).
func (a *adapterSet) intern(name string) int32 {
	if name == "" {
		return 0
	}
	if id, ok := a.ids[name]; ok {
		return id
	}
	if a.ids == nil {
		a.ids = map[string]int32{}
	}
	a.list = append(a.list, adapterState{name: name, seed: adapterSeed(name)})
	id := int32(len(a.list))
	a.ids[name] = id
	return id
}

// adapterSeed seeds the chain hashes of an adapter's KV blocks: vLLM puts
// the LoRA in each block hash's extra keys (vllm/v1/core/kv_cache_utils.py)
// and SGLang in its radix key, so that a prefix computed under one adapter
// is never reused under another or the base model.
func adapterSeed(name string) uint64 {
	h := uint64(0xcbf29ce484222325) // FNV-1a
	for i := 0; i < len(name); i++ {
		h = (h ^ uint64(name[i])) * 0x100000001b3
	}
	return splitmix64(h) | 1
}

func (a *adapterSet) get(id int32) *adapterState { return &a.list[id-1] }

// seedOf is the chain-hash seed of a request's blocks.
func (a *adapterSet) seedOf(id int32) uint64 {
	if id == 0 {
		return 0
	}
	return a.get(id).seed
}

// canRun reports whether a waiting request of adapter id may join the
// running batch: the base model always; an adapter already running; a new
// one while fewer than max adapters run.
func (a *adapterSet) canRun(id int32) bool {
	return id == 0 || a.max == 0 || a.get(id).running > 0 || a.active < a.max
}

// queued counts a request of adapter id entering the waiting queue.
func (a *adapterSet) queued(id int32) {
	if id != 0 {
		a.get(id).waiting++
		a.version++
	}
}

// dequeued counts a waiting request leaving without running (cancelled).
func (a *adapterSet) dequeued(id int32) {
	if id != 0 {
		a.get(id).waiting--
		a.version++
	}
}

// start moves a request of adapter id from the waiting queue to the
// running batch, loading the adapter into a slot if it is not resident;
// it reports whether it loaded it.
func (a *adapterSet) start(id int32) bool {
	if id == 0 {
		return false
	}
	s := a.get(id)
	s.waiting--
	s.running++
	a.version++
	if s.running == 1 {
		a.active++
	}
	if a.max == 0 || s.resident {
		return false
	}
	if a.held >= a.max {
		a.evictIdle()
	}
	s.resident = true
	a.held++
	a.loads++
	a.step++
	return true
}

// evictIdle frees the slot of the least recently used resident adapter
// without running requests (there is one: fewer than max adapters run).
func (a *adapterSet) evictIdle() {
	best := -1
	for i := range a.list {
		s := &a.list[i]
		if s.resident && s.running == 0 && (best < 0 || s.idleSince < a.list[best].idleSince) {
			best = i
		}
	}
	if best >= 0 {
		a.list[best].resident = false
		a.held--
		a.evicts++
	}
}

// stop counts a running request of adapter id leaving the batch: finished
// (requeued false) or preempted back to the waiting queue.
func (a *adapterSet) stop(id int32, requeued bool) {
	if id == 0 {
		return
	}
	s := a.get(id)
	s.running--
	if requeued {
		s.waiting++
	}
	a.version++
	if s.running == 0 {
		a.active--
		a.tick++
		s.idleSince = a.tick
	}
}

// takeStep returns the cost of the loads of the step being planned, and
// their number, and starts counting the next step's.
func (a *adapterSet) takeStep() (time.Duration, int) {
	n := a.step
	a.step = 0
	return time.Duration(n) * a.cost, n
}

// report is the adapters' state as vLLM's vllm:lora_requests_info gives
// it: adapters with running requests, adapters with waiting requests (an
// adapter can be in both), in the order first seen, and max_lora. The
// slices are rebuilt only when something changed, and never modified
// after: a report can be kept.
func (a *adapterSet) report() policy.Adapters {
	if a.max == 0 {
		return policy.Adapters{}
	}
	if a.seen == a.version || a.sameAsCached() {
		a.seen = a.version
		return a.cached
	}
	var run, wait []string
	for i := range a.list {
		if s := &a.list[i]; s.running > 0 {
			run = append(run, s.name)
		}
	}
	for i := range a.list {
		if s := &a.list[i]; s.waiting > 0 {
			wait = append(wait, s.name)
		}
	}
	a.cached = policy.Adapters{Running: run, Waiting: wait, Max: a.max, Has: true}
	a.seen = a.version
	return a.cached
}

// sameAsCached reports whether the running and waiting adapters are the
// cached report's (counts changed, not the names), without allocating.
func (a *adapterSet) sameAsCached() bool {
	if !a.cached.Has {
		return false
	}
	run, wait := 0, 0
	for i := range a.list {
		s := &a.list[i]
		if s.running > 0 {
			if run >= len(a.cached.Running) || a.cached.Running[run] != s.name {
				return false
			}
			run++
		}
		if s.waiting > 0 {
			if wait >= len(a.cached.Waiting) || a.cached.Waiting[wait] != s.name {
				return false
			}
			wait++
		}
	}
	return run == len(a.cached.Running) && wait == len(a.cached.Waiting)
}

// resident lists the adapters loaded in a slot, in the order first seen.
func (a *adapterSet) resident() []string {
	var out []string
	for i := range a.list {
		if a.list[i].resident {
			out = append(out, a.list[i].name)
		}
	}
	return out
}

// Adapters reports the server's LoRA adapters as the simulator's scraper
// gives them to the router's core (policy.Reported.Adapters) and as
// vLLM's vllm:lora_requests_info exports them: Running (adapters with
// running requests), Waiting (with waiting requests), Max
// (Config.MaxLoras), Has. Adapters are modelled by the paged engines with
// Config.MaxLoras > 0; otherwise the zero value (Has false). The slices
// are shared and never modified; the call allocates only when the state
// changed since the last one.
func (s *Server) Adapters() policy.Adapters {
	if s.pg == nil {
		return policy.Adapters{}
	}
	return s.pg.lora.report()
}

// AdapterResident reports whether adapter name is loaded in a GPU slot (a
// request for it now would not load it), without allocating.
func (s *Server) AdapterResident(name string) bool {
	if s.pg == nil {
		return false
	}
	id, ok := s.pg.lora.ids[name]
	return ok && s.pg.lora.get(id).resident
}

// ResidentAdapters lists the adapters loaded in a GPU slot (those with
// running requests and idle ones not yet evicted), for inspection.
func (s *Server) ResidentAdapters() []string {
	if s.pg == nil {
		return nil
	}
	return s.pg.lora.resident()
}
