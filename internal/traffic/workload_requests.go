package traffic

import (
	"cmp"
	"math/rand/v2"
	"slices"
)

// WorkloadRequest is one request of an open-loop workload: a trace request
// (its blocks say what it shares) and its conversation name
// (StageConversation).
type WorkloadRequest struct {
	TraceRequest
	Conversation string
	// Target is the model (and adapter) it asks for; zero without models.
	Target
}

func blocksOf(tokens int) int { return (tokens + TraceBlockTokens - 1) / TraceBlockTokens }

// Requests lists the requests of w under the given arrivals, in time
// order (ties: arrival order), from seed (which picks the shared-prefix
// pairs; the targets, with models, from a stream of their own). Block ids:
// a system prompt's blocks are shared by everyone who uses it with the same
// target; everything else is its own, except a multi-round user's history,
// which each of the user's rounds repeats. Without models there is one
// target, and the ids are those of a single-model workload.
func (w *Workload) Requests(arrivals []Arrival, seed int64) []WorkloadRequest {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x3017))
	pick := w.newPicker(seed)
	nsN := pick.namespaces()
	var out []WorkloadRequest
	ns := 0
	add := func(a Arrival, i, round int, atS float64, input int, ids []int64) {
		out = append(out, WorkloadRequest{
			TraceRequest: TraceRequest{Line: len(out) + 1, TimestampMS: int64(atS * 1000), InputLength: input,
				OutputLength: w.OutputTokens, HashIDs: ids},
			Conversation: StageConversation(a, i, round),
			Target:       pick.targets[ns],
		})
	}
	sysBlocks := blocksOf(w.SystemTokens)
	for i, a := range arrivals {
		if w.Kind == KindMultiRound && i%w.Rounds != 0 {
			continue // a rate is of requests: a new user every Rounds arrivals
		}
		ns = pick.next()
		switch w.Kind {
		case KindSharedPrefix:
			g, q := rng.IntN(w.Groups), rng.IntN(w.PromptsPerGroup)
			g += ns * w.Groups // each target its own system prompts
			qb := blocksOf(w.QuestionTokens)
			ids := make([]int64, 0, sysBlocks+qb)
			for j := range sysBlocks {
				ids = append(ids, int64(g*sysBlocks+j))
			}
			base := int64(nsN*w.Groups*sysBlocks + (g*w.PromptsPerGroup+q)*qb)
			for j := range qb {
				ids = append(ids, base+int64(j))
			}
			add(a, i, 0, a.AtS, sysBlocks*TraceBlockTokens+w.QuestionTokens, ids)
		case KindMultiRound:
			roundTokens := w.QuestionTokens + w.AnswerTokens
			maxBlocks := blocksOf(w.Rounds * roundTokens)
			base := int64(nsN*sysBlocks + i*maxBlocks)
			for r := range w.Rounds {
				hist := r*roundTokens + w.QuestionTokens
				ids := make([]int64, 0, sysBlocks+blocksOf(hist))
				for j := range sysBlocks {
					ids = append(ids, int64(ns*sysBlocks+j))
				}
				for j := range blocksOf(hist) {
					ids = append(ids, base+int64(j))
				}
				add(a, i, r, a.AtS+float64(r)*w.RoundGapS, sysBlocks*TraceBlockTokens+hist, ids)
			}
		case KindLowSharing:
			nb := blocksOf(w.PromptTokens)
			ids := make([]int64, nb)
			for j := range ids {
				ids[j] = int64(i*nb + j)
			}
			add(a, i, 0, a.AtS, w.PromptTokens, ids)
		}
	}
	slices.SortStableFunc(out, func(a, b WorkloadRequest) int { return cmp.Compare(a.TimestampMS, b.TimestampMS) })
	for i := range out {
		out[i].Line = i + 1
	}
	return out
}

// IdealCachedShare is the share of the prompt tokens of reqs (in time
// order) that repeat a prefix already seen earlier in the same traffic:
// what one infinite cache would hold, the limit no routing can pass. A
// block counts up to the tokens of it seen before under the same chain of
// earlier blocks (a cut last block is a prefix of the full one).
func IdealCachedShare(reqs []TraceRequest) float64 {
	all, _ := idealShares(reqs, nil)
	return all
}

// IdealCachedShareByStage is IdealCachedShare over a workload's requests,
// and over each stage's (index: stage, from ParseStage; the warm-up fills
// the cache and counts in no stage).
func IdealCachedShareByStage(reqs []WorkloadRequest) (float64, []float64) {
	trace := make([]TraceRequest, len(reqs))
	stage := make([]int, len(reqs))
	for i := range reqs {
		trace[i] = reqs[i].TraceRequest
		k, _, _, ok := ParseStage(reqs[i].Conversation)
		if !ok {
			k = -1
		}
		stage[i] = k
	}
	return idealShares(trace, stage)
}

func idealShares(reqs []TraceRequest, stage []int) (float64, []float64) {
	seen := map[uint64]int{} // chain hash of blocks 0..j → most tokens of block j seen
	var cached, total int64
	var sc, st []int64
	for i := range reqs {
		r := &reqs[i]
		c := idealCached(r, seen)
		cached += c
		total += int64(r.InputLength)
		if stage != nil && stage[i] >= 0 {
			for len(sc) <= stage[i] {
				sc, st = append(sc, 0), append(st, 0)
			}
			sc[stage[i]] += c
			st[stage[i]] += int64(r.InputLength)
		}
	}
	by := make([]float64, len(sc))
	for k := range sc {
		by[k] = share(sc[k], st[k])
	}
	return share(cached, total), by
}

func share(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// idealCached counts the tokens of r found in seen, then adds r's blocks.
func idealCached(r *TraceRequest, seen map[uint64]int) int64 {
	var h uint64
	var cached int64
	hit := true
	for j, id := range r.HashIDs {
		h = chainID(h, id)
		n := min(TraceBlockTokens, r.InputLength-j*TraceBlockTokens)
		if n <= 0 {
			break
		}
		prev, ok := seen[h]
		if hit && ok {
			cached += int64(min(n, prev))
			hit = prev >= n
		} else {
			hit = false
		}
		seen[h] = max(prev, n)
	}
	return cached
}

func chainID(h uint64, id int64) uint64 {
	x := h ^ (uint64(id) + 0x9E3779B97F4A7C15 + h<<6 + h>>2)
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9
	x = (x ^ (x >> 27)) * 0x94D049BB133111EB
	return x ^ (x >> 31)
}
