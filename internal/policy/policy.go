// Package policy holds llm-ring's five routing policies. A policy is pure:
// Pick(request, view) → Decision, with no clock, I/O, globals, goroutines or
// map iteration. The live router and the discrete-event simulator call the
// very same Pick; everything a policy needs arrives as arguments.
//
// Every decision carries a reason code and a Trace: the numbers and steps
// that produced it, rendered by Trace.String as in the original study:
//
//	bounded (token mode) → llm-2 (overflow)
//	  load (tokens): llm-0=2400 llm-1=900 llm-2=900; with this request total=5108, cap=2128.3
//	  llm-0: 2400+908=3308 > 2128.3 → skip
//	  llm-2: 900+908=1808 ≤ 2128.3 → overflow
package policy

import (
	"errors"
	"fmt"
	"strings"

	"github.com/llm-ring/llm-ring/internal/ring"
)

// Policy picks a replica for a request.
type Policy interface {
	// Name is the policy's registry name.
	Name() string
	// Pick chooses a replica. It must not modify req or v (except v.Visited,
	// which is scratch space), must not allocate, and must be deterministic.
	// v has at least one replica.
	Pick(req *Request, v *View) Decision
}

// Request is what a policy knows about one request.
type Request struct {
	Hash         uint64 // hash of the conversation key (ring.HashString)
	PromptTokens int    // whole prompt, tokens (estimated or learned)
	OutputTokens int    // expected output tokens (max_tokens, or the configured default)
	Seq          uint64 // the driver's request sequence number (round-robin)
	// Last is the replica index where the conversation was last served, or -1
	// when placement memory knows nothing (or that replica is gone).
	Last int
	// CachedTokens is how many of this conversation's tokens Last is believed
	// to hold in its prompt cache (previous prompt plus answer); 0 if unknown.
	CachedTokens int
}

// Load is one replica's in-flight load.
type Load struct {
	Requests int64 // requests in flight
	Tokens   int64 // token load in flight: the sum of the charges of its requests
}

// View is the state a pick reads: an immutable snapshot of the replica set
// and ring, and the in-flight loads at the moment of the pick.
type View struct {
	Names []string   // replica names, sorted; a replica is its index here
	Ring  *ring.Ring // built from Names
	Loads []Load     // indexed like Names
	Total Load       // the sum of Loads (the driver keeps it up to date)
	// Visited is scratch space for ring walks: at least (len(Names)+63)/64
	// words when len(Names) > 256 (smaller sets use the stack). Policies may
	// overwrite it.
	Visited []uint64
	// Exclude, when not empty, is a bitset of replicas that must not be
	// picked (they failed for this request: failover). At least one replica
	// is not excluded.
	Exclude []uint64
}

// NewView returns a view of names, their ring and loads, with Total and
// scratch space filled in.
func NewView(names []string, r *ring.Ring, loads []Load) *View {
	v := &View{Names: names, Ring: r, Loads: loads, Visited: make([]uint64, (len(names)+63)/64)}
	v.Recount()
	return v
}

// Recount recomputes Total from Loads.
func (v *View) Recount() {
	v.Total = Load{}
	for _, l := range v.Loads {
		v.Total.Requests += l.Requests
		v.Total.Tokens += l.Tokens
	}
}

// Excluded reports whether replica r may not be picked.
func (v *View) Excluded(r int) bool {
	return len(v.Exclude) > 0 && v.Exclude[r/64]&(1<<(r%64)) != 0
}

// firstAllowed returns r, or the next replica index after it (wrapping) that
// is not excluded.
func (v *View) firstAllowed(r int) int {
	for v.Excluded(r) {
		r = (r + 1) % len(v.Names)
	}
	return r
}

// ringHome returns the first replica clockwise from h that is not excluded.
func (v *View) ringHome(h uint64) int {
	start := v.Ring.Search(h)
	if len(v.Exclude) == 0 {
		return v.Ring.Replica(start)
	}
	for i := 0; i < v.Ring.Len(); i++ {
		if r := v.Ring.Replica(start + i); !v.Excluded(r) {
			return r
		}
	}
	return v.firstAllowed(0)
}

// Reason says why a replica was chosen.
type Reason uint8

