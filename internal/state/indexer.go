package state

import (
	"math"

	"github.com/llm-ring/llm-ring/internal/policy"
)

// indexer is routing state that learns where prompts are cached: placement
// memory (always the first) and the prefix index. A Table calls its
// indexers under its lock, in the live router and the simulator alike, so
// an indexer needs no locking of its own; it must not block, must be
// deterministic (no clock: now is the driver's, in ns; no map-order
// dependence), and must not keep the query, the matches or their slices.
// An indexer is handed data, never the Table.
type indexer interface {
	// lookup tells what the indexer believes each replica holds of q's
	// prompt, raising rows' Match in m. Placement memory also fills
	// q.Place and q.Known.
	lookup(q *query, m *matches, now int64)
	// routed is called once the policy picked tk's replica: an optimistic
	// insert (the replica will probably hold the prompt once it answers).
	routed(q *query, tk *Ticket, now int64)
	// finished is called when the request ends: out says whether the
	// replica answered and, if Known, its counts (prompt tokens reused from
	// its cache, processed, generated). The correction happens here.
	finished(tk *Ticket, out Outcome, now int64)
	// forget is called when replica id leaves the set.
	forget(id uint32)
	// reset forgets everything (a new experiment run).
	reset()
}

// matches is what a lookup writes into: the snapshot's rows, the interned
// id of each row and the row of each id, and the rows whose Match was
// raised (cleared after the pick). The Table fills it for each pick under
// its lock.
type matches struct {
	rows    []policy.Row
	ids     []uint32 // ids[i]: interned id of row i
	list    uint64   // names ids: the same number, the same ids (snapshot.n)
	index   []int32  // index[id]: row of interned id, -1 when not in the set
	touched []int32
	// every: a lookup raised rows without recording them in touched
	// (raiseEach: nearly every row, when every replica holds a shared
	// system prompt); clear then zeroes every row's Match.
	every bool
}

// raise raises row i's Match to tokens.
func (m *matches) raise(i int, tokens int) {
	row := &m.rows[i]
	if tokens <= row.Match {
		return
	}
	if row.Match == 0 {
		m.touched = append(m.touched, int32(i))
	}
	row.Match = tokens
}

// raiseID raises the Match of interned replica id's row, if it is in the set.
func (m *matches) raiseID(id uint32, tokens int) {
	if int(id) < len(m.index) {
		if i := m.index[id]; i >= 0 {
			m.raise(int(i), tokens)
		}
	}
}

// raiseEach raises each row i's Match to tok[depth[i]] (depth: a prefix
// Match result, one per row; tok: tokens by matched blocks). It is raise
// for every row with depth[i] > 0, in one pass without touched: clear
// zeroes every row instead.
func (m *matches) raiseEach(depth []int32, tok []int) {
	rows := m.rows[:len(depth)]
	for i, n := range depth {
		if n > 0 {
			if t := tok[n]; t > rows[i].Match {
				rows[i].Match = t
			}
		}
	}
	m.every = true
}

// clear zeroes every raised Match.
func (m *matches) clear() {
	if m.every {
		for i := range m.rows {
			m.rows[i].Match = 0
		}
		m.every = false
	} else {
		for _, i := range m.touched {
			m.rows[i].Match = 0
		}
	}
	m.touched = m.touched[:0]
}

// query is one request as the indexers see it during Route.
type query struct {
	Key    uint64   // conversation key hash, salted: Input.Hash ^ Salt
	Blocks []uint64 // prompt block hashes, as the driver hashed them (not salted)
	Chars  int      // prompt characters
	// Salt keeps a LoRA adapter's routing memory apart from the base
	// model's and other adapters' (prefix.Salt(Input.Adapter); 0 for the
	// base model), as the engines keep their caches apart: Key is already
	// salted, and an indexer keys each block as block ^ Salt (the prefix
	// index's salted methods), never by changing Blocks, which the caller
	// still owns.
	Salt uint64

	// Set by placement memory's Lookup: where the conversation was last
	// served and what the replica reported then.
	Place Place
	Known bool
	// Ended: another router instance routed a turn of this conversation
	// and had not announced its answer, but this request's prompt is
	// longer: the client has the answer, so that turn is over (issue #13).
	// Place is that turn's replica; its load there, EndedCharge tokens and
	// one request, still counted in the peers' loads until the publisher's
	// release arrives, is not counted at this pick.
	Ended       bool
	EndedCharge int64
}

var _ indexer = (*memory)(nil)

// lookup implements indexer: the conversation's last place, if known and
// fresh; its replica's Match is the tokens cached there after that turn.
//
// A turn another instance announced routed (Table.ApplyTurn) and this
// request's prompt outgrows is over: a client sends a conversation's next
// turn once it has the previous answer. That turn's replica is then the
// conversation's place (its prompt cached there, and its answer: at most
// the output it asked for, no more than the prompt grew), and the turn is
// forgotten. A prompt no longer than the announced one (a retry, a
// concurrent request) leaves it.
func (m *memory) lookup(q *query, ms *matches, now int64) {
	q.Place, _, q.Known = m.get(q.Key, now)
	if q.Known {
		ms.raiseID(q.Place.Replica, int(q.Place.Cached))
	}
	tn, at, ok := m.turns.peek(q.Key)
	if ok && now-at > m.turns.ttl {
		m.turns.delete(q.Key)
		return
	}
	if !ok || tn.Failed || q.Chars <= int(tn.Chars) {
		return
	}
	m.turns.delete(q.Key)
	grown := int32(math.Ceil(float64(q.Chars-int(tn.Chars)) / m.charsPerToken))
	cached := int32(min(int64(tn.Prompt)+int64(min(tn.Output, grown)), maxInt32))
	q.Place = Place{Replica: tn.Replica, Cached: cached, Prompt: tn.Prompt, Chars: tn.Chars, Sent: tn.Sent}
	q.Known = true
	q.Ended, q.EndedCharge = true, tn.Charge
	ms.raiseID(tn.Replica, int(cached))
}

// routed implements indexer: placement memory learns only from answers.
func (m *memory) routed(*query, *Ticket, int64) {}

// finished implements indexer: a successful answer records where the
// conversation now lives and how many of its tokens are cached there (the
// prompt and the answer, as reported; estimated when the answer had no
// counts).
func (m *memory) finished(tk *Ticket, out Outcome, now int64) {
	if p, ok := placeOf(tk, out); ok {
		m.put(tk.key, p, now)
	}
}

// placeOf is what placement memory records for a finished request: nothing
// for a failure.
func placeOf(tk *Ticket, out Outcome) (Place, bool) {
	if !out.OK {
		return Place{}, false
	}
	prompt, predicted := tk.EstPrompt, 0
	if out.Known {
		prompt, predicted = out.CacheN+out.PromptN, out.PredictedN
	}
	return Place{
		Replica: tk.id,
		Cached:  int32(min(prompt+predicted, maxInt32)),
		Prompt:  int32(min(prompt, maxInt32)),
		Chars:   tk.chars,
		Sent:    tk.sent,
	}, true
}

const maxInt32 = 1<<31 - 1

// forget implements indexer. Entries that point to a replica which left
// stay: Route ignores them while it is away, and if it comes back the
// cache-lost check corrects them on its first answer.
func (m *memory) forget(uint32) {}

// memory's reset (placement.go) implements indexer's.
