package policy

// The reference: the trace text as it was written with fmt before issue 21
// (Decision.Format with a strings.Builder and one Fprintf per piece), kept
// verbatim so that TestAppendFormatMatchesFmt can compare the appending
// implementation with it on any decision. Do not "fix" this file: it is the
// definition of the text.

import (
	"fmt"
	"reflect"
	"strings"
)

// refTrace gives the reference its own copies of Trace's writing methods;
// every field and the slot accessors come from the embedded Trace.
type refTrace struct{ *Trace }

// refExplains maps each policy's explain function to its fmt reference.
var refExplains = map[uintptr]func(d *Decision, b *strings.Builder){
	reflect.ValueOf(explainBounded).Pointer():    refExplainBounded,
	reflect.ValueOf(explainCacheAware).Pointer(): refExplainCacheAware,
	reflect.ValueOf(explainConsistent).Pointer(): refExplainConsistent,
	reflect.ValueOf(explainKVCost).Pointer():     refExplainKVCost,
	reflect.ValueOf(explainLeast).Pointer():      refExplainLeast,
	reflect.ValueOf(explainLLMAware).Pointer():   refExplainLLMAware,
	reflect.ValueOf(explainModN).Pointer():       refExplainModN,
	reflect.ValueOf(explainP2C).Pointer():        refExplainP2C,
	reflect.ValueOf(explainPredictive).Pointer(): refExplainPredictive,
	reflect.ValueOf(explainPrefixHash).Pointer(): refExplainPrefixHash,
	reflect.ValueOf(explainRoundRobin).Pointer(): refExplainRoundRobin,
	reflect.ValueOf(explainScored).Pointer():     refExplainScored,
}

// refFormat is Decision.Format as it was; ok is false when the decision's
// explain function has no reference (a policy added after issue 21: its
// text is defined by its own appending code and the golden traces).
func refFormat(d *Decision) (text string, ok bool) {
	var b strings.Builder
	t := refTrace{&d.Trace}
	head := t.Head
	if head == "" {
		head = t.Policy
	}
	fmt.Fprintf(&b, "%s → %s (%s)", head, t.name(d.Replica), d.Reason)
	if t.Explain != nil {
		ref, ok := refExplains[reflect.ValueOf(t.Explain).Pointer()]
		if !ok {
			return "", false
		}
		ref(d, &b)
	}
	return b.String(), true
}

func refExplainCacheAware(d *Decision, b *strings.Builder) {
	t := refTrace{&d.Trace}
	lo, hi, thr, best := t.Int(caLo), t.Int(caHi), t.Val(caThreshold), t.Int(caBestMatch)
	abs, rel, rate := t.Int(caAbs), t.Val(caRel), t.Val(caRate)
	b.WriteString("\n  in flight / matched tokens: ")
	for i := range min(t.NCands, MaxTraceCands) {
		c := &t.Cands[i]
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(b, "%s=%.0f/%.0f", t.name(int(c.Replica)), c.At(caColInflight), c.At(caColMatched))
	}
	if t.N > MaxTraceCands {
		fmt.Fprintf(b, " … (%d replicas)", t.N)
	}
	if d.Reason == CacheImbalanced {
		fmt.Fprintf(b, "\n  imbalanced: max−min = %d−%d = %d > %d and %d > %g×%d → shortest queue: %s",
			hi, lo, hi-lo, abs, hi, rel, lo, t.name(d.Replica))
		return
	}
	fmt.Fprintf(b, "\n  balanced: max−min = %d−%d = %d", hi, lo, hi-lo)
	if hi-lo > abs {
		fmt.Fprintf(b, " > %d but %d ≤ %g×%d", abs, hi, rel, lo)
	} else {
		fmt.Fprintf(b, " ≤ %d", abs)
	}
	fmt.Fprintf(b, "\n  best match %d of %d prompt tokens = %.3f", best, t.Prompt, rate)
	if d.Reason == CacheMatch {
		fmt.Fprintf(b, " > %g → %s (the best match", thr, t.name(d.Replica))
		b.WriteString(", first clockwise from the home on a tie)")
		return
	}
	fmt.Fprintf(b, " ≤ %g → least loaded: %s", thr, t.name(d.Replica))
}

