// Package policy holds llm-ring's routing policies. A policy is pure:
// Pick(request, view) → Decision, with no clock, I/O, globals, goroutines or
// map iteration. The live router and the discrete-event simulator call the
// very same Pick; everything a policy needs arrives as arguments.
//
// The view has one row per replica: its in-flight load (router side), the
// tokens of this request's prompt believed cached there (Match, from the
// routing state's indexers: placement memory and the prefix index), and
// what the replica itself reports (running, waiting, KV-cache use).
//
// A policy is one file plus one registry row (registry.go): the row names
// the policy, gives its settings with their documented defaults and
// validation, its constructor and its reason codes. Every decision carries
// a reason code and a Trace whose text the policy itself writes:
//
//	bounded (token mode) → llm-2 (overflow)
//	  load (tokens): llm-0=2400 llm-1=900 llm-2=900; with this request total=5108, cap=2128.3
//	  llm-0: 2400+908=3308 > 2128.3 → skip
//	  llm-2: 900+908=1808 ≤ 2128.3 → overflow
package policy

import (
	"math"
	"math/bits"

	"github.com/llm-ring/llm-ring/internal/ring"
)

// Policy picks a replica for a request.
type Policy interface {
	// Name is the policy's registry name.
	Name() string
	// Pick chooses a replica and fills d in place (every field: what d held
	// before is overwritten). It must not modify req or v (except v.Visited,
	// which is scratch space), must not allocate, and must be deterministic.
	// v has at least one replica that is not excluded.
	Pick(req *Request, v *View, d *Decision)
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
	// How stale that belief may be: SentSince is the tokens routed to Last
	// by everyone since the conversation's last answer there, traffic that
	// may have pushed it out of the replica's cache (an engine evicts under
	// pressure, not with age). 0 when Last < 0.
	SentSince int64
	// FirstUser is the text of the first user message (chat) or the start of
	// the raw prompt: policies that key on a prompt prefix hash a part of it
	// (without copying it).
	FirstUser string
}

// Load is one replica's in-flight load, as counted by the router.
type Load struct {
	Requests int64 // requests in flight
	Tokens   int64 // token load in flight: the sum of the charges of its requests
}

// Reported is what a replica last said about itself (its /metrics in the
// live router, the replica model's state in the simulator), sampled on an
// interval. A signal the replica does not report, or whose last scrape
// failed, is unknown: its Has flag is false (unknown is not zero).
type Reported struct {
	Running, Waiting float64 // requests in the running batch / queued
	KVUse            float64 // KV-cache use, 0..1
	HasQueue         bool    // Running and Waiting are known
	HasKV            bool    // KVUse is known
	At               int64   // when it was sampled, on the driver's clock (ns)
	// Adapters is what the replica reports of its LoRA adapters (vLLM's
	// vllm:lora_requests_info; the simulated replica's own state).
	Adapters Adapters
}

// Adapters is a replica's LoRA adapter state. The slices are shared and
// never modified once reported.
type Adapters struct {
	Running []string // adapters resident and serving requests
	Waiting []string // adapters requests wait for (not yet loaded)
	Max     int      // adapter slots (vLLM max_loras); 0: unknown
	Has     bool     // the replica reports adapters at all
}

// Speed is how fast a replica has been serving, learned from its answers
// (state.Table: an exponentially weighted mean of each answer's rates). A
// rate of 0 means no answer has taught it yet: a policy then uses its own
// documented prior.
type Speed struct {
	// Prefill is prompt tokens processed per second (llama.cpp
	// timings.prompt_per_second; else prompt tokens ÷ time to first token).
	Prefill float64
	// Decode is tokens generated per second for one sequence under the
	// batching the replica was doing (timings.predicted_per_second; else
	// output tokens ÷ the time after the first token).
	Decode float64
	// Samples counts the answers learned from (capped; for confidence).
	Samples int
}

// Row is what a policy sees of one replica.
type Row struct {
	Load Load
	// Speed is the replica's learned prefill and decode rates.
	Speed Speed
	// Match is how many tokens of this request's prompt the routing state
	// believes cached on the replica: the best of placement memory (this
	// conversation's last turn there) and the prefix index (blocks of this
	// prompt sent there by any conversation). 0: nothing known.
	Match    int
	Reported Reported
}

