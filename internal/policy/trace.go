package policy

import (
	"fmt"
	"strings"
)

// Sizes of the fixed trace buffers: a Trace never allocates while a policy
// fills it. Loads of replicas beyond MaxTraceLoads are summarised, and
// checks beyond MaxTraceChecks are counted.
const (
	MaxTraceLoads  = 8
	MaxTraceChecks = 8
	MaxTraceCands  = 8
	MaxTraceVals   = 8
	MaxTraceInts   = 8
	TraceCols      = 6
)

// Check is one candidate examined by a bounded walk.
type Check struct {
	Replica int32
	Load    int64   // its load before this request
	Cost    int64   // this request's cost there
	Limit   float64 // the cap it was checked against
	Idle    bool    // nothing in flight: always fits
	Fit     bool
	Long    bool // checked against the long-conversation cap
}

// Trace is the record of how a decision was made: enough numbers to
// reproduce it by hand. Names is the view's (immutable) name slice; the rest
// are values, so filling a Trace does not allocate.
type Trace struct {
	Policy string
	// Head, when set, replaces Policy at the start of the text ("bounded
	// (token mode)").
	Head string
	// Explain writes the lines after the head: the policy's own text. It is
	// a plain function (never a closure), so setting it does not allocate.
	Explain func(d *Decision, b *strings.Builder)
	Names   []string
	N       int // replicas
	Hash    uint64
	Seq     uint64

	Prompt, Output int // request tokens
	Last           int // placement memory: last replica (-1 none)
	LastTokens     int // tokens cached there

	// Bounded walks.
	Bounded   bool
	Unit      Unit
	Loads     [MaxTraceLoads]int64 // loads before this request, first replicas
	Home      int
	Preferred int
	CacheAt   int   // replica with cache-aware cost (-1 none)
	CacheCost int64 // cost there
	Cost      int64 // cost anywhere else
	Sum       int64 // Σ load before this request
	Total     int64 // Sum + cost on the preferred replica
	Epsilon   float64
	Avg, Cap  float64
	Long      bool // the long-conversation cap was tried
	LongCap   float64
	LeastLoad int64 // least-loaded fallback: load + cost of the chosen

	// llm-aware switches and facts.
	Memory, CacheAware, LongOn bool
	LongPrompt                 int
	CacheLikely                bool

	Checks  [MaxTraceChecks]Check
	NChecks int // checks made (may exceed MaxTraceChecks)

	// Policies that score every candidate record their numbers here: one
	// row per candidate (the first MaxTraceCands by the policy's order),
	// columns as the policy defines them (Col constants), plus a few
	// scalars: numbers in Vals, counts, indexes and flag words in Ints,
	// each slot named by the policy (ValSlot and IntSlot constants; see
	// Val, Int).
	Cands  [MaxTraceCands]Cand
	NCands int
	Vals   [MaxTraceVals]float64
	Ints   [MaxTraceInts]int64
}

// A ValSlot names one of Trace.Vals, an IntSlot one of Trace.Ints, a Col one
// column of Cand.V: each policy declares the slots it fills as constants of
// these types, so that its Pick and its explain function agree by name.
type (
	ValSlot uint8
	IntSlot uint8
	Col     uint8
)

// Val returns the number in slot s.
func (t *Trace) Val(s ValSlot) float64 { return t.Vals[s] }

// Int returns the integer in slot s.
func (t *Trace) Int(s IntSlot) int64 { return t.Ints[s] }

func (t *Trace) setVal(s ValSlot, x float64) { t.Vals[s] = x }

func (t *Trace) setInt(s IntSlot, x int64) { t.Ints[s] = x }

// At returns the candidate's number in column c.
func (c *Cand) At(col Col) float64 { return c.V[col] }

// Cand is one candidate's numbers in a scoring policy's trace.
type Cand struct {
	Replica int32
	V       [TraceCols]float64
}

// addCand records a candidate; beyond MaxTraceCands it is only counted.
func (t *Trace) addCand(r int, v ...float64) {
	if t.NCands < MaxTraceCands {
		c := &t.Cands[t.NCands]
		c.Replica = int32(r)
		copy(c.V[:], v)
	}
	t.NCands++
}