func refExplainConsistent(d *Decision, b *strings.Builder) {
	t := refTrace{&d.Trace}
	fmt.Fprintf(b, "\n  hash=%016x → ring home %s", t.Hash, t.name(t.Home))
}

func refExplainKVCost(d *Decision, b *strings.Builder) {
	t := refTrace{&d.Trace}
	reqBlocks, bestCost := t.Int(kvReqBlocks), t.Val(kvBestCost)
	fmt.Fprintf(b, "\n  block %d tokens; prompt %d tokens = %d blocks; cost = %g × prefill blocks + (active blocks + %d)",
		t.Int(kvBlockSize), t.Prompt, reqBlocks, t.Val(kvWeight), reqBlocks)
	for i := range min(t.NCands, MaxTraceCands) {
		c := &t.Cands[i]
		fmt.Fprintf(b, "\n  %s: matched %.0f tokens = %.0f cached blocks → prefill %.3f; active %.0f → decode %.0f; cost %.3f",
			t.name(int(c.Replica)), c.At(kvColMatched), c.At(kvColCached), c.At(kvColPrefill), c.At(kvColActive),
			c.At(kvColActive)+float64(reqBlocks), c.At(kvColCost))
	}
	if t.NCands > MaxTraceCands {
		fmt.Fprintf(b, "\n  … %d more replicas costed", t.NCands-MaxTraceCands)
	}
	if ties := t.Int(kvTies); ties > 1 {
		fmt.Fprintf(b, "\n  %d replicas share the lowest cost %.3f → the first clockwise from the home: %s", ties, bestCost, t.name(d.Replica))
	} else {
		fmt.Fprintf(b, "\n  lowest cost %.3f → %s", bestCost, t.name(d.Replica))
	}
}

func refExplainLeast(d *Decision, b *strings.Builder) {
	t := refTrace{&d.Trace}
	t.writeLoads(b, "in flight (requests)")
	if d.Replica == t.Home {
		fmt.Fprintf(b, "\n  ring home %s has the fewest → %s", t.name(t.Home), t.name(d.Replica))
	} else {
		fmt.Fprintf(b, "\n  ring home %s is busier; first replica with the fewest clockwise from it → %s", t.name(t.Home), t.name(d.Replica))
	}
}

func refExplainModN(d *Decision, b *strings.Builder) {
	t := refTrace{&d.Trace}
	fmt.Fprintf(b, "\n  hash=%016x: mod %d = %d → %s", t.Hash, t.N, d.Replica, t.name(d.Replica))
}

func refExplainP2C(d *Decision, b *strings.Builder) {
	t := refTrace{&d.Trace}
	m := t.Int(p2Allowed)
	if d.Reason == P2COnly {
		fmt.Fprintf(b, "\n  %d replica allowed → %s", m, t.name(d.Replica))
		return
	}
	a, c := t.Cands[0], t.Cands[1]
	fmt.Fprintf(b, "\n  draw from hash=%016x seq=%d over %d allowed replicas: #%d=%s, #%d=%s",
		t.Hash, t.Seq, m, t.Int(p2First), t.name(int(a.Replica)), t.Int(p2Second), t.name(int(c.Replica)))
	if d.Reason == P2CLessKV {
		fmt.Fprintf(b, "\n  reported KV-cache use: %s=%.3f %s=%.3f", t.name(int(a.Replica)), a.At(p2Load), t.name(int(c.Replica)), c.At(p2Load))
	} else {
		fmt.Fprintf(b, "\n  in flight (requests): %s=%.0f %s=%.0f", t.name(int(a.Replica)), a.At(p2Load), t.name(int(c.Replica)), c.At(p2Load))
	}
	if a.At(p2Load) <= c.At(p2Load) {
		fmt.Fprintf(b, " → %s (first drawn, ≤)", t.name(d.Replica))
	} else {
		fmt.Fprintf(b, " → %s (second drawn, <)", t.name(d.Replica))
	}
}

