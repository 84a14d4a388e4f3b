package policy

import (
	"fmt"
)

// CacheAware is SGLang's `cache_aware` routing policy (sgl-router, now the
// SGLang model gateway): shortest queue when the load is imbalanced, else
// the longest prefix match when it covers enough of the prompt, else the
// least loaded.
//
//	min, max   = fewest / most requests in flight among the allowed replicas
//	imbalanced = max − min > balance_abs_threshold  and  max > balance_rel_threshold × min
//	imbalanced             → the replica with the fewest requests in flight
//	else rate = best match ÷ prompt tokens (the best of Row.Match)
//	  rate > cache_threshold → the replica with that match
//	  otherwise              → the replica with the fewest requests in flight
//
// Source: sgl-project/sglang, sgl-model-gateway/src/policies/cache_aware.rs
// (commit b93974f140de), defaults from the gateway's documented CLI
// (bindings/python/src/sglang_router/router_args.py and
// docs/advanced_features/sgl_model_gateway.md: cache_threshold 0.3,
// balance_abs_threshold 64, balance_rel_threshold 1.5, max_tree_size 2^26).
// Below the threshold the code takes the least loaded worker, although the
// file's header comment still says "smallest tree size": this follows the
// code. "Least loaded" and "shortest queue" are both the gateway's own count
// of requests in flight per worker; ties go to the first worker in its list
// (Rust's min_by_key), here the first in name order.
//
// SGLang's approximate radix tree holds, per worker, the raw text of the
// requests it routed there, trimmed by an LRU eviction to max_tree_size
// characters, and matches characters. Here that tree is the routing state's
// prefix index (blocks of this prompt sent to each replica, LRU at
// prefix_index.capacity_tokens, with a TTL; and this conversation's last
// turn, from placement memory): Match is tokens, so the rate is Match ÷
// PromptTokens, in block steps rather than per character. The tree's size
// bound is the prefix index's capacity, not a setting of this policy.
//
// Deviations. min and max are taken over the replicas allowed for this
// request (SGLang takes them over every worker, healthy or not). Several
// replicas with the same best match: SGLang returns the first tenant of the
// deepest tree node (map order); here the first of them clockwise on the
// ring from the conversation's home.
//
// Its settings (config key policies.cache-aware) are the struct itself.
type CacheAware struct {
	// CacheThreshold: the match rate above which the best match wins.
	// Default 0.3.
	CacheThreshold float64 `json:"cache_threshold"`
	// BalanceAbsThreshold: imbalanced needs max − min above this many
	// requests in flight. Default 64.
	BalanceAbsThreshold int64 `json:"balance_abs_threshold"`
	// BalanceRelThreshold: imbalanced needs max above this × min. Default 1.5.
	BalanceRelThreshold float64 `json:"balance_rel_threshold"`
}

var _ Policy = (*CacheAware)(nil)

// Reason codes of cache-aware.
const (
	// CacheImbalanced: the load was imbalanced; the shortest queue took it.
	CacheImbalanced Reason = "imbalanced"
	// CacheMatch: the best prefix match covered more than cache_threshold
	// of the prompt.
	CacheMatch Reason = "prefix-match"
	// CacheLowMatch: no match covered enough of the prompt; the least loaded
	// took it.
	CacheLowMatch Reason = "low-match"
)

// Name implements Policy.
func (*CacheAware) Name() string { return "cache-aware" }

// Validate implements Settings.
func (c *CacheAware) Validate() error {
	if !(c.CacheThreshold >= 0 && c.CacheThreshold <= 1) {
		return fmt.Errorf("cache_threshold: must be between 0 and 1, got %g", c.CacheThreshold)
	}
	if c.BalanceAbsThreshold < 0 {
		return fmt.Errorf("balance_abs_threshold: must be ≥ 0, got %d", c.BalanceAbsThreshold)
	}
	if !(c.BalanceRelThreshold >= 0 && finite(c.BalanceRelThreshold)) {
		return fmt.Errorf("balance_rel_threshold: must be a number ≥ 0, got %g", c.BalanceRelThreshold)
	}
	return nil
}

// Slots of a cache-aware trace.
const (
	caThreshold ValSlot = iota // cache_threshold
	caRel                      // balance_rel_threshold
	caRate                     // the best match's share of the prompt
)

