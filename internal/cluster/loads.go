package cluster

import (
	"maps"
	"slices"
	"strings"
	"time"
)

// loadBook holds every peer's last-known in-flight loads and their sum per
// replica. It is pure (time comes in as an argument) and not safe for
// concurrent use: Node guards it with its bookMu.
//
// Rules that keep it correct whatever the network does:
//   - values are absolute (a peer's current load on a replica), never
//     deltas, so a duplicate is harmless;
//   - per peer, a message from an older incarnation (Gen) is ignored and one
//     from a newer incarnation starts the peer afresh;
//   - within an incarnation, an entry is applied only if its message's Seq
//     is newer than the Seq that last set that replica, and newer than the
//     last snapshot (floor): a late push cannot resurrect a released load;
//   - a snapshot is authoritative: it sets what it lists and removes what
//     it does not (unless a newer push set it);
//   - only peers that membership reports alive are accepted; leave drops
//     a peer's loads at once but keeps its Gen/Seq, so its stragglers stay
//     ignored if it comes back.
//
// Sums are kept incrementally; all values are ≥ 0, so sums are too.
type loadBook struct {
	peers map[string]*peerLoads
	sum   map[string]Load
}

type peerLoads struct {
	alive     bool
	gen       uint64
	floor     uint64 // messages of gen with Seq below (pushes: up to) this are stale
	maxSeq    uint64 // highest Seq applied in gen
	loads     map[string]seqLoad
	lastHeard time.Time // last load message applied (push or snapshot)
	leftAt    time.Time
}

type seqLoad struct {
	Load
	seq uint64
}

func newLoadBook() *loadBook {
	return &loadBook{peers: map[string]*peerLoads{}, sum: map[string]Load{}}
}

// join marks peer alive (membership saw it join, or come back).
func (b *loadBook) join(peer string) {
	p := b.peers[peer]
	if p == nil {
		p = &peerLoads{loads: map[string]seqLoad{}}
		b.peers[peer] = p
	}
	p.alive = true
	p.leftAt = time.Time{}
}

// leave drops peer's loads from the sums at once (it left or was declared
// dead) and ignores its messages until it joins again.
func (b *loadBook) leave(peer string, now time.Time) {
	p := b.peers[peer]
	if p == nil {
		return
	}
	for r, l := range p.loads {
		b.add(r, l.Load, -1)
	}
	clear(p.loads)
	// Everything seen so far is now stale: with the per-replica Seqs gone,
	// raise the floor so no straggler can come back.
	p.floor = max(p.floor, p.maxSeq)
	p.alive = false
	p.leftAt = now
}

// prune forgets peers that left more than keep ago (their Gen/Seq guard
// against stragglers no longer matters).
func (b *loadBook) prune(now time.Time, keep time.Duration) {
	for name, p := range b.peers {
		if !p.alive && now.Sub(p.leftAt) > keep {
			delete(b.peers, name)
		}
	}
}

// applyResult counts what apply did with a message's entries.
type applyResult struct {
	applied, stale int
	unknownPeer    bool // the sender is not an alive member: ignored whole
	oldGen         bool // the sender's previous incarnation: ignored whole
}

// apply merges one load message at now.
func (b *loadBook) apply(m loadMsg, now time.Time) applyResult {
	p := b.peers[m.Origin]
	if p == nil || !p.alive {
		return applyResult{unknownPeer: true}
	}
	switch {
	case m.Gen < p.gen:
		return applyResult{oldGen: true}
	case m.Gen > p.gen:
		for r, l := range p.loads {
			b.add(r, l.Load, -1)
		}
		clear(p.loads)
		p.gen, p.floor, p.maxSeq = m.Gen, 0, 0
	}
	var res applyResult
	if m.Full {
		if m.Seq < p.floor {
			return applyResult{stale: len(m.Entries)}
		}
		// Remove what the snapshot omits (unless set by a newer push).
		listed := make(map[string]bool, len(m.Entries))
		for _, e := range m.Entries {
			listed[e.Replica] = true
		}
		for r, l := range p.loads {
			if !listed[r] && l.seq <= m.Seq {
				b.set(p, r, Load{}, m.Seq)
				delete(p.loads, r)
			}
		}
		p.floor = m.Seq
	} else if m.Seq <= p.floor {
		return applyResult{stale: len(m.Entries)}
	}
	for _, e := range m.Entries {
		// A push needs a newer Seq than the entry's; a snapshot also
		// re-applies its own Seq (a duplicate of itself sets equal values).
		if cur, ok := p.loads[e.Replica]; ok && (cur.seq > m.Seq || (!m.Full && cur.seq == m.Seq)) {
			res.stale++
			continue
		}
		b.set(p, e.Replica, e.Load, m.Seq)
		res.applied++
	}
	if m.Full {
		// Zero entries are kept only as guards between snapshots.
		for r, l := range p.loads {
			if l.Load == (Load{}) && l.seq <= m.Seq {
				delete(p.loads, r)
			}
		}
	}
	p.maxSeq = max(p.maxSeq, m.Seq)
	p.lastHeard = now
	return res
}

