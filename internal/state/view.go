package state

import (
	"math"

	"github.com/llm-ring/llm-ring/internal/prefix"

	"github.com/llm-ring/llm-ring/internal/policy"
)

// LoadView calls fn with a view of the replicas as a pick would see them —
// their in-flight loads, what they report about themselves, their learned
// speeds, the unhealthy ones excluded — but without a request (no Match, no
// placement), under the table's lock, and returns what fn returns. fn must
// not keep the view or call back into the table. Admission control reads
// the pool's saturation through it (internal/admission).
func (t *Table) LoadView(now int64, fn func(v *policy.View) float64) float64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.snap
	v := &policy.View{Names: s.names, Ring: s.ring, Rows: t.rows, Total: t.total, Now: now}
	if t.health.n > 0 {
		v.Exclude = t.health.bits
	}
	return fn(v)
}

// lookup is the part of a pick that Route and Candidates share: it fills
// the table's request and query for in (placement memory always, the other
// indexers only when the policy reads Match), and the view's base — rows,
// loads, scratch, peers' loads. The caller defers t.match.clear() and sets
// the view's exclusions; t.mu is held.
func (t *Table) lookup(in Input, readsMatch bool, now int64) (*policy.Request, *query, *policy.View) {
	s := t.snap
	req := &t.req
	*req = policy.Request{Hash: in.Hash, OutputTokens: min(max(in.OutputTokens, 0), MaxCharge/2), Seq: t.seq, Last: -1,
		FirstUser: in.FirstUser}
	q := &t.query
	salt := prefix.Salt(in.Adapter) // 0 for the base model: its keys as they are
	*q = query{Key: in.Hash ^ salt, Salt: salt, Blocks: in.Blocks, Chars: in.Chars}
	m := &t.match
	m.rows, m.ids, m.index, m.list = t.rows, s.ids, t.index, s.n
	for i, ix := range t.idx {
		if i > 0 && !readsMatch {
			break
		}
		ix.lookup(q, m, now)
	}
	place, known := q.Place, q.Known
	if known {
		if i := t.index[place.Replica]; i >= 0 {
			req.Last, req.CachedTokens = int(i), int(place.Cached)
			req.SentSince = int64(min(t.routed[place.Replica]-place.Sent, math.MaxInt64))
		}
	}
	req.PromptTokens = min(t.estimate(in, place, known), MaxCharge/2)
	v := &t.view
	*v = policy.View{Names: s.names, Ring: s.ring, Rows: t.rows, Total: t.total, Visited: t.visited, Now: now}
	if t.peers != nil {
		v.Rows, v.Total = t.withPeerLoads(q)
	}
	return req, q, v
}
