package state

import "github.com/llm-ring/llm-ring/internal/policy"

// Several router instances route as one when each Table publishes what it
// learns to the others and applies what they publish (issue #13):
//
//	local:  Route   → Peers.AddLoad(+1, +charge), Peers.PublishPrefix(insert),
//	                  Peers.PublishTurn(routed)
//	        Release → Peers.AddLoad(−1, −charge), Peers.PublishPlacement
//	                  (answered) or Peers.PublishTurn(failed),
//	                  Peers.PublishPrefix(lost) when the replica lost its cache
//	remote: Table.ApplyPlacement, Table.ApplyTurn, Table.ApplyPrefix (never
//	        re-published)
//	pick:   each row's Load (and the view's Total) + Peers.RemoteLoad(replica),
//	        less the load of a remote turn this request shows is over
//
// What is published is keyed as this table keys it: an adapter request's
// conversation key (PlacementUpdate.Key, TurnUpdate.Key) and blocks
// (PrefixUpdate.Blocks) carry its adapter's salt (query.Salt), so a peer
// applies them as they are and keeps the adapter's memory apart as well.
//
// The transport is not the state's business: the live router adapts
// internal/cluster's gossip node to Peers, the simulator delivers the same
// calls to its other instances after a delay. A Table without Peers routes
// exactly as before.

// Peers receives a Table's local changes for the other router instances and
// tells the load they have in flight. The Table calls it under its lock: no
// method may block or call back into the Table, and none may keep a slice it
// is given (PrefixUpdate.Blocks) beyond the call.
type Peers interface {
	// PublishPlacement: placement memory recorded where a conversation
	// now lives (a successful answer).
	PublishPlacement(u PlacementUpdate)
	// PublishTurn: a conversation's turn was routed (Failed false), or
	// ended without an answer (Failed true). An answered turn is announced
	// by its PublishPlacement.
	PublishTurn(u TurnUpdate)
	// PublishPrefix: the prefix index inserted a prompt's blocks on a
	// replica (Routed), or learned that the replica lost its cache.
	PublishPrefix(u PrefixUpdate)
	// AddLoad: this instance's in-flight load on replica changed by
	// (requests, tokens): +1 and the charge when a request is routed, the
	// negation when it is released.
	AddLoad(replica string, requests, tokens int64)
	// RemoteLoad is the sum of the other instances' in-flight load on
	// replica, as last heard. It is called for every replica of every
	// pick: it must be cheap and must not allocate.
	RemoteLoad(replica string) (requests, tokens int64)
}

// PlacementUpdate is one placement-memory entry, as instances exchange it.
type PlacementUpdate struct {
	Key     uint64 // conversation key hash, salted (query.Key: Input.Hash ^ the adapter's salt)
	Replica string
	Cached  int   // tokens believed cached there: the last prompt and its answer
	Prompt  int   // the last prompt's tokens, as reported (or estimated)
	Chars   int   // the last prompt's length in characters
	At      int64 // when it was recorded (ns, the publisher's clock)
}

// TurnUpdate announces a conversation's turn in flight on a replica, so that
// the instance receiving the conversation's next turn, which may arrive
// before the publisher's release does, knows where the turn went and what
// load of it to discount (Table.ApplyTurn).
type TurnUpdate struct {
	Key     uint64 // conversation key hash, salted (query.Key: Input.Hash ^ the adapter's salt)
	Replica string
	Failed  bool  // the turn ended without an answer
	Charge  int64 // its load on Replica (tokens)
	Prompt  int   // its prompt's tokens, as estimated at the pick
	Output  int   // the output tokens it asked for (max_tokens)
	Chars   int   // its prompt's length in characters
	At      int64 // when it was routed, or failed (ns, the publisher's clock)
}

// PrefixUpdate is one prefix-index change, as instances exchange it.
type PrefixUpdate struct {
	Replica string
	// Lost: the replica reported reusing less than half of what the index
	// expected, so everything believed of it is forgotten before Blocks
	// (the prompt it has just processed) are inserted. Otherwise Blocks
	// are inserted (a request was routed there).
	Lost bool
	// Blocks are the chained block hashes, in chain order, as the index
	// keys them: an adapter's already xored with its salt (query.Salt).
	Blocks []uint64
	At     int64 // ns, the publisher's clock
}

// SetPeers connects the table to other router instances (nil disconnects
// it). Set it before routing; requests already in flight are not announced.
func (t *Table) SetPeers(p Peers) {
	t.mu.Lock()
	t.peers = p
	t.mu.Unlock()
}

