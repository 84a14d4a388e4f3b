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

type placeEntry struct {
	key        uint64
	seen       int64 // last use, ns on the caller's clock
	place      Place
	prev, next int32 // LRU list (indices into entries), -1 at the ends
}

type memory struct {
	max     int
	ttl     int64
	index   map[uint64]int32
	entries []placeEntry
	head    int32 // most recently used
	tail    int32 // least recently used
	free    int32 // free list through next
}

func newMemory(max int, ttl int64) *memory {
	return &memory{max: max, ttl: ttl, index: make(map[uint64]int32), head: -1, tail: -1, free: -1}
}

func (m *memory) len() int { return len(m.index) }

// get returns the place of key if known and not older than the TTL, and
// when it was last used before now; a successful get counts as a use.
func (m *memory) get(key uint64, now int64) (Place, int64, bool) {
	i, ok := m.index[key]
	if !ok {
		return Place{}, 0, false
	}
	e := &m.entries[i]
	if now-e.seen > m.ttl {
		m.remove(i)
		return Place{}, 0, false
	}
	seen := e.seen
	e.seen = now
	m.unlink(i)
	m.pushFront(i)
	return e.place, seen, true
}

// put records the place of key at time now, evicting the least recently used
// entry when full.
func (m *memory) put(key uint64, p Place, now int64) {
	if i, ok := m.index[key]; ok {
		e := &m.entries[i]
		e.place, e.seen = p, now
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
		m.entries = append(m.entries, placeEntry{})
		i = int32(len(m.entries) - 1)
	}
	m.entries[i] = placeEntry{key: key, seen: now, place: p}
	m.index[key] = i
	m.pushFront(i)
}

// putIfNewer records the place of key as of time at (another instance's
// update), unless the entry was used or written after at.
func (m *memory) putIfNewer(key uint64, p Place, at int64) {
	if i, ok := m.index[key]; ok && m.entries[i].seen > at {
		return
	}
	m.put(key, p, at)
}

func (m *memory) remove(i int32) {
	delete(m.index, m.entries[i].key)
	m.unlink(i)
	m.entries[i] = placeEntry{next: m.free}
	m.free = i
}

func (m *memory) unlink(i int32) {
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

func (m *memory) pushFront(i int32) {
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
func (m *memory) expire(now int64) {
	for m.tail >= 0 && now-m.entries[m.tail].seen > m.ttl {
		m.remove(m.tail)
	}
}

// reset forgets everything.
func (m *memory) reset() {
	*m = *newMemory(m.max, m.ttl)
}
