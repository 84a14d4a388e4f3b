package state

// Placement memory: where each conversation was last served, and what the
// replica reported about it, bounded in entries (LRU) and age (TTL). Keys
// are conversation hashes, not strings, so an entry is a fixed 48 bytes plus
// its map slot (≈ 100 bytes per conversation in all; see the benchmark).
// Not safe for concurrent use: Table guards it.

// Place is what placement memory knows about one conversation.
type Place struct {
	Replica uint32 // interned replica id
	Cached  int32  // tokens believed cached there: last prompt + answer
	Prompt  int32  // last prompt's tokens, as reported (or estimated)
	Chars   int32  // last prompt's length in characters
	// Sent is the replica's count of tokens routed to it (all
	// conversations) when this was recorded: the traffic since, which
	// may have pushed this conversation out of its cache, is the count now
	// minus Sent.
	Sent uint64
}

// entry is one key's value in an lru.
type entry[V any] struct {
	key        uint64
	seen       int64 // last use, ns on the caller's clock
	val        V
	prev, next int32 // LRU list (indices into entries), -1 at the ends
}

// lru maps conversation keys to values, bounded in entries (least recently
// used first out) and age (TTL since last use). Its entries live in one
// slice with a free list: no allocation per entry once warm.
type lru[V any] struct {
	max     int
	ttl     int64
	index   map[uint64]int32
	entries []entry[V]
	head    int32 // most recently used
	tail    int32 // least recently used
	free    int32 // free list through next
}

// memory is placement memory: where each conversation was last served
// (places), and the turns other router instances announced routed and have
// not yet announced answered (turns; see Table.ApplyTurn).
type memory struct {
	places lru[Place]
	turns  lru[turn]
	// charsPerToken estimates the tokens a prompt grew by since an
	// announced turn (Config.CharsPerToken).
	charsPerToken float64
}

// turn is a conversation's turn that another router instance routed and
// has not yet announced answered (or failed): where it went, its prompt and
// its load there (issue #13).
type turn struct {
	// Failed marks a turn announced failed: kept so that its own routed
	// announcement, if it arrives later, is ignored (memberlist hands
	// queued messages over last in, first out).
	Failed  bool
	Replica uint32
	Prompt  int32  // the prompt's tokens, as the publisher estimated them
	Output  int32  // the output tokens it asked for
	Chars   int32  // the prompt's length in characters
	Charge  int64  // the load it adds to Replica (tokens)
	Sent    uint64 // the replica's routed-token count here when it was applied
	At      int64  // when it was routed (ns, the publisher's clock)
}

func newMemory(max int, ttl int64, charsPerToken float64) *memory {
	return &memory{places: newLRU[Place](max, ttl), turns: newLRU[turn](max, ttl), charsPerToken: charsPerToken}
}

func newLRU[V any](max int, ttl int64) lru[V] {
	return lru[V]{max: max, ttl: ttl, index: make(map[uint64]int32), head: -1, tail: -1, free: -1}
}

func (m *memory) len() int { return len(m.places.index) }

// get returns the place of key if known and not older than the TTL, and
// when it was last used before now; a successful get counts as a use.
func (m *memory) get(key uint64, now int64) (Place, int64, bool) { return m.places.get(key, now) }

// put records the place of key at time now.
func (m *memory) put(key uint64, p Place, now int64) { m.places.put(key, p, now) }

// putIfNewer records the place of key as of time at (another instance's
// update), unless the entry was used or written after at.
func (m *memory) putIfNewer(key uint64, p Place, at int64) { m.places.putIfNewer(key, p, at) }

// expire drops the entries not used for longer than the TTL.
func (m *memory) expire(now int64) {
	m.places.expire(now)
	m.turns.expire(now)
}

// reset forgets everything.
func (m *memory) reset() {
	m.places.reset()
	m.turns.reset()
}

// get returns the value of key if known and not older than the TTL, and
// when it was last used before now; a successful get counts as a use.
func (m *lru[V]) get(key uint64, now int64) (V, int64, bool) {
	var zero V
	i, ok := m.index[key]
	if !ok {
		return zero, 0, false
	}
	e := &m.entries[i]
	if now-e.seen > m.ttl {
		m.remove(i)
		return zero, 0, false
	}
	seen := e.seen
	e.seen = now
	m.unlink(i)
	m.pushFront(i)
	return e.val, seen, true
}

// peek returns the value of key and when it was last used, without counting
// a use and whatever its age.
func (m *lru[V]) peek(key uint64) (V, int64, bool) {
	i, ok := m.index[key]
	if !ok {
		var zero V
		return zero, 0, false
	}
	return m.entries[i].val, m.entries[i].seen, true
}

// delete forgets key.
func (m *lru[V]) delete(key uint64) {
	if i, ok := m.index[key]; ok {
		m.remove(i)
	}
}

// put records the value of key at time now, evicting the least recently
// used entry when full.
func (m *lru[V]) put(key uint64, v V, now int64) {
	if i, ok := m.index[key]; ok {
		e := &m.entries[i]
		e.val, e.seen = v, now
		m.unlink(i)
		m.pushFront(i)
		return
	}
	if len(m.index) >= m.max {
		m.remove(m.tail)
	}
	var i int32
	if m.free >= 0 {
		i = m.free
		m.free = m.entries[i].next
	} else {
		m.entries = append(m.entries, entry[V]{})
		i = int32(len(m.entries) - 1)
	}
	m.entries[i] = entry[V]{key: key, seen: now, val: v}
	m.index[key] = i
	m.pushFront(i)
}

// putIfNewer records the value of key as of time at (another instance's
// update), unless the entry was used or written after at.
func (m *lru[V]) putIfNewer(key uint64, v V, at int64) {
	if i, ok := m.index[key]; ok && m.entries[i].seen > at {
		return
	}
	m.put(key, v, at)
}

func (m *lru[V]) remove(i int32) {
	delete(m.index, m.entries[i].key)
	m.unlink(i)
	m.entries[i] = entry[V]{next: m.free}
	m.free = i
}

func (m *lru[V]) unlink(i int32) {
	e := &m.entries[i]
	if e.prev >= 0 {
		m.entries[e.prev].next = e.next
	} else {
		m.head = e.next
	}
	if e.next >= 0 {
		m.entries[e.next].prev = e.prev
	} else {
		m.tail = e.prev
	}
	e.prev, e.next = -1, -1
}

func (m *lru[V]) pushFront(i int32) {
	e := &m.entries[i]
	e.prev, e.next = -1, m.head
	if m.head >= 0 {
		m.entries[m.head].prev = i
	}
	m.head = i
	if m.tail < 0 {
		m.tail = i
	}
}

// expire drops the entries not used for longer than the TTL, oldest first,
// so memory falls back even for conversations that never come back. The
// LRU order is also the order of last use, so it stops at the first fresh
// entry: amortised O(1) per call.
func (m *lru[V]) expire(now int64) {
	for m.tail >= 0 && now-m.entries[m.tail].seen > m.ttl {
		m.remove(m.tail)
	}
}

// reset forgets everything.
func (m *lru[V]) reset() {
	*m = newLRU[V](m.max, m.ttl)
}
