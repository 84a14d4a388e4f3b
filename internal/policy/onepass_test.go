package policy

import (
	"math/rand/v2"
	"reflect"
	"testing"
)

// The references: cache-aware's and scored's picks as they were before
// their passes over the rows were merged (issue 21: cache-aware found the
// least loaded in a second pass, scored read the reports' presence and
// the queue range in two). Kept verbatim as the definition.

func refCacheAwarePick(c *CacheAware, req *Request, v *View, d *Decision) {
	*d = Decision{}
	t := &d.Trace
	t.begin("cache-aware", req, v)
	t.Explain = explainCacheAware
	d.Charge = wholeCost(req)
	lo, hi := int64(-1), int64(-1)
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
			lo = l
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
		d.Replica, d.Reason = v.leastRequests(), CacheImbalanced
		return
	}
	rate := 0.0
	if req.PromptTokens > 0 {
		rate = min(1, float64(bestMatch)/float64(req.PromptTokens))
	}
	t.setVal(caRate, rate)
	if bestMatch > 0 && rate > c.CacheThreshold {
		d.Replica, d.Reason = bestAt, CacheMatch
		if nBest > 1 {
			d.Replica = v.ringFirst(req.Hash, func(r int) bool { return v.Rows[r].Match == bestMatch })
		}
		return
	}
	d.Replica, d.Reason = v.leastRequests(), CacheLowMatch
}

// refQueueRange is scored's first two passes as they were.
func refQueueRange(v *View) (reported, kvKnown bool, lo, hi float64) {
	reported, kvKnown = true, true
	for r := range v.Rows {
		if !v.Excluded(r) {
			reported = reported && v.Rows[r].Reported.HasQueue
			kvKnown = kvKnown && v.Rows[r].Reported.HasKV
		}
	}
	queue := func(r int) float64 {
		if reported {
			return v.Rows[r].Reported.Waiting
		}
		return float64(v.Rows[r].Load.Requests)
	}
	first := true
	for r := range v.Rows {
		if v.Excluded(r) {
			continue
		}
		q := queue(r)
		if first || q < lo {
			lo = q
		}
		if first || q > hi {
			hi = q
		}
		first = false
	}
	return reported, kvKnown, lo, hi
}

// onePassView is randomView with few distinct loads and matches (ties at
// the best match, loads that are balanced or not), and at times every
// replica reporting.
func onePassView(rng *rand.Rand) *View {
	v := randomView(rng, 1+rng.IntN(150))
	spread := []int64{2, 40, 200}[rng.IntN(3)]
	all := rng.IntN(2) == 0
	for i := range v.Rows {
		v.Rows[i].Load.Requests = rng.Int64N(spread)
		v.Rows[i].Match = []int{0, 0, 500, 900, 900}[rng.IntN(5)]
		if all {
			v.Rows[i].Reported.HasQueue = true
		}
	}
	v.Recount()
	return v
}

// TestOnePassPicksAreThePicks: cache-aware and scored decide as their
// references do (the same replica, reason, charge and trace) on random
// views; and scored's merged first pass returns what its two passes did.
func TestOnePassPicksAreThePicks(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 5))
	ca := mustNew(t, "cache-aware", nil).(*CacheAware)
	reasons := map[Reason]int{}
	for i := range 5000 {
		v := onePassView(rng)
		req := randomRequest(rng, uint64(i), len(v.Rows))
		req.PromptTokens = []int{0, 1000, 2000, 5000}[rng.IntN(4)]
		var got, want Decision
		ca.Pick(&req, v, &got)
		refCacheAwarePick(ca, &req, v, &want)
		reasons[got.Reason]++
		got.Trace.Explain, want.Trace.Explain = nil, nil
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("pick %d: cache-aware decided %+v, the reference %+v", i, got, want)
		}
		r1, k1, lo1, hi1 := queueRange(v)
		r2, k2, lo2, hi2 := refQueueRange(v)
		if r1 != r2 || k1 != k2 || lo1 != lo2 || hi1 != hi2 {
			t.Fatalf("view %d: queueRange %v %v %g %g, the reference %v %v %g %g", i, r1, k1, lo1, hi1, r2, k2, lo2, hi2)
		}
	}
	for _, r := range []Reason{CacheImbalanced, CacheMatch, CacheLowMatch} {
		if reasons[r] < 250 {
			t.Fatalf("%d picks for %s: the views no longer exercise it (%v)", reasons[r], r, reasons)
		}
	}
}