func refExplainPredictive(d *Decision, b *strings.Builder) {
	t := refTrace{&d.Trace}
	fmt.Fprintf(b, "\n  request: prompt=%d output=%d", t.Prompt, t.Output)
	switch held := t.Int(pvHeld); {
	case held > 0 && t.Val(pvBelief) < 1:
		fmt.Fprintf(b, "; cache on %s: %d tokens of it (belief %.2f: %.0f tokens routed there since)", t.name(t.Last), held, t.Val(pvBelief), t.Val(pvSent))
	case held > 0:
		fmt.Fprintf(b, "; cache on %s: %d tokens of it", t.name(t.Last), held)
	case t.Val(pvBelief) == pvOther:
		fmt.Fprintf(b, "; the key's cache on %s (%d tokens) is longer than this prompt: another prompt's, not counted", t.name(t.Last), t.LastTokens)
	case t.Val(pvBelief) >= 0:
		fmt.Fprintf(b, "; cache on %s most likely gone (%.0f tokens routed there since)", t.name(t.Last), t.Val(pvSent))
	default:
		b.WriteString("; no cache known")
	}
	fmt.Fprintf(b, "; home %s; preferred %s", t.name(t.Home), t.name(t.Preferred))
	for i := range min(t.NCands, MaxTraceCands) {
		c := &t.Cands[i]
		v := &c.V
		T := v[pqQueue] + v[pqPrefill] + v[pqDecode] + v[pqMove]
		fmt.Fprintf(b, "\n  %s: queue %.2fs + prefill %.2fs (%.0f new @ %.0f tok/s) + decode %.2fs (%d @ %.1f tok/s) + move %.2fs = %.2fs",
			t.name(int(c.Replica)), v[pqQueue], v[pqPrefill], v[pqPrefill]*v[pqPrefillRate], v[pqPrefillRate],
			v[pqDecode], t.Output, v[pqDecodeRate], v[pqMove], T)
	}
	if t.N > t.NCands {
		fmt.Fprintf(b, "\n  … %d replicas in all", t.N)
	}
	pref, best := t.Val(pvPref), t.Val(pvBest)
	margin := t.Val(pvMargin)*pref + t.Val(pvMarginS)
	if d.Replica == t.Preferred {
		fmt.Fprintf(b, "\n  fastest %s %.2fs; preferred %s %.2fs is within %.2fs (margin %g×%.2f + %gs) → %s",
			t.name(int(t.Int(pvFaster))), best, t.name(t.Preferred), pref, margin, t.Val(pvMargin), pref, t.Val(pvMarginS), d.Reason)
	} else {
		fmt.Fprintf(b, "\n  preferred %s %.2fs; %s %.2fs is faster by %.2fs > margin %.2fs (%g×%.2f + %gs) → %s",
			t.name(t.Preferred), pref, t.name(d.Replica), best, pref-best, margin, t.Val(pvMargin), pref, t.Val(pvMarginS), d.Reason)
	}
}