const (
	caLo        IntSlot = iota // fewest requests in flight
	caHi                       // most
	caBestMatch                // the best match, tokens
	caAbs                      // balance_abs_threshold
)

// Columns of a cache-aware candidate.
const (
	caColInflight Col = iota
	caColMatched
)

// Pick implements Policy.
func (c *CacheAware) Pick(req *Request, v *View, d *Decision) {
	*d = Decision{}
	t := &d.Trace
	t.begin("cache-aware", req, v)
	t.Explain = explainCacheAware
	d.Charge = wholeCost(req)
	lo, hi, least := int64(-1), int64(-1), -1 // least: v.leastRequests(), found in the same pass
	bestMatch, bestAt, nBest := 0, -1, 0
	for r := range v.Rows {
		row := &v.Rows[r]
		if r < MaxTraceCands {
			t.addCand(r, float64(row.Load.Requests), float64(row.Match))
		}
		if v.Excluded(r) {
			continue
		}
		l := row.Load.Requests
		if lo < 0 || l < lo {
			lo, least = l, r
		}
		if l > hi {
			hi = l
		}
		switch {
		case row.Match > bestMatch:
			bestMatch, bestAt, nBest = row.Match, r, 1
		case row.Match == bestMatch:
			nBest++
		}
	}
	t.setInt(caLo, lo)
	t.setInt(caHi, hi)
	t.setInt(caBestMatch, int64(bestMatch))
	t.setInt(caAbs, c.BalanceAbsThreshold)
	t.setVal(caThreshold, c.CacheThreshold)
	t.setVal(caRel, c.BalanceRelThreshold)
	if hi-lo > c.BalanceAbsThreshold && float64(hi) > float64(lo)*c.BalanceRelThreshold {
		d.Replica, d.Reason = least, CacheImbalanced
		return
	}
	rate := 0.0
	if req.PromptTokens > 0 {
		rate = min(1, float64(bestMatch)/float64(req.PromptTokens))
	}
	t.setVal(caRate, rate)
	if bestMatch > 0 && rate > c.CacheThreshold {
		d.Replica, d.Reason = bestAt, CacheMatch
		if nBest > 1 { // a tie: the first clockwise from the home (a walk)
			d.Replica = v.ringFirst(req.Hash, func(r int) bool { return v.Rows[r].Match == bestMatch })
		}
		return
	}
	d.Replica, d.Reason = least, CacheLowMatch
}

func explainCacheAware(d *Decision, b []byte) []byte {
	t := &d.Trace
	lo, hi, thr, best := t.Int(caLo), t.Int(caHi), t.Val(caThreshold), t.Int(caBestMatch)
	abs, rel, rate := t.Int(caAbs), t.Val(caRel), t.Val(caRate)
	w := text(b).s("\n  in flight / matched tokens: ")
	for i := range min(t.NCands, MaxTraceCands) {
		c := &t.Cands[i]
		if i > 0 {
			w = append(w, ' ')
		}
		w = w.name(t, int(c.Replica)).s("=").f(c.At(caColInflight), 0).s("/").f(c.At(caColMatched), 0)
	}
	if t.N > MaxTraceCands {
		w = w.s(" … (").i(t.N).s(" replicas)")
	}
	if d.Reason == CacheImbalanced {
		return w.s("\n  imbalanced: max−min = ").d(hi).s("−").d(lo).s(" = ").d(hi-lo).s(" > ").d(abs).
			s(" and ").d(hi).s(" > ").g(rel).s("×").d(lo).s(" → shortest queue: ").name(t, d.Replica)
	}
	w = w.s("\n  balanced: max−min = ").d(hi).s("−").d(lo).s(" = ").d(hi - lo)
	if hi-lo > abs {
		w = w.s(" > ").d(abs).s(" but ").d(hi).s(" ≤ ").g(rel).s("×").d(lo)
	} else {
		w = w.s(" ≤ ").d(abs)
	}
	w = w.s("\n  best match ").d(best).s(" of ").i(t.Prompt).s(" prompt tokens = ").f(rate, 3)
	if d.Reason == CacheMatch {
		return w.s(" > ").g(thr).s(" → ").name(t, d.Replica).s(" (the best match, first clockwise from the home on a tie)")
	}
	return w.s(" ≤ ").g(thr).s(" → least loaded: ").name(t, d.Replica)
}