// keepChosen makes sure the chosen replica r is among the recorded rows:
// when more candidates were scored than the trace keeps and r came after
// them, its row v replaces the last one.
func (t *Trace) keepChosen(r int, v ...float64) {
	if t.NCands > MaxTraceCands && int(t.Cands[MaxTraceCands-1].Replica) < r {
		c := &t.Cands[MaxTraceCands-1]
		c.Replica = int32(r)
		c.V = [TraceCols]float64{}
		copy(c.V[:], v)
	}
}

// best finds the best candidate of a scan, the highest value when high is
// set, else the lowest, and counts the candidates that share it.
type best struct {
	high bool
	r    int // -1 before the first offer
	val  float64
	ties int
}

func newBest(high bool) best { return best{high: high, r: -1} }

// offer considers candidate r with value x (candidates in replica order).
func (b *best) offer(r int, x float64) {
	switch {
	case b.r < 0 || b.high && x > b.val || !b.high && x < b.val:
		b.r, b.val, b.ties = r, x, 1
	case x == b.val:
		b.ties++
	}
}

// pick returns the chosen replica: the best one, or, when several share the
// best value (value recomputes a candidate's), the first of them clockwise
// from hash's ring home; tie says which.
func (b *best) pick(v *View, hash uint64, value func(r int) float64) (r int, tie bool) {
	if b.ties <= 1 {
		return b.r, false
	}
	if r := v.ringFirst(hash, func(r int) bool { return value(r) == b.val }); r >= 0 {
		return r, true
	}
	return b.r, true
}
func (t *Trace) begin(policy string, req *Request, v *View) {
	t.Policy, t.Names, t.N = policy, v.Names, len(v.Names)
	t.Hash, t.Seq = req.Hash, req.Seq
	t.Prompt, t.Output = req.PromptTokens, req.OutputTokens
	t.Last, t.LastTokens = req.Last, req.CachedTokens
	t.Home, t.Preferred, t.CacheAt = -1, -1, -1
}

func (t *Trace) addCheck(c Check) {
	if t.NChecks < MaxTraceChecks {
		t.Checks[t.NChecks] = c
	}
	t.NChecks++
}

func (t *Trace) name(r int) string {
	if r >= 0 && r < len(t.Names) {
		return t.Names[r]
	}
	return fmt.Sprintf("#%d", r)
}

// writeBounded writes the lines of a bounded-loads walk (bounded, and
// llm-aware after its own lines; llm says which wording to use).
func (t *Trace) writeBounded(b *strings.Builder, d *Decision, llm bool) {
	if llm {
		t.writePlacement(b)
	}
	t.writeLoads(b, fmt.Sprintf("load (%s)", t.Unit))
	prefCost := t.Cost
	if t.CacheAt == t.Preferred && t.CacheAt >= 0 {
		prefCost = t.CacheCost
	}
	capText := "cap=" + t.num(t.Cap)
	if t.Unit == Requests {
		capText = fmt.Sprintf("cap=⌈%.2f⌉=%s", (1+t.Epsilon)*t.Avg, t.num(t.Cap))
	}
	if llm {
		fmt.Fprintf(b, "; +%d → total=%d, avg=%.1f, %s", prefCost, t.Total, t.Avg, capText)
	} else {
		fmt.Fprintf(b, "; with this request total=%d, %s", t.Total, capText)
	}
	if t.Long {
		fmt.Fprintf(b, "\n  long stickiness: prompt_tokens=%d ≥ %d and cache_likely=%t → long_cap=%.1f",
			t.Prompt, t.LongPrompt, t.CacheLikely, t.LongCap)
	}
	t.writeChecks(b, d, prefCost)
	if t.NChecks > MaxTraceChecks {
		fmt.Fprintf(b, "\n  … %d more replicas checked", t.NChecks-MaxTraceChecks)
	}
	if d.Reason == LeastLoaded {
		fmt.Fprintf(b, "\n  no replica within the cap → least loaded: %s (%d with this request)", t.name(d.Replica), t.LeastLoad)
	}
}

