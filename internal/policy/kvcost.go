package policy

import (
	"fmt"
)

// KVCost is NVIDIA Dynamo's KV router: each replica's cost is the prefill it
// would do (prompt blocks not cached there) plus the decode blocks it would
// hold, and the cheapest replica takes the request (temperature 0).
//
//	B             = block_size tokens
//	cached(r)     = ⌊min(Match_r, P) / B⌋ blocks                     (P = prompt tokens)
//	prefill(r)    = (P − cached(r)·B) / B                            (fractional, as Dynamo)
//	decode(r)     = ⌈in-flight tokens on r / B⌉ + ⌈P / B⌉            (active blocks + this request's)
//	cost(r)       = overlap_score_weight · prefill(r) + decode(r)
//	pick the lowest cost
//
// Sources: ai-dynamo/dynamo, lib/llm/src/kv_router/scheduler.rs
// (DefaultWorkerSelector: logit = overlap_score_weight ×
// potential_prefill_block + decode_block, softmax_sample returning the
// minimum at temperature 0); the KV router docs (docs.nvidia.com/dynamo,
// archive 0.4.0 "KV Router", v0.8.1 "Cost Function", v1.0.0 frontend
// configuration reference: --router-kv-overlap-score-weight 1.0,
// --router-temperature 0.0, --no-router-kv-events = approximate mode with a
// block TTL of 120 s, --router-track-output-blocks false). Later Dynamo
// versions (lib/kv-router/src/scheduling/selector.rs, 2026) refine the same
// formula with prefill backlog, host/disk cache credits and decay; this
// follows the documented two-term form.
//
// Approximate mode. Dynamo normally learns what each worker caches from the
// engines' KV events; llm-ring's replicas publish none, so this uses
// Dynamo's documented fallback (--no-kv-events): the router predicts each
// worker's cache from its own routing decisions, with a TTL. That prediction
// is the routing state's prefix index (and placement memory), read as Match.
//
// Deviations. Active blocks come from the router's in-flight token load
// (the sum of this policy's charges: each request charges its prompt
// tokens, as Dynamo tracks prompt blocks and no output blocks by default),
// rounded up to blocks once per replica; Dynamo counts blocks per sequence
// and dedupes blocks shared by active sequences. B is the engine's KV block
// size in Dynamo (vLLM's default: 16 tokens); here a setting. Ties: Dynamo
// picks randomly among equal minimum costs (or by hash-map order); here the
// first of them clockwise on the ring from the conversation's home.
//
// Its settings (config key policies.kv-cost) are the struct itself.
type KVCost struct {
	// OverlapScoreWeight weighs the prefill term against the decode term.
	// Default 1.0 (Dynamo's kv-overlap-score-weight).
	OverlapScoreWeight float64 `json:"overlap_score_weight"`
	// BlockSize is the KV block size in tokens. Default 16 (vLLM's).
	BlockSize int `json:"block_size"`
}

var _ Policy = (*KVCost)(nil)

// Reason codes of kv-cost.
const (
	// KVLowest: the replica had the lowest cost.
	KVLowest Reason = "lowest-cost"
	// KVTie: several replicas shared the lowest cost; the first of them
	// clockwise from the conversation's home took it.
	KVTie Reason = "lowest-cost-tie"
)

// Name implements Policy.
func (*KVCost) Name() string { return "kv-cost" }

// Validate implements Settings.
func (k *KVCost) Validate() error {
	if !(k.OverlapScoreWeight >= 0 && k.OverlapScoreWeight <= 1e6) {
		return fmt.Errorf("overlap_score_weight: must be ≥ 0 and ≤ 1e6, got %g", k.OverlapScoreWeight)
	}
	if k.BlockSize < 1 || k.BlockSize > 1<<16 {
		return fmt.Errorf("block_size: must be ≥ 1 and ≤ 65536 tokens, got %d", k.BlockSize)
	}
	return nil
}

