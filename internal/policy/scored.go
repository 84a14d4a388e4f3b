package policy

import (
	"fmt"
)

// Scored is the default scheduling profile of the Gateway API Inference
// Extension's endpoint picker (EPP), which the llm-d inference scheduler
// ships unchanged: three scorers, each in [0, 1], summed with weights, and
// the max-score picker.
//
//	queue(r)  = (max q − q_r) / (max q − min q)   (1 for all when max = min)
//	            q = the replica-reported waiting queue
//	kv(r)     = 1 − reported KV-cache use
//	prefix(r) = matched ÷ prompt (blocks in the EPP; here Match ÷ PromptTokens, ≤ 1)
//	score(r)  = queue_weight·queue + kv_cache_weight·kv + prefix_weight·prefix
//	pick the highest score
//
// Sources: kubernetes-sigs/gateway-api-inference-extension v1.3.0
// (config/charts/inferencepool/templates/epp-config.yaml: queue-scorer 2,
// kv-cache-utilization-scorer 2, prefix-cache-scorer 3;
// pkg/epp/scheduling/framework/plugins/scorer/queue.go and
// kvcache_utilization.go; plugins/multi/prefix/plugin.go; picker/
// max_score_picker.go), the same weights in v1.5.0
// (config/charts/epplib/templates/_config.yaml), and llm-d/
// llm-d-inference-scheduler at 520af47896e5 (config/charts/epplib/
// templates/_config.yaml, pkg/epp/framework/plugins/scheduling/scorer/
// queuedepth, kvcacheutilization, prefix; picker/maxscore).
//
// Deviations. The EPP's prefix index hashes 64-character blocks of the
// prompt (up to 256 of them) and counts whole blocks; here Match comes from
// the routing state's indexers (its prefix index and placement memory) in
// tokens. A replica whose queue is unknown (no report, or a failed scrape)
// makes the queue scorer use the router's own count of requests in flight
// for every candidate, so that the scores compare like with like; a replica
// whose KV use is unknown makes the KV scorer give every candidate 0 (it
// drops out of the decision). The EPP shuffles before its max-score sort, so
// ties are random; here a tie goes to the first tied replica clockwise on
// the ring from the conversation's home.
//
// Its settings (config key policies.scored) are the struct itself.
type Scored struct {
	// QueueWeight weighs the queue scorer. Default 2.
	QueueWeight float64 `json:"queue_weight"`
	// KVCacheWeight weighs the KV-cache-utilisation scorer. Default 2.
	KVCacheWeight float64 `json:"kv_cache_weight"`
	// PrefixWeight weighs the prefix-cache scorer. Default 3.
	PrefixWeight float64 `json:"prefix_weight"`
}

var _ Policy = (*Scored)(nil)

// Reason codes of scored.
const (
	// ScoredTop: the replica had the highest weighted score.
	ScoredTop Reason = "top-score"
	// ScoredTie: several replicas had the highest score; the first of them
	// clockwise from the conversation's home took it.
	ScoredTie Reason = "top-score-tie"
)

// Name implements Policy.
func (*Scored) Name() string { return "scored" }

// Validate implements Settings.
func (s *Scored) Validate() error {
	for _, w := range []struct {
		key string
		v   float64
	}{{"queue_weight", s.QueueWeight}, {"kv_cache_weight", s.KVCacheWeight}, {"prefix_weight", s.PrefixWeight}} {
		if !(w.v >= 0 && w.v <= 1e6) {
			return fmt.Errorf("%s: must be ≥ 0 and ≤ 1e6, got %g", w.key, w.v)
		}
	}
	if s.QueueWeight+s.KVCacheWeight+s.PrefixWeight == 0 {
		return fmt.Errorf("queue_weight: the three weights must not all be 0")
	}
	return nil
}

// Slots of a scored trace.
const (
	scQueueWeight ValSlot = iota
	scKVWeight
	scPrefixWeight
	scQueueLo // the least queue among the candidates
	scQueueHi // the longest
	scTop     // the top score
)

const (
	scFlags IntSlot = iota // scoredQueueFallback | scoredKVUnknown
	scTies                 // candidates sharing the top score
)

// Columns of a scored candidate.
const (
	scColQueue Col = iota
	scColQueueScore
	scColKVScore
	scColPrefixScore
	scColTotal
)

// Flags in the scFlags slot of a scored trace.
const (
	scoredQueueFallback = 1 // queue from router-side requests in flight
	scoredKVUnknown     = 2 // KV scorer dropped out
)

