package model

import (
	"time"
)

// Server is the state of one simulated llama.cpp server: its slots, its RAM
// prompt cache, its queue and the step in progress. A Server is driven by
// the Group (or Replica) that owns it; its exported methods only read.
//
// Time. A Server counts in "work time": the model time its steps would take
// with a CPU of its own. Its Group maps work time to model time (the
// identity for a dedicated CPU; slower when a shared CPU is busy with
// several servers).
type Server struct {
	cfg    Config
	nCtx   int
	index  int
	clk    *timebase
	slots  []slot
	queue  []*request
	qhead  int
	seg    segment
	idx    prefixIndex
	cache  []*entry   // RAM prompt cache, least recently used first
	keys   []cacheKey // by cache entry: what its scans read first (server_cache.go)
	cacheB int64      // bytes held by cache
	limitB int64      // cache size limit in bytes
	nextID ID
	useSeq uint64
	stats  Stats
	spare  []*entry // recycled entries
	reqs   []*request
	// pg, when set, is the paged engine (Config.Engine vllm or sglang)
	// that this server delegates everything to.
	pg *paged
}

// slot state
const (
	slotIdle uint8 = iota
	slotPrefill
	slotDecode
)

type slot struct {
	id    int
	state uint8
	seq   // KV content: indexed while idle; the prompt while active
	// indexed: seq is in the prefix index (idle slot with content).
	indexed  bool
	lastUsed uint64
	req      *request
	pos      int // tokens in the KV cache (n_past)
	pending  int // prompt tokens still to process
	chunk    int // prompt tokens in the current step
	gen      int // tokens generated
}

type entry struct {
	seq
	bytes int64
}

type request struct {
	id     ID
	toks   []Token
	blocks []uint64
	target int
	stop   StopType
	full   bool // context limit
	cancelled,
	noCache,
	tokenEvents bool
	out       Output
	cacheN    int
	submitted time.Duration
	started   time.Duration
	promptEnd time.Duration
}

// segment is the work in progress: `steps` steps starting at work time
// `start`, step j (0-based) costing base + j·inc. A step containing prompt
// tokens is a segment of one step; a run of pure decode steps, in which
// the batch does not change, is one segment ending when the first slot
// finishes (each step only moves every position by one, adding inc).
type segment struct {
	active  bool
	prefill bool
	start   time.Duration
	steps   int
	done    int // steps already applied to the slots
	base    time.Duration
	inc     time.Duration
	nTokEv  int // slots in the segment that want EventToken
	nDecode int // decoding slots in the segment
}

// cum is the work of the first m steps of the segment.
func (g *segment) cum(m int) time.Duration {
	mm := time.Duration(m)
	return mm*g.base + g.inc*(mm*(mm-1)/2)
}