func refExplainPrefixHash(d *Decision, b *strings.Builder) {
	t := refTrace{&d.Trace}
	runes, total, thr, pct := t.Int(phRunes), t.Int(phTotal), t.Val(phThreshold), t.Int(phPct)
	fmt.Fprintf(b, "\n  key: first %d characters of the first user message → hash=%016x → ring home %s", runes, t.Hash, t.name(t.Home))
	t.writeLoads(b, "in flight (requests)")
	fmt.Fprintf(b, "; threshold = (%d+1)/%d × %d%% = %.2f", total, t.N, pct, thr)
	checks := t.Checks[:min(t.NChecks, MaxTraceChecks)]
	for i, c := range checks {
		switch {
		case c.Idle:
			fmt.Fprintf(b, "\n  %s: nothing in flight anywhere → %s", t.name(int(c.Replica)), d.Reason)
		case c.Fit:
			fmt.Fprintf(b, "\n  %s: %d ≤ %.2f → %s", t.name(int(c.Replica)), c.Load, c.Limit, d.Reason)
		case d.Reason == PrefixDefault && i == 0:
			fmt.Fprintf(b, "\n  %s: %d > %.2f, and every replica is over the threshold → %s (the home)", t.name(int(c.Replica)), c.Load, c.Limit, d.Reason)
		default:
			fmt.Fprintf(b, "\n  %s: %d > %.2f → next", t.name(int(c.Replica)), c.Load, c.Limit)
		}
	}
	if t.NChecks > MaxTraceChecks {
		fmt.Fprintf(b, "\n  … %d more replicas checked", t.NChecks-MaxTraceChecks)
	}
}

func refExplainRoundRobin(d *Decision, b *strings.Builder) {
	t := refTrace{&d.Trace}
	fmt.Fprintf(b, "\n  request #%d: %d mod %d = %d → %s", t.Seq, t.Seq, t.N, d.Replica, t.name(d.Replica))
}

func refExplainScored(d *Decision, b *strings.Builder) {
	t := refTrace{&d.Trace}
	flags, lo, hi := t.Int(scFlags), t.Val(scQueueLo), t.Val(scQueueHi)
	fmt.Fprintf(b, "\n  score = %g·queue + %g·kv + %g·prefix", t.Val(scQueueWeight), t.Val(scKVWeight), t.Val(scPrefixWeight))
	if flags&scoredQueueFallback != 0 {
		fmt.Fprintf(b, "\n  queue: a replica's queue is unknown → router-side requests in flight, min %g max %g", lo, hi)
	} else {
		fmt.Fprintf(b, "\n  queue: reported waiting, min %g max %g", lo, hi)
	}
	if flags&scoredKVUnknown != 0 {
		b.WriteString("; kv: a replica's KV use is unknown → 0 for all")
	}
	for i := range min(t.NCands, MaxTraceCands) {
		c := &t.Cands[i]
		fmt.Fprintf(b, "\n  %s: queue %g → %.3f, kv %.3f, prefix %.3f → %.3f", t.name(int(c.Replica)),
			c.At(scColQueue), c.At(scColQueueScore), c.At(scColKVScore), c.At(scColPrefixScore), c.At(scColTotal))
	}
	if t.NCands > MaxTraceCands {
		fmt.Fprintf(b, "\n  … %d more replicas scored", t.NCands-MaxTraceCands)
	}
	if ties := t.Int(scTies); ties > 1 {
		fmt.Fprintf(b, "\n  %d replicas share the top score %.3f → the first clockwise from the home: %s", ties, t.Val(scTop), t.name(d.Replica))
	} else {
		fmt.Fprintf(b, "\n  top score %.3f → %s", t.Val(scTop), t.name(d.Replica))
	}
}

func refExplainBounded(d *Decision, b *strings.Builder) { refTrace{&d.Trace}.writeBounded(b, d, false) }

func refExplainLLMAware(d *Decision, b *strings.Builder) { refTrace{&d.Trace}.writeBounded(b, d, true) }

func (t refTrace) writeBounded(b *strings.Builder, d *Decision, llm bool) {
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

func (t refTrace) num(v float64) string {
	if t.Unit == Requests {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.1f", v)
}

func (t refTrace) writePlacement(b *strings.Builder) {
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

func (t refTrace) writeChecks(b *strings.Builder, d *Decision, prefCost int64) {
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

func (t refTrace) writeLoads(b *strings.Builder, label string) {
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

func (t refTrace) name(r int) string {
	if r >= 0 && r < len(t.Names) {
		return t.Names[r]
	}
	return fmt.Sprintf("#%d", r)
}
