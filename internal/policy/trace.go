package policy

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
	// Explain appends the lines after the head, the policy's own text, to b
	// and returns the extended slice (append's contract: with room in b it
	// allocates nothing). It is a plain function (never a closure), so
	// setting it does not allocate.
	Explain func(d *Decision, b []byte) []byte
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

// writeBounded writes the lines of a bounded-loads walk (bounded, and
// llm-aware after its own lines; llm says which wording to use).
func (t *Trace) writeBounded(w text, d *Decision, llm bool) text {
	if llm {
		w = t.writePlacement(w)
	}
	w = t.writeLoads(w.s("\n  load (").s(t.Unit.String()).s(")"))
	prefCost := t.Cost
	if t.CacheAt == t.Preferred && t.CacheAt >= 0 {
		prefCost = t.CacheCost
	}
	if llm {
		w = w.s("; +").d(prefCost).s(" → total=").d(t.Total).s(", avg=").f(t.Avg, 1).s(", cap=")
	} else {
		w = w.s("; with this request total=").d(t.Total).s(", cap=")
	}
	if t.Unit == Requests {
		w = w.s("⌈").f((1+t.Epsilon)*t.Avg, 2).s("⌉=")
	}
	w = t.num(w, t.Cap)
	if t.Long {
		w = w.s("\n  long stickiness: prompt_tokens=").i(t.Prompt).s(" ≥ ").i(t.LongPrompt).
			s(" and cache_likely=").t(t.CacheLikely).s(" → long_cap=").f(t.LongCap, 1)
	}
	w = t.writeChecks(w, d, prefCost)
	if t.NChecks > MaxTraceChecks {
		w = w.s("\n  … ").i(t.NChecks - MaxTraceChecks).s(" more replicas checked")
	}
	if d.Reason == LeastLoaded {
		w = w.s("\n  no replica within the cap → least loaded: ").name(t, d.Replica).
			s(" (").d(t.LeastLoad).s(" with this request)")
	}
	return w
}

// num writes a load or cap in the walk's unit.
func (t *Trace) num(w text, v float64) text {
	if t.Unit == Requests {
		return w.f(v, 0)
	}
	return w.f(v, 1)
}

// writePlacement writes llm-aware's lines about placement memory and the
// request's cost on the preferred replica.
func (t *Trace) writePlacement(w text) text {
	switch {
	case t.Last < 0 || t.LastTokens == 0:
		w = w.s("\n  placement memory: no cache known → preferred=").name(t, t.Preferred).s(" (ring home)")
	case !t.Memory:
		w = w.s("\n  placement memory: off (last served on ").name(t, t.Last).s(" with ").i(t.LastTokens).
			s(" cached tokens) → preferred=").name(t, t.Preferred).s(" (ring home)")
	default:
		w = w.s("\n  placement memory: last served on ").name(t, t.Last).s(" with ").i(t.LastTokens).
			s(" cached tokens → preferred=").name(t, t.Preferred)
	}
	if t.CacheAt == t.Preferred && t.CacheAt >= 0 {
		return w.s("\n  cost on ").name(t, t.Preferred).s(": max(1, ").i(t.Prompt).s("-").i(t.LastTokens).
			s(")=").d(t.CacheCost - int64(t.Output)).s(" + ").i(t.Output).s(" = ").d(t.CacheCost).
			s(" (new tokens only, cache hit)")
	}
	w = w.s("\n  cost on ").name(t, t.Preferred).s(": ").i(t.Prompt).s(" + ").i(t.Output).s(" = ").d(t.Cost).
		s(" (whole prompt")
	if !t.CacheAware && t.CacheLikely {
		w = w.s(", cache-aware load off")
	}
	return w.s(")")
}

// writeChecks writes one line per candidate the walk checked (prefCost: the
// request's cost on the preferred replica).
func (t *Trace) writeChecks(w text, d *Decision, prefCost int64) text {
	// Merge the preferred replica's normal and long checks into one line, as
	// the study printed them.
	checks := t.Checks[:min(t.NChecks, MaxTraceChecks)]
	for i := 0; i < len(checks); i++ {
		c := checks[i]
		w = w.s("\n  ").name(t, int(c.Replica)).s(": ")
		if !c.Fit && !c.Long && i+1 < len(checks) && checks[i+1].Long && checks[i+1].Fit {
			l := checks[i+1]
			w = w.d(l.Load).s("+").d(l.Cost).s("=").d(l.Load+l.Cost).s(" ≤ long_cap=").f(l.Limit, 1).
				s(" (> normal cap=")
			w = t.num(w, c.Limit).s(") → ").s(string(d.Reason))
			i++
			continue
		}
		outcome := "skip"
		if c.Fit && i == len(checks)-1 && t.NChecks <= MaxTraceChecks {
			outcome = string(d.Reason)
		}
		if c.Idle {
			w = w.s("idle (nothing in flight) → ").s(outcome)
			continue
		}
		w = w.d(c.Load).s("+").d(c.Cost).s("=").d(c.Load + c.Cost)
		if c.Fit {
			w = w.s(" ≤ ")
		} else {
			w = w.s(" > ")
		}
		w = t.writeLimit(w, c, prefCost).s(" → ").s(outcome)
	}
	return w
}

// writeLimit writes the cap check c was checked against: the normal or the
// long-conversation cap, and how the cap moves with its cost when the
// request costs there what it does not cost on the preferred replica.
func (t *Trace) writeLimit(w text, c Check, prefCost int64) text {
	if c.Long {
		return w.s("long_cap=").f(c.Limit, 1)
	}
	w = t.num(w, c.Limit)
	if c.Cost != prefCost {
		w = w.s(" (cap with its cost: (1+").g(t.Epsilon).s(")·(").d(t.Sum).s("+").d(c.Cost).s(")/").i(t.N).s(")")
	}
	return w
}

// writeLoads writes ": name=load …", the loads the trace recorded (the
// first MaxTraceLoads replicas, then how many there are), after the label
// the caller wrote.
func (t *Trace) writeLoads(w text) text {
	w = w.s(": ")
	for r := range min(t.N, MaxTraceLoads) {
		if r > 0 {
			w = append(w, ' ')
		}
		w = w.name(t, r).s("=").d(t.Loads[r])
	}
	if t.N > MaxTraceLoads {
		w = w.s(" … (").i(t.N).s(" replicas)")
	}
	return w
}