// completed returns how many steps are finished after elapsed work e.
func (g *segment) completed(e time.Duration) int {
	lo, hi := 0, g.steps
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if g.cum(mid) <= e {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
}

// timebase maps a Group's work time to model time: t = t0 + (v − v0)·k.
type timebase struct {
	t0, v0 time.Duration
	k      time.Duration
}

func (tb *timebase) t(v time.Duration) time.Duration { return tb.t0 + (v-tb.v0)*tb.k }
func (tb *timebase) v(t time.Duration) time.Duration { return tb.v0 + (t-tb.t0)/tb.k }

func newServer(cfg Config, index int, clk *timebase) *Server {
	if cfg.Paged() {
		return &Server{cfg: cfg, nCtx: cfg.SlotContext(), index: index, clk: clk, pg: newPaged(cfg, index, clk)}
	}
	s := &Server{
		cfg:    cfg,
		nCtx:   cfg.SlotContext(),
		index:  index,
		clk:    clk,
		slots:  make([]slot, cfg.NParallel),
		limitB: int64(cfg.CacheRAMMiB) << 20,
	}
	for i := range s.slots {
		s.slots[i].id = i
	}
	return s
}

// Config returns the server's configuration.
func (s *Server) Config() Config { return s.cfg }

// busy reports whether a step is in progress.
func (s *Server) busy() bool {
	if s.pg != nil {
		return s.pg.seg.active
	}
	return s.seg.active
}

// submit queues a request at work time v (the server has been advanced to
// v). Events that the submission makes due at v are appended to dst.
func (s *Server) submit(v time.Duration, rq Request, dst []Event) (ID, []Event, error) {
	if s.pg != nil {
		return s.pg.submit(v, rq, dst)
	}
	n := len(rq.Tokens)
	if err := checkPrompt(rq.Tokens, s.nCtx); err != nil {
		return 0, dst, err
	}
	r := s.newRequest()
	s.nextID++
	r.id = s.nextID
	r.toks = rq.Tokens
	r.blocks = chainHashes(r.blocks[:0], rq.Tokens)
	a := planAnswer(&s.cfg, &rq, promptKey(rq.Tokens, r.blocks), s.nCtx-n)
	r.target, r.stop, r.full, r.out = a.target, a.stop, a.full, a.out
	r.noCache = rq.NoCache
	r.tokenEvents = rq.TokenEvents
	r.submitted = s.clk.t(v)
	s.queue = append(s.queue, r)

	switch {
	case !s.seg.active:
		dst = s.plan(v, dst)
	case s.hasIdleSlot():
		// The request joins at the next step boundary.
		dst = s.cut(v, dst)
	}
	return r.id, dst, nil
}

// cut ends the current segment at the first step boundary at or after
// work time v, so that the batch can change there.
func (s *Server) cut(v time.Duration, dst []Event) []Event {
	e := v - s.seg.start
	m := s.seg.completed(e)
	if s.seg.cum(m) < e {
		m++
	}
	if m < s.seg.steps {
		s.seg.steps = m
		dst = s.advance(v, dst)
	}
	return dst
}

// cancel abandons request id at work time v. A queued request leaves the
// queue; a running one leaves its slot at the next step boundary, the slot
// keeping what was processed (as llama.cpp does when a client goes away).
// It reports whether the request was found.
func (s *Server) cancel(v time.Duration, id ID, dst []Event) ([]Event, bool) {
	if s.pg != nil {
		return s.pg.cancel(v, id, dst)
	}
	for i := s.qhead; i < len(s.queue); i++ {
		if r := s.queue[i]; r.id == id {
			copy(s.queue[i:], s.queue[i+1:])
			s.queue[len(s.queue)-1] = nil
			s.queue = s.queue[:len(s.queue)-1]
			r.out, r.toks = Output{}, nil
			s.reqs = append(s.reqs, r)
			return dst, true
		}
	}
	for i := range s.slots {
		if r := s.slots[i].req; r != nil && r.id == id {
			if !r.cancelled {
				r.cancelled = true
				dst = s.cut(v, dst)
			}
			return dst, true
		}
	}
	return dst, false
}

func (s *Server) newRequest() *request {
	if n := len(s.reqs); n > 0 {
		r := s.reqs[n-1]
		s.reqs = s.reqs[:n-1]
		blocks := r.blocks[:0]
		*r = request{blocks: blocks}
		return r
	}
	return &request{}
}

func (s *Server) hasIdleSlot() bool {
	for i := range s.slots {
		if s.slots[i].state == slotIdle {
			return true
		}
	}
	return false
}

// next returns the work time of the next observable event (or step
// boundary that the server must process).
func (s *Server) next() (time.Duration, bool) {
	if s.pg != nil {
		return s.pg.next()
	}
	g := &s.seg
	if !g.active {
		return 0, false
	}
	if g.nTokEv > 0 && !g.prefill && g.done < g.steps {
		return g.start + g.cum(g.done+1), true
	}
	return g.start + g.cum(g.steps), true
}

// advance processes every step boundary at or before work time v.
func (s *Server) advance(v time.Duration, dst []Event) []Event {
	if s.pg != nil {
		return s.pg.advance(v, dst)
	}
	for s.seg.active {
		g := &s.seg
		if g.nTokEv > 0 && !g.prefill && g.done < g.steps {
			at := g.start + g.cum(g.done+1)
			if at > v {
				break
			}
			dst = s.materialize(g.done+1, dst)
			if g.done == g.steps {
				dst = s.finish(at, dst)
			}
			continue
		}
		end := g.start + g.cum(g.steps)
		if end > v {
			break
		}
		if !g.prefill {
			dst = s.materialize(g.steps, dst)
		}
		dst = s.finish(end, dst)
	}
	return dst
}

// sync applies to the slots the decode steps finished by work time v,
// without ending the segment (for inspection).
func (s *Server) sync(v time.Duration) {
	if s.pg != nil {
		s.pg.sync(v)
		return
	}
	g := &s.seg
	if !g.active || g.prefill || g.nTokEv > 0 {
		return
	}
	if m := g.completed(v - g.start); m > g.done {
		s.materialize(m, nil)
	}
}

// materialize applies decode steps g.done+1 … k of the current segment.
func (s *Server) materialize(k int, dst []Event) []Event {
	g := &s.seg
	d := k - g.done
	if d <= 0 {
		return dst
	}
	if g.nTokEv > 0 {
		for j := g.done + 1; j <= k; j++ {
			at := s.clk.t(g.start + g.cum(j))
			for i := range s.slots {
				sl := &s.slots[i]
				if sl.state == slotDecode && sl.req.tokenEvents {
					n := sl.gen + (j - g.done)
					dst = append(dst, s.tokenEvent(EventToken, sl.req, n, at))
				}
			}
		}
	}
	for i := range s.slots {
		sl := &s.slots[i]
		if sl.state == slotDecode {
			sl.pos += d
			sl.gen += d
		}
	}
	s.stats.Decodes += int64(d)
	s.stats.BusySlotSteps += int64(d * g.nDecode)
	g.done = k
	return dst
}

func (s *Server) tokenEvent(kind EventKind, r *request, n int, at time.Duration) Event {
	ev := Event{Kind: kind, Replica: s.index, ID: r.id, At: at, N: n}
	if kind == EventFirstToken {
		ev.CacheN = r.cacheN
	}
	if r.tokenEvents {
		ev.Token = r.out.Tokens[n-1]
		ev.Piece = r.out.Piece(n - 1)
	}
	return ev
}

// finish ends the segment at work time v: applies a prompt step, emits
// first tokens and completions, then plans the next segment.
func (s *Server) finish(v time.Duration, dst []Event) []Event {
	g := &s.seg
	t := s.clk.t(v)
	if g.prefill && g.steps == 1 {
		s.stats.Decodes++
		busy := 0
		for i := range s.slots {
			sl := &s.slots[i]
			switch sl.state {
			case slotDecode:
				busy++
				sl.pos++
				sl.gen++
				if sl.req.tokenEvents {
					dst = append(dst, s.tokenEvent(EventToken, sl.req, sl.gen, t))
				}
			case slotPrefill:
				if sl.chunk == 0 {
					continue
				}
				busy++
				sl.pos += sl.chunk
				sl.pending -= sl.chunk
				sl.chunk = 0
				if sl.pending > 0 {
					continue
				}
				sl.state = slotDecode
				sl.req.promptEnd = t
				if sl.req.target > 0 && !sl.req.cancelled {
					sl.gen = 1
					dst = append(dst, s.tokenEvent(EventFirstToken, sl.req, 1, t))
				}
			}
		}
		s.stats.BusySlotSteps += int64(busy)
	}
	for i := range s.slots {
		sl := &s.slots[i]
		if sl.state != slotIdle && (sl.req.cancelled || (sl.state == slotDecode && sl.gen >= sl.req.target)) {
			dst = s.complete(sl, t, dst)
		}
	}
	g.active = false
	return s.plan(v, dst)
}

// complete finishes the request of sl at model time t.
func (s *Server) complete(sl *slot, t time.Duration, dst []Event) []Event {
	r := sl.req
	if sl.state == slotPrefill {
		// Cancelled during its prompt: the slot keeps what was processed.
		sl.gen = 0
		r.promptEnd = t
	}
	res := &Result{
		ID:           r.id,
		Slot:         sl.id,
		PromptTokens: len(r.toks),
		CacheN:       r.cacheN,
		PromptN:      len(r.toks) - r.cacheN,
		PredictedN:   sl.gen,
		Output:       r.out,
		Stop:         r.stop,
		ContextFull:  r.full,
		Cancelled:    r.cancelled,
		Submitted:    r.submitted,
		Started:      r.started,
		PromptDone:   r.promptEnd,
		Done:         t,
	}
	if r.cancelled {
		res.PromptN = min(sl.pos, len(r.toks)) - r.cacheN
		res.Output = r.out.prefix(sl.gen)
		res.PredictedN = sl.gen
	}
	// The KV cache now holds the prompt and every generated token but the
	// last one, which was sampled and never decoded (or, for a request
	// cancelled during its prompt, the part of the prompt processed).
	sl.toks = sl.toks[:min(sl.pos, len(sl.toks))]
	if sl.gen > 1 {
		sl.toks = append(sl.toks, r.out.Tokens[:sl.gen-1]...)
	}
	sl.blocks = append(sl.blocks[:0], r.blocks[:min(len(r.blocks), len(sl.toks)/blockSize)]...)
	sl.blocks = chainHashes(sl.blocks, sl.toks)
	s.idx.add(sl.blocks)
	sl.indexed = true
	s.useSeq++
	sl.lastUsed = s.useSeq
	sl.state = slotIdle
	sl.req = nil
	sl.gen, sl.pending, sl.chunk = 0, 0, 0

	st := &s.stats
	st.Requests++
	st.PromptTokens += int64(res.PromptN)
	st.PromptTime += res.PromptTime()
	st.PredictedTokens += int64(res.PredictedN)
	st.PredictedTime += res.PredictedTime()
	st.CacheN += int64(res.CacheN)

	r.out = Output{}
	r.toks = nil
	s.reqs = append(s.reqs, r)
	return append(dst, Event{Kind: EventDone, Replica: s.index, ID: res.ID, At: t, N: res.PredictedN, Result: res})
}

// plan admits queued requests into idle slots and starts the next segment
// at work time v.
func (s *Server) plan(v time.Duration, dst []Event) []Event {
	for s.qhead < len(s.queue) {
		if !s.assign(s.queue[s.qhead], v) {
			break
		}
		s.queue[s.qhead] = nil
		s.qhead++
	}
	if s.qhead == len(s.queue) {
		s.queue, s.qhead = s.queue[:0], 0
	} else if s.qhead > 64 && 2*s.qhead > len(s.queue) {
		// Under sustained overload the queue never drains: compact it.
		n := copy(s.queue, s.queue[s.qhead:])
		clear(s.queue[n:])
		s.queue, s.qhead = s.queue[:n], 0
	}
	c := &s.cfg
	g := &s.seg
	*g = segment{start: v, base: c.StepOverhead}
	batch := 0
	sumPos := 0
	minLeft := -1
	for i := range s.slots {
		sl := &s.slots[i]
		if sl.state != slotDecode {
			continue
		}
		batch++
		sumPos += sl.pos
		if left := sl.req.target - sl.gen; minLeft < 0 || left < minLeft {
			minLeft = left
		}
		if sl.req.tokenEvents {
			g.nTokEv++
		}
	}
	g.nDecode = batch
	budget := c.NBatch - batch
	pTok, pAttn := c.TokenCost, c.AttnCost
	if c.PrefillTokenCost > 0 {
		pTok = c.PrefillTokenCost
	}
	if c.PrefillAttnCost > 0 {
		pAttn = c.PrefillAttnCost
	}
	for i := range s.slots {
		sl := &s.slots[i]
		if sl.state != slotPrefill {
			continue
		}
		n := min(sl.pending, budget)
		sl.chunk = n
		if n == 0 {
			continue
		}
		budget -= n
		g.prefill = true
		// PrefillOverhead + Σ over positions pos … pos+n−1 of
		// (TokenCost + AttnCost·position), with the prefill costs if set
		nn := time.Duration(n)
		g.base += c.PrefillOverhead + nn*pTok + pAttn*(nn*time.Duration(sl.pos)+nn*(nn-1)/2)
	}
	if batch == 0 && !g.prefill {
		return dst // idle
	}
	g.active = true
	g.base += time.Duration(batch)*c.TokenCost + c.AttnCost*time.Duration(sumPos)
	if g.prefill {
		g.steps = 1
		return dst
	}
	g.steps = minLeft
	g.inc = c.AttnCost * time.Duration(batch)
	if g.steps <= 0 {
		// A slot has nothing left to generate (cannot happen: finish
		// completes such slots); keep the model moving regardless.
		g.steps = 1
	}
	return dst
}