// set stores peer p's load on replica r at seq and adjusts the sum.
func (b *loadBook) set(p *peerLoads, r string, l Load, seq uint64) {
	l.Requests, l.Tokens = max(l.Requests, 0), max(l.Tokens, 0)
	old := p.loads[r]
	b.add(r, old.Load, -1)
	b.add(r, l, 1)
	p.loads[r] = seqLoad{Load: l, seq: seq}
}

func (b *loadBook) add(r string, l Load, sign int64) {
	if l == (Load{}) {
		return
	}
	s := b.sum[r]
	s.Requests += sign * l.Requests
	s.Tokens += sign * l.Tokens
	if s.Requests <= 0 && s.Tokens <= 0 {
		delete(b.sum, r) // ≥ 0 by construction; ≤ 0 means exactly 0
		return
	}
	b.sum[r] = s
}

// peerNames returns the known peers, sorted.
func (b *loadBook) peerNames() []string {
	return slices.SortedFunc(maps.Keys(b.peers), strings.Compare)
}

// localLoads is this instance's own in-flight load per replica and what
// changed since the last push. Not safe for concurrent use: Node guards it
// with its mu, with the queues it is pushed with.
type localLoads struct {
	cur   map[string]Load
	dirty map[string]bool
	seq   uint64
}

func newLocalLoads() *localLoads {
	return &localLoads{cur: map[string]Load{}, dirty: map[string]bool{}}
}

// add applies a delta; it reports whether the dirty set was empty before.
func (l *localLoads) add(r string, dReq, dTok int64) (first bool) {
	c := l.cur[r]
	c.Requests += dReq
	c.Tokens += dTok
	l.cur[r] = c
	first = len(l.dirty) == 0
	l.dirty[r] = true
	return first
}

// wire returns the value sent for r: never negative (a caller's
// unbalanced release must not make peers subtract).
func (l *localLoads) wire(r string) Load {
	c := l.cur[r]
	return Load{Requests: max(c.Requests, 0), Tokens: max(c.Tokens, 0)}
}

// takeDirty returns a push of the changed replicas (sorted) under a new
// Seq, clears the dirty set and forgets replicas back at exactly zero.
func (l *localLoads) takeDirty() (seq uint64, entries []LoadEntry) {
	if len(l.dirty) == 0 {
		return l.seq, nil
	}
	l.seq++
	names := slices.SortedFunc(maps.Keys(l.dirty), strings.Compare)
	entries = make([]LoadEntry, len(names))
	for i, r := range names {
		entries[i] = LoadEntry{Replica: r, Load: l.wire(r)}
		if l.cur[r] == (Load{}) {
			delete(l.cur, r)
		}
	}
	clear(l.dirty)
	return l.seq, entries
}

// snapshot returns every replica with load (sorted) under a new Seq. Pending
// changes stay dirty: the next push repeats them with a higher Seq.
func (l *localLoads) snapshot() (seq uint64, entries []LoadEntry) {
	l.seq++
	names := slices.SortedFunc(maps.Keys(l.cur), strings.Compare)
	for _, r := range names {
		if w := l.wire(r); w != (Load{}) {
			entries = append(entries, LoadEntry{Replica: r, Load: w})
		}
	}
	return l.seq, entries
}