// View is the state a pick reads: an immutable snapshot of the replica set
// and ring, and one row per replica at the moment of the pick.
type View struct {
	Names []string   // replica names, sorted; a replica is its index here
	Ring  *ring.Ring // built from Names
	Rows  []Row      // indexed like Names
	Total Load       // the sum of the rows' loads (the driver keeps it up to date)
	Now   int64      // the driver's clock (ns): the age of a report is Now − Reported.At
	// Visited is scratch space for ring walks: at least (len(Names)+63)/64
	// words when len(Names) > 256 (smaller sets use the stack). Policies may
	// overwrite it.
	Visited []uint64
	// Exclude, when not empty, is a bitset of replicas that must not be
	// picked (they failed for this request, or their health checks fail).
	// At least one replica is not excluded.
	Exclude []uint64
}

// NewView returns a view of names, their ring and loads (Match and
// Reported empty), with Total and scratch space filled in.
func NewView(names []string, r *ring.Ring, loads []Load) *View {
	v := &View{Names: names, Ring: r, Rows: make([]Row, len(loads)), Visited: make([]uint64, (len(names)+63)/64)}
	for i, l := range loads {
		v.Rows[i].Load = l
	}
	v.Recount()
	return v
}

// Recount recomputes Total from the rows.
func (v *View) Recount() {
	v.Total = Load{}
	for i := range v.Rows {
		v.Total.Requests += v.Rows[i].Load.Requests
		v.Total.Tokens += v.Rows[i].Load.Tokens
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

// leastRequests returns the replica with the fewest requests in flight
// among those not excluded; ties go to the lower index (name order).
func (v *View) leastRequests() int {
	best := -1
	for r := range v.Rows {
		if !v.Excluded(r) && (best < 0 || v.Rows[r].Load.Requests < v.Rows[best].Load.Requests) {
			best = r
		}
	}
	return best
}

// ringFirst returns the first replica met walking the ring clockwise from
// h that is not excluded and for which ok holds, or -1. The peers use it to
// break ties deterministically (their projects pick randomly among ties, or
// by map order): the first tied replica clockwise from the conversation's
// home, so that router instances with the same view agree and a lone
// conversation keeps its home.
func (v *View) ringFirst(h uint64, ok func(r int) bool) int {
	pos := v.Ring.Search(h)
	for i := 0; i < v.Ring.Len(); i++ {
		if r := v.Ring.Replica(pos + i); !v.Excluded(r) && ok(r) {
			return r
		}
	}
	return -1
}

// allowed counts the replicas that are not excluded.
func (v *View) allowed() int {
	n := len(v.Names)
	for _, w := range v.Exclude {
		n -= bits.OnesCount64(w)
	}
	return n
}

// nthAllowed returns the k-th (from 0) replica in name order that is not
// excluded, or -1.
func (v *View) nthAllowed(k int) int {
	for r := range v.Names {
		if v.Excluded(r) {
			continue
		}
		if k == 0 {
			return r
		}
		k--
	}
	return -1
}

// mix64 is the splitmix64 finaliser: a fixed bijection that spreads the
// bits of x, for deterministic "random" draws derived from a request.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// Reason says why a replica was chosen: a short code owned by the policy
// that produced it (each registry row lists its policy's codes, so the
// label set of the metrics is bounded).
type Reason string

// String returns the reason code as logged and exported.
func (r Reason) String() string { return string(r) }

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

// wholeCost is a request's whole work: its prompt and its output.
func wholeCost(req *Request) int64 { return int64(req.PromptTokens) + int64(req.OutputTokens) }

// Format renders the decision as the multi-line text of its trace: a head
// "policy → replica (reason)" and the lines the policy writes.
func (d *Decision) Format() string { return string(d.AppendFormat(nil)) }

// AppendFormat appends the text Format returns to dst and returns the
// extended slice: with room in dst (a pooled buffer) it allocates nothing.
func (d *Decision) AppendFormat(dst []byte) []byte {
	t := &d.Trace
	head := t.Head
	if head == "" {
		head = t.Policy
	}
	w := text(dst).s(head).s(" → ").name(t, d.Replica).s(" (").s(string(d.Reason)).s(")")
	if t.Explain != nil {
		return t.Explain(d, w)
	}
	return w
}

// finite reports whether x is a usable number (not NaN or ±Inf).
func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }
