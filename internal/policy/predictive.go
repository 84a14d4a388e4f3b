package policy

import (
	"fmt"
)

// Predictive sends each request to the replica where it is predicted to
// finish first, counting what the choice costs the conversation's
// following turns. For every candidate replica r, in seconds:
//
//	T(r) = queue(r) + prefill(r) + decode(r) + move(r)
//
//	queue(r)   = work(r) ÷ pf(r)
//	prefill(r) = max(1, prompt − cached(r)) ÷ pf(r)
//	decode(r)  = output ÷ dc(r)
//	move(r)    = move_turns × (held − cached(r)) ÷ pf(r)   (0 where the cache is, or with none)
//
// work(r) is the tokens in flight there: the router's own count (the sum of
// the charges of the requests it sent, each its new prompt tokens plus its
// output), raised, when the replica's own report is fresh (younger than
// stale_after) and counts more requests than the router has in flight
// (other routers' traffic), by the extra requests at the mean charge. A
// replica serves what it already has before or alongside this request
// (continuous batching shares one compute), so all of it is ahead.
//
// pf and dc are the replica's learned prefill and decode rates (tokens/s;
// the decode rate per sequence under the batching the replica was doing),
// until its first answer teaches them the mean of the rates learned on the
// other replicas, or the documented priors while none has answered.
//
// cached(r) is the tokens of this prompt believed cached on r (the view's
// Match: placement memory and the prefix index). held is what the
// conversation's last replica holds of it (placement memory), times the
// belief that it is still there: 1 − SentSince ÷ cache_tokens, clamped to
// [0, 1] (SentSince: the tokens routed there since the conversation's last
// answer). A cache most likely gone (held 0) is no cache: the conversation
// is then placed like a new one, and moving it is free. Moving away
// pays the reprocessing now (in prefill) and again as extra work that the
// following turns, and the requests queued behind them, wait through: that
// is move(r), priced at move_turns turns.
//
// The preferred replica is the one holding the conversation's cache (its
// last replica), else the ring home. It wins unless another replica is
// predicted faster by more than the margin (margin × T(preferred) +
// margin_s): ties and near-ties go to it, so two routers with the same
// view agree, and a new conversation goes home unless home is clearly
// slower. Reasons: cache (stayed with the cache), home (ring home),
// faster (another replica, nothing cached left behind), prefix (another
// replica that holds a shared prefix of this prompt), spill (left the
// replica holding the conversation's cache, which was predicted clearly
// slower even after paying to move).
//
// Pick is O(N) in replicas and does not allocate. Its settings (config key
// policies.predictive) are the struct itself.
type Predictive struct {
	// PriorPrefill is the prefill rate, tokens/s, assumed for a replica
	// that has not answered yet while no replica has (after that, the
	// mean of the learned rates). Default 80: the study's CPU replica
	// (Qwen2.5-0.5B, 12.7 ms per token in a step ≈ 79 tokens/s).
	PriorPrefill float64 `json:"prior_prefill_tps"`
	// PriorDecode is the decode rate per sequence, tokens/s, assumed for a
	// replica that has not answered yet while no replica has. Default 20: the study's replica
	// with two or three sequences in its batch (31.5 tokens/s alone,
	// 14.4 with four).
	PriorDecode float64 `json:"prior_decode_tps"`
	// MoveTurns prices leaving the replica that holds the conversation's
	// cache: that many more reprocessings of what is cached there (the
	// conversation's remaining turns, 2–4 on average with 5–10 turns, and
	// the requests queued behind the extra work). Default 8, from a sweep
	// of 2, 4, 8, 16 on light, quick and standard (docs/notes/policies.md, "`predictive`"): 8 is the
	// smallest that keeps standard's hit rate within a point of consistent
	// hashing's.
	MoveTurns float64 `json:"move_turns"`
	// Margin: another replica must be predicted faster than the preferred
	// one by more than Margin × T(preferred) + MarginS. Default 0.1.
	Margin float64 `json:"margin"`
	// MarginS is the margin's absolute part, seconds. Default 0.25.
	MarginS float64 `json:"margin_s"`
	// Slots is the requests a replica serves at once (llama.cpp
	// --parallel; the view does not carry it). Default 4, the replicas of
	// the study.
	Slots int `json:"slots"`
	// StaleAfter is the age, seconds, beyond which a replica's own report
	// is ignored. Default 1 (five scrape intervals of the shipped config).
	StaleAfter float64 `json:"stale_after_s"`
	// CacheTokens is the replica's prompt cache, in tokens of new work
	// (the charges the router counts in Request.SentSince): the belief
	// that the conversation's last replica still holds it falls linearly
	// with the tokens routed there since its last answer, to 0 at
	// CacheTokens. Default 65,536, the shipped prefix_index.capacity_tokens
	// (the study's replica: 4 slots × 4,096 tokens + 512 MiB ÷ 12 KiB =
	// 43,690 tokens of RAM prompt cache). For a vLLM replica: its KV
	// cache's token capacity.
	CacheTokens float64 `json:"cache_tokens"`
}