// Slots of a kv-cost trace.
const (
	kvWeight   ValSlot = iota // overlap_score_weight
	kvBestCost                // the lowest cost
)

const (
	kvBlockSize IntSlot = iota // tokens per block
	kvReqBlocks                // the prompt's blocks
	kvTies                     // candidates sharing the lowest cost
)

// Columns of a kv-cost candidate.
const (
	kvColMatched Col = iota // tokens its prefix index matched
	kvColCached             // whole blocks of them
	kvColPrefill            // blocks to prefill
	kvColActive             // blocks in flight there
	kvColCost
)

// Pick implements Policy.
func (k *KVCost) Pick(req *Request, v *View, d *Decision) {
	*d = Decision{}
	t := &d.Trace
	t.begin("kv-cost", req, v)
	t.Explain = explainKVCost
	p := int64(max(req.PromptTokens, 0))
	d.Charge = p
	bs := int64(k.BlockSize)
	reqBlocks := (p + bs - 1) / bs
	cost := func(r int) (cached int64, prefill float64, active int64, total float64) {
		row := &v.Rows[r]
		cached = min(int64(max(row.Match, 0)), p) / bs
		prefill = float64(p-cached*bs) / float64(bs)
		active = (max(row.Load.Tokens, 0) + bs - 1) / bs
		total = k.OverlapScoreWeight*prefill + float64(active+reqBlocks)
		return
	}
	low := newBest(false)
	for r := range v.Rows {
		if v.Excluded(r) {
			continue
		}
		cached, prefill, active, total := cost(r)
		t.addCand(r, float64(v.Rows[r].Match), float64(cached), prefill, float64(active), total)
		low.offer(r, total)
	}
	t.setVal(kvWeight, k.OverlapScoreWeight)
	t.setVal(kvBestCost, low.val)
	t.setInt(kvBlockSize, bs)
	t.setInt(kvReqBlocks, reqBlocks)
	t.setInt(kvTies, int64(low.ties))
	var tie bool
	d.Replica, tie = low.pick(v, req.Hash, func(r int) float64 { _, _, _, total := cost(r); return total })
	d.Reason = KVLowest
	if tie {
		d.Reason = KVTie
	}
	cached, prefill, active, total := cost(d.Replica)
	t.keepChosen(d.Replica, float64(v.Rows[d.Replica].Match), float64(cached), prefill, float64(active), total)
}

func explainKVCost(d *Decision, b []byte) []byte {
	t := &d.Trace
	reqBlocks, bestCost := t.Int(kvReqBlocks), t.Val(kvBestCost)
	w := text(b).s("\n  block ").d(t.Int(kvBlockSize)).s(" tokens; prompt ").i(t.Prompt).s(" tokens = ").d(reqBlocks).
		s(" blocks; cost = ").g(t.Val(kvWeight)).s(" × prefill blocks + (active blocks + ").d(reqBlocks).s(")")
	for i := range min(t.NCands, MaxTraceCands) {
		c := &t.Cands[i]
		w = w.s("\n  ").name(t, int(c.Replica)).s(": matched ").f(c.At(kvColMatched), 0).s(" tokens = ").
			f(c.At(kvColCached), 0).s(" cached blocks → prefill ").f(c.At(kvColPrefill), 3).s("; active ").
			f(c.At(kvColActive), 0).s(" → decode ").f(c.At(kvColActive)+float64(reqBlocks), 0).s("; cost ").
			f(c.At(kvColCost), 3)
	}
	if t.NCands > MaxTraceCands {
		w = w.s("\n  … ").i(t.NCands - MaxTraceCands).s(" more replicas costed")
	}
	if ties := t.Int(kvTies); ties > 1 {
		return w.s("\n  ").d(ties).s(" replicas share the lowest cost ").f(bestCost, 3).
			s(" → the first clockwise from the home: ").name(t, d.Replica)
	}
	return w.s("\n  lowest cost ").f(bestCost, 3).s(" → ").name(t, d.Replica)
}