// ApplyPlacement records a placement another instance learned, without
// publishing it again. An entry this instance used or wrote after u.At is
// newer and stays (this instance routed a later turn itself). It is safe for
// concurrent use.
func (t *Table) ApplyPlacement(u PlacementUpdate) {
	if u.Replica == "" {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if tn, _, ok := t.mem.turns.peek(u.Key); ok && tn.At <= u.At {
		t.mem.turns.delete(u.Key) // the turn it answers
	}
	id := t.intern(u.Replica)
	t.mem.putIfNewer(u.Key, Place{
		Replica: id,
		Cached:  int32(min(max(u.Cached, 0), maxInt32)),
		Prompt:  int32(min(max(u.Prompt, 0), maxInt32)),
		Chars:   int32(min(max(u.Chars, 0), maxInt32)),
		// The traffic routed there since is counted from now: this
		// instance does not know what the publisher had routed.
		Sent: t.routed[id],
	}, u.At)
}

// ApplyTurn records or forgets another instance's turn in flight, without
// publishing it again. A routed turn is kept until the conversation's next
// request here outgrows its prompt (memory.Lookup: the turn is then over,
// its replica is the conversation's place, and its load is not counted at
// that pick), its publisher announces it answered (ApplyPlacement) or
// failed, or placement memory's TTL passes. A turn older than what this
// instance already knows of the conversation (its placement, or the
// failure of a later turn) is ignored: messages may arrive out of order.
// It is safe for concurrent use.
func (t *Table) ApplyTurn(u TurnUpdate) {
	if u.Replica == "" {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if u.Failed {
		t.mem.turns.putIfNewer(u.Key, turn{Failed: true, At: u.At}, u.At)
		return
	}
	if _, seen, ok := t.mem.places.peek(u.Key); ok && seen > u.At {
		return
	}
	id := t.intern(u.Replica)
	t.mem.turns.putIfNewer(u.Key, turn{
		Replica: id,
		Prompt:  int32(min(max(u.Prompt, 0), maxInt32)),
		Output:  int32(min(max(u.Output, 0), maxInt32)),
		Chars:   int32(min(max(u.Chars, 0), maxInt32)),
		Charge:  min(max(u.Charge, 0), MaxCharge),
		Sent:    t.routed[id],
		At:      u.At,
	}, u.At)
}

// ApplyPrefix applies another instance's prefix-index change, without
// publishing it again. Without a prefix index it does nothing. It is safe
// for concurrent use; u.Blocks is not kept.
func (t *Table) ApplyPrefix(u PrefixUpdate) {
	if u.Replica == "" || len(u.Blocks) == 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.px == nil {
		return
	}
	id := t.intern(u.Replica)
	if u.Lost {
		t.px.ix.Forget(id)
	}
	t.px.ix.Insert(id, u.Blocks, u.At) // already salted by the publisher
}

// withPeerLoads returns the rows and total a pick reads when peers are
// connected: the table's own rows (with this pick's Match) plus each
// replica's remote load, less the load of the remote turn q shows is over
// (q.Ended). t.mu is held; the rows are scratch space reused by every pick.
func (t *Table) withPeerLoads(q *query) ([]policy.Row, policy.Load) {
	if cap(t.peerRows) < len(t.rows) {
		t.peerRows = make([]policy.Row, len(t.rows))
	}
	rows := t.peerRows[:len(t.rows)]
	copy(rows, t.rows)
	total := t.total
	ended := -1
	if q.Ended {
		ended = t.indexOf(q.Place.Replica)
	}
	for i, name := range t.snap.names {
		req, tok := t.peers.RemoteLoad(name)
		if i == ended {
			req, tok = req-1, tok-q.EndedCharge
		}
		req, tok = max(req, 0), max(tok, 0)
		rows[i].Load.Requests = satAdd(rows[i].Load.Requests, req)
		rows[i].Load.Tokens = satAdd(rows[i].Load.Tokens, tok)
		total.Requests = satAdd(total.Requests, req)
		total.Tokens = satAdd(total.Tokens, tok)
	}
	return rows, total
}

// publishRouted announces a routed request: its load, and the optimistic
// prefix insert. t.mu is held.
func (t *Table) publishRouted(tk *Ticket, now int64) {
	name := tk.Replica.Name
	t.peers.AddLoad(name, 1, tk.Charge)
	if t.px != nil && len(tk.blocks) > 0 {
		t.peers.PublishPrefix(PrefixUpdate{Replica: name, Blocks: t.saltedBlocks(tk), At: now})
	}
	// The turn last: a transport that sends a turn at once (the live node)
	// takes what was published before it along.
	t.peers.PublishTurn(TurnUpdate{Key: tk.key, Replica: name, Charge: tk.Charge,
		Prompt: tk.EstPrompt, Output: int(tk.output), Chars: int(tk.chars), At: now})
}

// publishReleased announces a released request: its load, and what placement
// memory and the prefix index learned from the answer. t.mu is held.
func (t *Table) publishReleased(tk *Ticket, out Outcome, now int64) {
	name := tk.Replica.Name
	t.peers.AddLoad(name, -1, -tk.Charge)
	if p, ok := placeOf(tk, out); ok {
		t.peers.PublishPlacement(PlacementUpdate{Key: tk.key, Replica: name,
			Cached: int(p.Cached), Prompt: int(p.Prompt), Chars: int(p.Chars), At: now})
	} else {
		t.peers.PublishTurn(TurnUpdate{Key: tk.key, Replica: name, Failed: true, At: now})
	}
	if t.px != nil && lostCache(tk, out) {
		t.peers.PublishPrefix(PrefixUpdate{Replica: name, Lost: true, Blocks: t.saltedBlocks(tk), At: now})
	}
}

// saltedBlocks are tk's blocks as the prefix index keys them, for a
// PrefixUpdate: the ticket's own slice for the base model (salt 0), else a
// salted copy in scratch space that the next publish reuses (Peers keep no
// slice beyond the call). The caller's slice is never changed. t.mu is held.
func (t *Table) saltedBlocks(tk *Ticket) []uint64 {
	if tk.salt == 0 {
		return tk.blocks
	}
	t.pubBlocks = append(t.pubBlocks[:0], tk.blocks...)
	for i := range t.pubBlocks {
		t.pubBlocks[i] ^= tk.salt
	}
	return t.pubBlocks
}

// PeerLoad is the other instances' in-flight load on each replica of the
// current set, in Status order (nil without peers), for /replicas.
func (t *Table) PeerLoad() []policy.Load {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.peers == nil {
		return nil
	}
	out := make([]policy.Load, len(t.snap.names))
	for i, name := range t.snap.names {
		out[i].Requests, out[i].Tokens = t.peers.RemoteLoad(name)
	}
	return out
}