var _ Policy = (*Predictive)(nil)

// Reason codes of predictive.
const (
	// Cache: the replica holding the conversation's cache won, or was
	// within the margin of the fastest.
	Cache Reason = "cache"
	// Faster: a replica other than the preferred one was predicted faster
	// by more than the margin; nothing cached was left behind.
	Faster Reason = "faster"
	// Prefix: like faster, to a replica that holds a shared prefix of the
	// prompt (another conversation's).
	Prefix Reason = "prefix"
	// Spill: the conversation left the replica holding its cache, which
	// was predicted slower even after paying for the move.
	Spill Reason = "spill"
)

// DefaultPredictive returns predictive's documented defaults.
func DefaultPredictive() *Predictive {
	return &Predictive{PriorPrefill: 80, PriorDecode: 20, MoveTurns: 8, Margin: 0.1, MarginS: 0.25, Slots: 4, StaleAfter: 1, CacheTokens: 65536}
}

// Name implements Policy.
func (*Predictive) Name() string { return "predictive" }

// Validate implements Settings.
func (p *Predictive) Validate() error {
	switch {
	case !(p.PriorPrefill > 0 && finite(p.PriorPrefill)):
		return fmt.Errorf("prior_prefill_tps: must be > 0 tokens/s, got %g", p.PriorPrefill)
	case !(p.PriorDecode > 0 && finite(p.PriorDecode)):
		return fmt.Errorf("prior_decode_tps: must be > 0 tokens/s, got %g", p.PriorDecode)
	case !(p.MoveTurns >= 0 && p.MoveTurns <= 1000):
		return fmt.Errorf("move_turns: must be ≥ 0 and ≤ 1000, got %g", p.MoveTurns)
	case !(p.Margin >= 0 && p.Margin <= 10):
		return fmt.Errorf("margin: must be ≥ 0 and ≤ 10, got %g", p.Margin)
	case !(p.MarginS >= 0 && p.MarginS <= 3600):
		return fmt.Errorf("margin_s: must be ≥ 0 and ≤ 3600 seconds, got %g", p.MarginS)
	case p.Slots < 1 || p.Slots > 1<<20:
		return fmt.Errorf("slots: must be ≥ 1 and ≤ %d, got %d", 1<<20, p.Slots)
	case !(p.StaleAfter >= 0 && p.StaleAfter <= 3600):
		return fmt.Errorf("stale_after_s: must be ≥ 0 and ≤ 3600 seconds, got %g", p.StaleAfter)
	case !(p.CacheTokens >= 1 && p.CacheTokens <= 1<<40):
		return fmt.Errorf("cache_tokens: must be ≥ 1 and ≤ %d tokens, got %g", int64(1)<<40, p.CacheTokens)
	}
	return nil
}

// Columns of a predictive candidate in the trace (Cand.V).
const (
	pqQueue Col = iota
	pqPrefill
	pqDecode
	pqMove
	pqPrefillRate
	pqDecodeRate
)