// Pick implements Policy.
func (s *Scored) Pick(req *Request, v *View, d *Decision) {
	*d = Decision{}
	t := &d.Trace
	t.begin("scored", req, v)
	t.Explain = explainScored
	d.Charge = wholeCost(req)
	reported, kvKnown, lo, hi := queueRange(v)
	queue := func(r int) float64 {
		if reported {
			return v.Rows[r].Reported.Waiting
		}
		return float64(v.Rows[r].Load.Requests)
	}
	score := func(r int) (qs, ks, ps, total float64) {
		qs = 1
		if hi > lo {
			qs = (hi - queue(r)) / (hi - lo)
		}
		if kvKnown {
			ks = 1 - min(1, max(0, v.Rows[r].Reported.KVUse))
		}
		if req.PromptTokens > 0 {
			ps = min(1, float64(v.Rows[r].Match)/float64(req.PromptTokens))
		}
		total = s.QueueWeight*qs + s.KVCacheWeight*ks + s.PrefixWeight*ps
		return
	}
	top := newBest(true)
	for r := range v.Rows {
		if v.Excluded(r) {
			continue
		}
		qs, ks, ps, total := score(r)
		t.addCand(r, queue(r), qs, ks, ps, total)
		top.offer(r, total)
	}
	var flags int64
	if !reported {
		flags |= scoredQueueFallback
	}
	if !kvKnown {
		flags |= scoredKVUnknown
	}
	t.setVal(scQueueWeight, s.QueueWeight)
	t.setVal(scKVWeight, s.KVCacheWeight)
	t.setVal(scPrefixWeight, s.PrefixWeight)
	t.setVal(scQueueLo, lo)
	t.setVal(scQueueHi, hi)
	t.setVal(scTop, top.val)
	t.setInt(scFlags, flags)
	t.setInt(scTies, int64(top.ties))
	var tie bool
	d.Replica, tie = top.pick(v, req.Hash, func(r int) float64 { _, _, _, total := score(r); return total })
	d.Reason = ScoredTop
	if tie {
		d.Reason = ScoredTie
	}
	qs, ks, ps, total := score(d.Replica)
	t.keepChosen(d.Replica, queue(d.Replica), qs, ks, ps, total)
}

func explainScored(d *Decision, b []byte) []byte {
	t := &d.Trace
	flags, lo, hi := t.Int(scFlags), t.Val(scQueueLo), t.Val(scQueueHi)
	w := text(b).s("\n  score = ").g(t.Val(scQueueWeight)).s("·queue + ").g(t.Val(scKVWeight)).s("·kv + ").
		g(t.Val(scPrefixWeight)).s("·prefix")
	if flags&scoredQueueFallback != 0 {
		w = w.s("\n  queue: a replica's queue is unknown → router-side requests in flight, min ").g(lo).s(" max ").g(hi)
	} else {
		w = w.s("\n  queue: reported waiting, min ").g(lo).s(" max ").g(hi)
	}
	if flags&scoredKVUnknown != 0 {
		w = w.s("; kv: a replica's KV use is unknown → 0 for all")
	}
	for i := range min(t.NCands, MaxTraceCands) {
		c := &t.Cands[i]
		w = w.s("\n  ").name(t, int(c.Replica)).s(": queue ").g(c.At(scColQueue)).s(" → ").f(c.At(scColQueueScore), 3).
			s(", kv ").f(c.At(scColKVScore), 3).s(", prefix ").f(c.At(scColPrefixScore), 3).s(" → ").f(c.At(scColTotal), 3)
	}
	if t.NCands > MaxTraceCands {
		w = w.s("\n  … ").i(t.NCands - MaxTraceCands).s(" more replicas scored")
	}
	if ties := t.Int(scTies); ties > 1 {
		return w.s("\n  ").d(ties).s(" replicas share the top score ").f(t.Val(scTop), 3).
			s(" → the first clockwise from the home: ").name(t, d.Replica)
	}
	return w.s("\n  top score ").f(t.Val(scTop), 3).s(" → ").name(t, d.Replica)
}

// queueRange is the first pass of a scored pick over the candidates:
// whether they all report their queue (reported) and their KV use
// (kvKnown), and the least and the longest queue, the reported waiting
// requests if all report it, else the router's requests in flight. Both
// ranges are taken in the one pass.
func queueRange(v *View) (reported, kvKnown bool, lo, hi float64) {
	reported, kvKnown = true, true
	var loW, hiW, loR, hiR float64
	first := true
	for r := range v.Rows {
		if v.Excluded(r) {
			continue
		}
		row := &v.Rows[r]
		reported = reported && row.Reported.HasQueue
		kvKnown = kvKnown && row.Reported.HasKV
		w, q := row.Reported.Waiting, float64(row.Load.Requests)
		if first || w < loW {
			loW = w
		}
		if first || w > hiW {
			hiW = w
		}
		if first || q < loR {
			loR = q
		}
		if first || q > hiR {
			hiR = q
		}
		first = false
	}
	if reported {
		return true, kvKnown, loW, hiW
	}
	return false, kvKnown, loR, hiR
}