// num writes a load or cap in the walk's unit.
func (t *Trace) num(v float64) string {
	if t.Unit == Requests {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.1f", v)
}

// writePlacement writes llm-aware's lines about placement memory and the
// request's cost on the preferred replica.
func (t *Trace) writePlacement(b *strings.Builder) {
	switch {
	case t.Last < 0 || t.LastTokens == 0:
		fmt.Fprintf(b, "\n  placement memory: no cache known → preferred=%s (ring home)", t.name(t.Preferred))
	case !t.Memory:
		fmt.Fprintf(b, "\n  placement memory: off (last served on %s with %d cached tokens) → preferred=%s (ring home)",
			t.name(t.Last), t.LastTokens, t.name(t.Preferred))
	default:
		fmt.Fprintf(b, "\n  placement memory: last served on %s with %d cached tokens → preferred=%s",
			t.name(t.Last), t.LastTokens, t.name(t.Preferred))
	}
	if t.CacheAt == t.Preferred && t.CacheAt >= 0 {
		fmt.Fprintf(b, "\n  cost on %s: max(1, %d-%d)=%d + %d = %d (new tokens only, cache hit)",
			t.name(t.Preferred), t.Prompt, t.LastTokens, t.CacheCost-int64(t.Output), t.Output, t.CacheCost)
	} else {
		fmt.Fprintf(b, "\n  cost on %s: %d + %d = %d (whole prompt", t.name(t.Preferred), t.Prompt, t.Output, t.Cost)
		if !t.CacheAware && t.CacheLikely {
			b.WriteString(", cache-aware load off")
		}
		b.WriteString(")")
	}
}

// writeChecks writes one line per candidate the walk checked (prefCost: the
// request's cost on the preferred replica).
func (t *Trace) writeChecks(b *strings.Builder, d *Decision, prefCost int64) {
	// Merge the preferred replica's normal and long checks into one line, as
	// the study printed them.
	checks := t.Checks[:min(t.NChecks, MaxTraceChecks)]
	for i := 0; i < len(checks); i++ {
		c := checks[i]
		r := int(c.Replica)
		last := i == len(checks)-1 && t.NChecks <= MaxTraceChecks
		if !c.Fit && !c.Long && i+1 < len(checks) && checks[i+1].Long && checks[i+1].Fit {
			l := checks[i+1]
			fmt.Fprintf(b, "\n  %s: %d+%d=%d ≤ long_cap=%.1f (> normal cap=%s) → %s",
				t.name(r), l.Load, l.Cost, l.Load+l.Cost, l.Limit, t.num(c.Limit), d.Reason)
			i++
			continue
		}
		limit := t.num(c.Limit)
		if c.Long {
			limit = fmt.Sprintf("long_cap=%.1f", c.Limit)
		}
		if c.Cost != prefCost && !c.Long {
			limit += fmt.Sprintf(" (cap with its cost: (1+%g)·(%d+%d)/%d)", t.Epsilon, t.Sum, c.Cost, t.N)
		}
		outcome := "skip"
		if c.Fit && last {
			outcome = d.Reason.String()
		}
		switch {
		case c.Idle:
			fmt.Fprintf(b, "\n  %s: idle (nothing in flight) → %s", t.name(r), outcome)
		case c.Fit:
			fmt.Fprintf(b, "\n  %s: %d+%d=%d ≤ %s → %s", t.name(r), c.Load, c.Cost, c.Load+c.Cost, limit, outcome)
		default:
			fmt.Fprintf(b, "\n  %s: %d+%d=%d > %s → skip", t.name(r), c.Load, c.Cost, c.Load+c.Cost, limit)
		}
	}
}

// writeLoads writes a line "label: name=load …" of the loads the trace
// recorded (the first MaxTraceLoads replicas, then how many there are).
func (t *Trace) writeLoads(b *strings.Builder, label string) {
	fmt.Fprintf(b, "\n  %s: ", label)
	for r := range min(t.N, MaxTraceLoads) {
		if r > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(b, "%s=%d", t.name(r), t.Loads[r])
	}
	if t.N > MaxTraceLoads {
		fmt.Fprintf(b, " … (%d replicas)", t.N)
	}
}