// Slots of a predictive trace.
const (
	pvMargin ValSlot = iota
	pvMarginS
	pvSent   // Request.SentSince: tokens routed to the last replica since its answer
	pvBest   // T of the fastest replica
	pvPref   // T of the preferred replica
	pvBelief // the belief that the last replica still holds the conversation's cache
)

const (
	pvHeld   IntSlot = iota // tokens the conversation's last replica is believed to hold of this prompt (after the decay)
	pvFaster                // the fastest replica
)

// pvOther in the pvBelief slot: the key's last cache is longer than the
// prompt, another prompt's.
const pvOther = -2

// predicted is one candidate's prediction: the tokens of each part and
// the rates that turn them into seconds.
type predicted struct {
	queueTok, newTok, moveTok, out float64
	pf, dc                         float64
}

func (x *predicted) queue() float64   { return x.queueTok / x.pf }
func (x *predicted) prefill() float64 { return x.newTok / x.pf }
func (x *predicted) decode() float64  { return x.out / x.dc }
func (x *predicted) move() float64    { return x.moveTok / x.pf }

// total is T(r) in seconds (two divisions: the scan over 1,024 replicas
// stays cheap).
func (x *predicted) total() float64 { return (x.queueTok+x.newTok+x.moveTok)/x.pf + x.out/x.dc }

// predict returns replica r's prediction for req. last is the
// conversation's last replica (-1 none), held what it is believed to hold
// of the prompt there (0: nothing to leave behind; the view's Match there
// counts placement memory undecayed, so held replaces it).
func (p *Predictive) predict(req *Request, v *View, r, last, held int, prior *predicted) predicted {
	row := &v.Rows[r]
	x := predicted{pf: prior.pf, dc: prior.dc, out: float64(max(req.OutputTokens, 0))}
	if row.Speed.Prefill > 0 && finite(row.Speed.Prefill) {
		x.pf = row.Speed.Prefill
	}
	if row.Speed.Decode > 0 && finite(row.Speed.Decode) {
		x.dc = row.Speed.Decode
	}
	prompt := max(req.PromptTokens, 1)
	cached := min(max(row.Match, 0), prompt)
	if r == last {
		cached = held
	}
	x.newTok = float64(max(prompt-cached, 1))

	own := x.newTok + x.out
	n, work := float64(max(row.Load.Requests, 0)), float64(max(row.Load.Tokens, 0))
	if rep := &row.Reported; rep.HasQueue && p.fresh(v.Now, rep.At) {
		if extra := rep.Running + rep.Waiting - n; extra > 0 && finite(extra) {
			mean := own
			if n > 0 {
				mean = work / n
			}
			n, work = n+extra, work+extra*mean
		}
	}
	x.queueTok = p.queueTokens(n, work, own)
	if held > 0 && r != last {
		x.moveTok = p.MoveTurns * float64(max(held-cached, 0))
	}
	return x
}

// queueTokens is the work, in tokens, that delays a request of own tokens
// on a replica with n requests and work tokens in flight: the q = n −
// slots + 1 it must wait for (a slot frees when one ends) in full, and each
// of the others sharing the batch with it up to its own work (a request
// shorter than this one delays it by its whole work, a longer one by this
// one's: the replica's compute is shared between the slots it serves).
// The in-flight requests are taken at their mean charge.
func (p *Predictive) queueTokens(n, work, own float64) float64 {
	if n <= 0 || work <= 0 {
		return 0
	}
	mean := work / n
	q := max(n-float64(p.Slots)+1, 0)
	return q*mean + (n-q)*min(mean, own)
}