// Reason codes. Each names the rule that chose the replica.
const (
	// Rotate: round-robin's turn.
	Rotate Reason = iota + 1
	// Hash: mod-n's hash(key) mod N.
	Hash
	// Home: the key's ring home (consistent), or the home was within the cap
	// (bounded, llm-aware).
	Home
	// Overflow: the preferred replica was over the cap; the next replica
	// clockwise on the ring within the cap took the request.
	Overflow
	// Sticky: llm-aware kept the conversation where it was last served (its
	// cache), away from its ring home, within the cap.
	Sticky
	// HomeLong: the ring home (which holds the cache) was over the normal
	// cap but within the long-conversation cap.
	HomeLong
	// StickyLong: like Sticky, within the long-conversation cap only.
	StickyLong
	// LeastLoaded: no replica was within the cap; the least loaded one took it.
	LeastLoaded
)

var reasonNames = [...]string{"", "rotate", "hash", "home", "overflow", "sticky", "home-long", "sticky-long", "least-loaded"}

// String returns the reason code as logged and exported.
func (r Reason) String() string {
	if int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return fmt.Sprintf("reason(%d)", r)
}

// Unit is the unit of load of the bounded policies.
type Unit uint8

// Load units.
const (
	Requests Unit = iota // each request costs 1
	Tokens               // each request costs its tokens of work
)

func (u Unit) String() string {
	if u == Tokens {
		return "tokens"
	}
	return "requests"
}

// ParseUnit parses "requests" or "tokens".
func ParseUnit(s string) (Unit, error) {
	switch s {
	case "requests":
		return Requests, nil
	case "tokens":
		return Tokens, nil
	}
	return 0, fmt.Errorf("unknown load unit %q (want requests or tokens)", s)
}

// Decision is a policy's answer.
type Decision struct {
	Replica int    // index into View.Names
	Reason  Reason // why
	// Charge is the token load the request adds to Replica while in flight:
	// its cost there (cache-aware for llm-aware), or prompt + output for
	// policies that do not count tokens.
	Charge int64
	Trace  Trace
}

// Params configures the policies; each policy reads the fields it needs.
type Params struct {
	Epsilon float64 // bounded, llm-aware: cap = (1+Epsilon) × average load
	Unit    Unit    // bounded: load unit
	// llm-aware additions, each switchable for ablations.
	CacheAwareLoad   bool
	PlacementMemory  bool
	LongStickiness   bool
	LongPromptTokens int     // a conversation is long from this many prompt tokens
	LongCapFactor    float64 // long cached conversations may stay up to this × average load
}

// entry is one registry row.
type entry struct {
	name string
	make func(Params) Policy
}

// registry is the one list of policies, in their canonical order. It is
// never modified.
var registry = [...]entry{
	{"round-robin", func(Params) Policy { return RoundRobin{} }},
	{"mod-n", func(Params) Policy { return ModN{} }},
	{"consistent", func(Params) Policy { return Consistent{} }},
	{"bounded", func(p Params) Policy { return &Bounded{Epsilon: p.Epsilon, Unit: p.Unit} }},
	{"llm-aware", func(p Params) Policy { return NewLLMAware(p) }},
}

// Names lists the policy names in canonical order.
func Names() []string {
	out := make([]string, len(registry))
	for i, e := range registry {
		out[i] = e.name
	}
	return out
}

// ErrUnknownPolicy is returned by New for a name not in the registry.
var ErrUnknownPolicy = errors.New("unknown policy")

// New returns the named policy configured with p.
func New(name string, p Params) (Policy, error) {
	for _, e := range registry {
		if e.name == name {
			if err := p.validate(name); err != nil {
				return nil, err
			}
			return e.make(p), nil
		}
	}
	return nil, fmt.Errorf("%w %q (want one of %s)", ErrUnknownPolicy, name, strings.Join(Names(), ", "))
}

func (p Params) validate(name string) error {
	if name != "bounded" && name != "llm-aware" {
		return nil
	}
	if !(p.Epsilon > 0) {
		return fmt.Errorf("%s: epsilon must be > 0, got %g", name, p.Epsilon)
	}
	if name == "llm-aware" && p.LongStickiness {
		if p.LongCapFactor < 1 {
			return fmt.Errorf("llm-aware: long_cap_factor must be ≥ 1, got %g", p.LongCapFactor)
		}
		if p.LongPromptTokens < 1 {
			return fmt.Errorf("llm-aware: long_prompt_tokens must be ≥ 1, got %d", p.LongPromptTokens)
		}
	}
	return nil
}