// prior returns the rates assumed for a replica that has not answered
// yet: the mean of the learned rates of those that have (a new replica is
// most likely like the others: same model, same hardware class), or the
// settings' priors when none has.
func (p *Predictive) prior(v *View) predicted {
	var pf, dc float64
	var npf, ndc int
	for r := range v.Rows {
		if s := &v.Rows[r].Speed; s.Prefill > 0 && finite(s.Prefill) {
			pf += s.Prefill
			npf++
		}
		if s := &v.Rows[r].Speed; s.Decode > 0 && finite(s.Decode) {
			dc += s.Decode
			ndc++
		}
	}
	x := predicted{pf: p.PriorPrefill, dc: p.PriorDecode}
	if npf > 0 && finite(pf) {
		x.pf = pf / float64(npf)
	}
	if ndc > 0 && finite(dc) {
		x.dc = dc / float64(ndc)
	}
	return x
}

// belief is the likelihood that a replica still holds a conversation's
// cache after sent tokens were routed to it since the conversation's last
// answer there: 1 − sent ÷ cache_tokens, clamped to [0, 1]. An engine
// evicts under pressure (least recently used first), not with age, so the
// entry's age does not enter.
func (p *Predictive) belief(sent int64) float64 {
	return min(max(1-float64(max(sent, 0))/p.CacheTokens, 0), 1)
}

// fresh reports whether a report sampled at `at` is recent enough at now.
func (p *Predictive) fresh(now, at int64) bool {
	age := float64(now-at) / 1e9
	return age >= 0 && age <= p.StaleAfter
}

// Pick implements Policy.
func (p *Predictive) Pick(req *Request, v *View, d *Decision) {
	*d = Decision{}
	t := &d.Trace
	t.begin("predictive", req, v)
	t.Explain = explainPredictive

	home := v.ringHome(req.Hash)
	last, held, belief := -1, 0, -1.0 // belief −1: no cache to believe in
	if req.Last >= 0 && req.Last < len(v.Names) && req.CachedTokens > 0 && !v.Excluded(req.Last) {
		last = req.Last
		if req.PromptTokens >= req.CachedTokens {
			belief = p.belief(req.SentSince)
			held = int(belief * float64(min(max(req.CachedTokens, v.Rows[last].Match), max(req.PromptTokens, 1))))
		} else {
			// A turn's prompt extends what its conversation cached (previous
			// prompt + answer); one shorter than that is another prompt
			// under the same key (a shared start without a conversation
			// header): the cache there is not this prompt's.
			belief = pvOther
		}
	}
	pref := home
	if held > 0 {
		pref = last
	}

	pr := p.prior(v)
	prior := &pr
	best, bestT := -1, 0.0
	for r := range v.Rows {
		if v.Excluded(r) {
			continue
		}
		x := p.predict(req, v, r, last, held, prior)
		if T := x.total(); best < 0 || T < bestT {
			best, bestT = r, T
		}
	}
	px := p.predict(req, v, pref, last, held, prior)
	prefT := px.total()
	win, x := pref, px
	if prefT-bestT > p.Margin*prefT+p.MarginS {
		win = best
		x = p.predict(req, v, best, last, held, prior)
	}
	switch {
	case win == last && held > 0:
		d.Reason = Cache
	case win == pref:
		d.Reason = Home
	case held > 0:
		d.Reason = Spill
	case int(x.newTok) < req.PromptTokens:
		d.Reason = Prefix
	default:
		d.Reason = Faster
	}
	d.Replica = win
	d.Charge = int64(x.newTok) + int64(max(req.OutputTokens, 0))

	t.Home, t.Preferred = home, pref
	t.setVal(pvMargin, p.Margin)
	t.setVal(pvMarginS, p.MarginS)
	t.setVal(pvSent, float64(max(req.SentSince, 0)))
	t.setVal(pvBelief, belief)
	t.setVal(pvBest, bestT)
	t.setVal(pvPref, prefT)
	t.setInt(pvHeld, int64(held))
	t.setInt(pvFaster, int64(best))
	// The trace's candidates: the preferred, the home, the fastest and
	// the winner first, then replicas in name order up to its capacity.
	p.traceCand(t, req, v, pref, last, held, prior)
	p.traceCand(t, req, v, home, last, held, prior)
	p.traceCand(t, req, v, best, last, held, prior)
	for r := 0; r < len(v.Rows) && t.NCands < MaxTraceCands; r++ {
		if !v.Excluded(r) {
			p.traceCand(t, req, v, r, last, held, prior)
		}
	}
}

// traceCand records replica r's prediction unless it is already there.
func (p *Predictive) traceCand(t *Trace, req *Request, v *View, r, last, held int, prior *predicted) {
	for i := range min(t.NCands, MaxTraceCands) {
		if int(t.Cands[i].Replica) == r {
			return
		}
	}
	if t.NCands >= MaxTraceCands {
		return
	}
	x := p.predict(req, v, r, last, held, prior)
	t.addCand(r, x.queue(), x.prefill(), x.decode(), x.move(), x.pf, x.dc)
}

func explainPredictive(d *Decision, b []byte) []byte {
	t := &d.Trace
	w := text(b).s("\n  request: prompt=").i(t.Prompt).s(" output=").i(t.Output)
	switch held := t.Int(pvHeld); {
	case held > 0 && t.Val(pvBelief) < 1:
		w = w.s("; cache on ").name(t, t.Last).s(": ").d(held).s(" tokens of it (belief ").f(t.Val(pvBelief), 2).
			s(": ").f(t.Val(pvSent), 0).s(" tokens routed there since)")
	case held > 0:
		w = w.s("; cache on ").name(t, t.Last).s(": ").d(held).s(" tokens of it")
	case t.Val(pvBelief) == pvOther:
		w = w.s("; the key's cache on ").name(t, t.Last).s(" (").i(t.LastTokens).
			s(" tokens) is longer than this prompt: another prompt's, not counted")
	case t.Val(pvBelief) >= 0:
		w = w.s("; cache on ").name(t, t.Last).s(" most likely gone (").f(t.Val(pvSent), 0).s(" tokens routed there since)")
	default:
		w = w.s("; no cache known")
	}
	w = w.s("; home ").name(t, t.Home).s("; preferred ").name(t, t.Preferred)
	for i := range min(t.NCands, MaxTraceCands) {
		c := &t.Cands[i]
		v := &c.V
		T := v[pqQueue] + v[pqPrefill] + v[pqDecode] + v[pqMove]
		w = w.s("\n  ").name(t, int(c.Replica)).s(": queue ").f(v[pqQueue], 2).s("s + prefill ").f(v[pqPrefill], 2).
			s("s (").f(v[pqPrefill]*v[pqPrefillRate], 0).s(" new @ ").f(v[pqPrefillRate], 0).s(" tok/s) + decode ").
			f(v[pqDecode], 2).s("s (").i(t.Output).s(" @ ").f(v[pqDecodeRate], 1).s(" tok/s) + move ").
			f(v[pqMove], 2).s("s = ").f(T, 2).s("s")
	}
	if t.N > t.NCands {
		w = w.s("\n  … ").i(t.N).s(" replicas in all")
	}
	pref, best := t.Val(pvPref), t.Val(pvBest)
	margin := t.Val(pvMargin)*pref + t.Val(pvMarginS)
	if d.Replica == t.Preferred {
		return w.s("\n  fastest ").name(t, int(t.Int(pvFaster))).s(" ").f(best, 2).s("s; preferred ").
			name(t, t.Preferred).s(" ").f(pref, 2).s("s is within ").f(margin, 2).s("s (margin ").g(t.Val(pvMargin)).
			s("×").f(pref, 2).s(" + ").g(t.Val(pvMarginS)).s("s) → ").s(string(d.Reason))
	}
	return w.s("\n  preferred ").name(t, t.Preferred).s(" ").f(pref, 2).s("s; ").name(t, d.Replica).s(" ").
		f(best, 2).s("s is faster by ").f(pref-best, 2).s("s > margin ").f(margin, 2).s("s (").g(t.Val(pvMargin)).
		s("×").f(pref, 2).s(" + ").g(t.Val(pvMarginS)).s("s) → ").s(string(d.Reason))
}
