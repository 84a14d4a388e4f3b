package prefix

import (
	"errors"
	"fmt"
	"math"
	"slices"
)

// Config sizes an Index. The names in errors are the keys of the router's
// prefix_index settings.
type Config struct {
	BlockChars     int     // characters (bytes) per block: the Hasher's block size
	CharsPerToken  float64 // converts a block to tokens: capacity accounting, Tokens
	CapacityTokens int64   // per replica; least recently touched blocks are evicted beyond it
	TTL            int64   // ns; a block not touched for longer is gone (0: no TTL)
}

// MaxCapacityBlocks bounds a replica's capacity in blocks (capacity_tokens
// divided by the tokens of a block).
const MaxCapacityBlocks = 1 << 24

// Validate reports the first invalid setting, by name.
func (c Config) Validate() error {
	switch {
	case c.BlockChars < 1:
		return fmt.Errorf("block_chars: must be >= 1, got %d", c.BlockChars)
	case !(c.CharsPerToken > 0) || math.IsInf(c.CharsPerToken, 0):
		return fmt.Errorf("chars_per_token: must be a positive number, got %g", c.CharsPerToken)
	case c.CapacityTokens < 1:
		return fmt.Errorf("capacity_tokens: must be >= 1, got %d", c.CapacityTokens)
	case c.TTL < 0:
		return fmt.Errorf("ttl: must be >= 0 (0: no TTL), got %d", c.TTL)
	}
	switch n := c.capacityBlocks(); {
	case n < 1:
		return fmt.Errorf("capacity_tokens: %d tokens hold no block of %g tokens (block_chars %d / chars_per_token %g)",
			c.CapacityTokens, c.BlockTokens(), c.BlockChars, c.CharsPerToken)
	case n > MaxCapacityBlocks:
		return fmt.Errorf("capacity_tokens: %d tokens are %.0f blocks, more than the %d a replica may hold",
			c.CapacityTokens, n, MaxCapacityBlocks)
	}
	return nil
}

// BlockTokens is the number of tokens a block stands for.
func (c Config) BlockTokens() float64 { return float64(c.BlockChars) / c.CharsPerToken }

// CapacityBlocks is a replica's capacity in blocks: CapacityTokens divided by
// BlockTokens, rounded down.
func (c Config) CapacityBlocks() int { return int(c.capacityBlocks()) }

func (c Config) capacityBlocks() float64 {
	return math.Floor(float64(c.CapacityTokens) / c.BlockTokens())
}

// Tokens converts a number of blocks (a Match result) to tokens, rounded down.
func (c Config) Tokens(blocks int32) int64 { return int64(float64(blocks) * c.BlockTokens()) }

// Index is an approximate, per-replica record of which prompt blocks each
// replica probably holds in its KV / prompt cache: the blocks it was sent
// (inserted optimistically when a request is routed there), least recently
// touched first evicted at a capacity in tokens that approximates the
// replica's cache, and forgotten after a TTL. Corrections (Evict) remove what
// a replica turned out not to hold.
//
// Replicas are small uint32 ids interned by the caller; ids may be sparse (up
// to a few thousand). Time is an int64 in ns passed by the caller, expected
// not to go backwards: per replica, a time earlier than one already seen
// counts as the latest seen. An Index is not safe for concurrent use: the
// caller's lock guards it, an exclusive one (Match drops expired blocks; only
// Stats just reads).
//
// The only mutators of what replicas hold are Insert and Evict (plus Forget
// and Expire, which drop whole replicas and expired blocks).
//
// Layout. One table from block hash to an entry (in a slab) holding a bitset
// of the replicas (internal slots 0..63) that hold the block and a holder
// count; one table from (block hash, slot) to its node (blocks.go), and an intrusive LRU
// list of nodes (block, its entry, replica, last touch) in one slab with
// int32 links and a free list, so memory is bounded by capacity and
// steady-state work allocates nothing; dropping a node reaches its entry
// without a map lookup. Each replica gets the lowest free internal slot; the first 64 live
// replicas get bits in the bitset.
//
// Match walks the prompt's blocks in order with the bitset of the candidate
// replicas still matching: one map lookup per matched block, whatever the
// number of replicas, until a few candidates are left, which then follow
// their own lists (match.go). Replicas in slots >= 64 are matched the same
// way with a wider bitset, built per block from the block's chain of such
// holders, or kept with the block while many hold it (wide.go): the work per
// block is bounded by 64 chain steps or one word per 64 replicas, never a
// lookup per replica. Expired blocks are always the tail of their replica's
// LRU list (touch times only grow towards the head), so dropping them before
// a lookup costs one comparison per candidate (tailAt) plus one step per
// dropped block.
type Index struct {
	cfg       Config
	capBlocks int32

	blocks  openTable // block hash → its entry in ents (blocks.go)
	pairs   openTable // (block, slot) → the slot's node of it (blocks.go)
	ents    []entry   // slab; free entries are linked through over
	entFree int32     // head of the entries' free list, +1 (0: empty)
	slotOf  []int32   // by replica id: slot+1, 0 when unknown
	reps    []rep     // by slot
	nodes   []node    // slab; free nodes are linked through next
	free    int32     // head of the free list, nilNode if empty
	used    int       // nodes in use
	tailAt  []int64   // by slot: its LRU tail's touch time (math.MaxInt64: none)
	found   []int32   // Insert's scratch: the nodes of a prompt's held leading blocks

	wide wideHolders // holders in slots >= 64 (wide.go)
	list candList    // Match's last long candidate list (list.go)
}

const nilNode = -1

type entry struct {
	block   uint64 // its block (the key of its slot in blocks)
	mask    uint64 // holders among slots 0..63
	holders int32  // all holders
	over    int32  // holders in slots >= 64: head node of their chain, +1 (0: none)
	nover   int32  // their number
	hi      int32  // and their mask in wideHolders, +1 (0: none; kept while nover is large)
}

type node struct {
	block        uint64
	touched      int64
	prev, next   int32 // LRU list of the slot (prev towards the head: more recent)
	slot         int32
	ent          int32 // the block's entry in ents
	bprev, bnext int32 // the block's chain of holders in slots >= 64
}

type rep struct {
	id         uint32
	live       bool
	head, tail int32 // most and least recently touched
	count      int32
	newest     int64 // latest touch time seen
}

// New returns an empty Index. Errors name the invalid setting.
func New(cfg Config) (*Index, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Index{
		cfg:       cfg,
		capBlocks: int32(cfg.CapacityBlocks()),
		free:      nilNode,
	}, nil
}

// Config returns the Index's configuration.
func (ix *Index) Config() Config { return ix.cfg }

// slot returns the slot of a replica, or -1.
func (ix *Index) slot(id uint32) int32 {
	if int(id) >= len(ix.slotOf) {
		return -1
	}
	return ix.slotOf[id] - 1
}

// addSlot gives a new replica the lowest free slot.
func (ix *Index) addSlot(id uint32) int32 {
	if int(id) >= len(ix.slotOf) {
		ix.slotOf = append(ix.slotOf, make([]int32, int(id)+1-len(ix.slotOf))...)
	}
	s := int32(len(ix.reps))
	for i := range ix.reps {
		if !ix.reps[i].live {
			s = int32(i)
			break
		}
	}
	if int(s) == len(ix.reps) {
		ix.reps = append(ix.reps, rep{})
	}
	ix.reps[s] = rep{id: id, live: true, head: nilNode, tail: nilNode}
	if int(s) == len(ix.tailAt) {
		ix.tailAt = append(ix.tailAt, 0)
	}
	ix.tailAt[s] = math.MaxInt64
	ix.slotOf[id] = s + 1
	ix.moved(id, s)
	return s
}

// Insert records that replica was sent a prompt with these blocks (in prompt
// order): they are now probably in its cache, touched at now. Blocks it
// already holds are touched; new ones may evict its least recently touched
// blocks beyond the capacity. The blocks are touched last to first, so the
// leading blocks of a prompt, which later prompts share most, are the most
// recent and the last to be evicted; a prompt longer than the capacity keeps
// its leading blocks. Insert first drops the replica's expired blocks.
func (ix *Index) Insert(replica uint32, blocks []uint64, now int64) {
	ix.InsertSalted(replica, blocks, 0, now)
}

// InsertSalted is Insert for an adapter's prompt: each block is recorded as
// block ^ salt (salt.go; salt 0 is Insert). blocks is not modified.
func (ix *Index) InsertSalted(replica uint32, blocks []uint64, salt uint64, now int64) {
	ix.insert(replica, blocks, salt, now, false)
}

// MatchInsertSalted is MatchSalted of the one replica, then InsertSalted of
// the blocks on it, in one walk of its list: it returns the leading blocks
// the replica held, unexpired at now, before the insert.
func (ix *Index) MatchInsertSalted(replica uint32, blocks []uint64, salt uint64, now int64) int32 {
	return ix.insert(replica, blocks, salt, now, true)
}

// insert is InsertSalted; with match, it returns what MatchSalted of the
// one replica would have said before it (else 0).
func (ix *Index) insert(replica uint32, blocks []uint64, salt uint64, now int64, match bool) int32 {
	if len(blocks) == 0 {
		return 0
	}
	s := ix.slot(replica)
	if s < 0 {
		s = ix.addSlot(replica)
	}
	r := &ix.reps[s]
	var matched int32 = -1 // the walk below counts it, unless time went back
	if now < r.newest {
		if match {
			var one [1]int32
			ix.MatchSalted(blocks, salt, now, []uint32{replica}, one[:])
			matched = one[0]
		}
		now = r.newest
	}
	r.newest = now
	ix.expireSlot(s, now)
	// The nodes of the leading blocks it holds, found by following its
	// list (no map lookup): a conversation's next turn holds most of them.
	if cap(ix.found) < len(blocks) {
		ix.found = make([]int32, len(blocks))
	}
	found := ix.found[:len(blocks)]
	held := ix.follow(s, blocks, salt, 0, found)
	if matched < 0 {
		matched = int32(held)
	}
	for i := len(blocks) - 1; i >= 0; i-- {
		b := blocks[i] ^ salt
		n := int32(nilNode)
		if i < held && ix.nodes[found[i]].slot == s && ix.nodes[found[i]].block == b {
			n = found[i] // still held: no eviction of this Insert took it
		} else if m, ok := ix.lookupNode(s, b); ok {
			n = m
		}
		if n != nilNode {
			ix.nodes[n].touched = now
			ix.moveToFront(r, n)
			continue
		}
		ix.insertNew(s, b, now)
	}
	ix.syncTail(s)
	if !match {
		return 0
	}
	return matched
}

// insertNew makes block b the most recently touched block of slot s, which
// does not hold it, evicting the slot's least recently touched block at
// capacity.
func (ix *Index) insertNew(s int32, b uint64, now int64) {
	r := &ix.reps[s]
	if r.count >= ix.capBlocks {
		ix.remove(r.tail)
	}
	n := ix.alloc()
	ix.nodes[n] = node{block: b, touched: now, prev: nilNode, next: r.head, slot: s}
	if r.head != nilNode {
		ix.nodes[r.head].prev = n
	} else {
		r.tail = n
	}
	r.head = n
	r.count++
	ix.addPair(b, s, n)
	ei, ok := ix.lookupBlock(b)
	if !ok {
		ei = ix.allocEntry()
		ix.ents[ei].block = b
		ix.addBlock(b, ei)
	}
	ix.nodes[n].ent = ei
	e := &ix.ents[ei]
	e.holders++
	if s < 64 {
		e.mask |= 1 << uint(s)
	} else {
		ix.holdWide(e, n)
	}
}

// follow returns the first i >= from such that slot s does not hold
// blocks[i] (keyed with salt), the blocks before from being held. It follows
// s's LRU list from each held block's node to the next, looking a block up in
// the pairs table only where the list does not go on with it: Insert touches a
// prompt's blocks last to first, so they lie in prompt order from the head,
// and a conversation's next prompt repeats them. With found, it records
// the node of each held block from from on.
func (ix *Index) follow(s int32, blocks []uint64, salt uint64, from int, found []int32) int {
	n := int32(nilNode)
	for i := from; i < len(blocks); i++ {
		b := blocks[i] ^ salt
		if n != nilNode {
			if c := ix.nodes[n].next; c != nilNode && ix.nodes[c].block == b {
				n = c
				if found != nil {
					found[i] = n
				}
				continue
			}
		}
		m, ok := ix.lookupNode(s, b)
		if !ok {
			return i
		}
		n = m
		if found != nil {
			found[i] = n
		}
	}
	return len(blocks)
}

// Evict drops blocks[from:] from replica: the replica reported it did not
// have them (for example, a turn that expected a cache hit got none). Blocks
// it does not hold are ignored.
func (ix *Index) Evict(replica uint32, blocks []uint64, from int) {
	ix.EvictSalted(replica, blocks, 0, from)
}

// EvictSalted is Evict for an adapter's prompt (as InsertSalted recorded it).
func (ix *Index) EvictSalted(replica uint32, blocks []uint64, salt uint64, from int) {
	s := ix.slot(replica)
	if s < 0 {
		return
	}
	for _, b := range blocks[min(max(from, 0), len(blocks)):] {
		if n, ok := ix.lookupNode(s, b^salt); ok {
			ix.remove(n)
		}
	}
}

// Forget drops everything replica holds: it left the replica set. Its slot
// is reused by the next new replica.
func (ix *Index) Forget(replica uint32) {
	s := ix.slot(replica)
	if s < 0 {
		return
	}
	r := &ix.reps[s]
	for n := r.head; n != nilNode; {
		next, b := ix.nodes[n].next, ix.nodes[n].block
		ix.dropPair(b, s, n)
		ix.unhold(b, s, n)
		ix.release(n)
		n = next
	}
	ix.reps[s] = rep{head: nilNode, tail: nilNode}
	ix.tailAt[s] = math.MaxInt64
	ix.slotOf[replica] = 0
	ix.moved(replica, -1)
}

// Expire drops every block not touched for longer than the TTL and returns
// how many (block, replica) pairs it dropped; with no TTL it does nothing.
// The work is one check per replica plus one step per dropped block, so
// memory falls even for replicas never looked up again; each block is
// dropped once, so calling Expire on a timer costs O(replicas) amortized.
// (Insert and Match also drop the expired blocks of the replicas they
// touch, so calling Expire is only about memory.)
func (ix *Index) Expire(now int64) int {
	if ix.cfg.TTL == 0 {
		return 0
	}
	dropped := 0
	for s := range ix.reps {
		if ix.reps[s].live {
			dropped += ix.expireSlot(int32(s), now)
		}
	}
	return dropped
}

// expireSlot drops a slot's expired blocks, from its LRU tail.
func (ix *Index) expireSlot(s int32, now int64) int {
	if ix.cfg.TTL == 0 {
		return 0
	}
	cutoff := now - ix.cfg.TTL
	r := &ix.reps[s]
	dropped := 0
	for ix.tailAt[s] < cutoff {
		ix.remove(r.tail)
		dropped++
	}
	return dropped
}

// moveToFront makes n the most recently touched node of r.
func (ix *Index) moveToFront(r *rep, n int32) {
	if r.head == n {
		return
	}
	nd := &ix.nodes[n]
	ix.nodes[nd.prev].next = nd.next // n is not the head, so prev exists
	if nd.next != nilNode {
		ix.nodes[nd.next].prev = nd.prev
	} else {
		r.tail = nd.prev
	}
	nd.prev = nilNode
	nd.next = r.head
	ix.nodes[r.head].prev = n
	r.head = n
}

// remove drops node n: from its replica's list and map, and from the block's
// holders.
func (ix *Index) remove(n int32) {
	nd := ix.nodes[n]
	r := &ix.reps[nd.slot]
	if nd.prev != nilNode {
		ix.nodes[nd.prev].next = nd.next
	} else {
		r.head = nd.next
	}
	if nd.next != nilNode {
		ix.nodes[nd.next].prev = nd.prev
	} else {
		r.tail = nd.prev
		ix.syncTail(nd.slot)
	}
	r.count--
	ix.dropPair(nd.block, nd.slot, n)
	ix.unhold(nd.block, nd.slot, n)
	ix.release(n)
}

// unhold removes slot s (its node n) from the holders of block b.
func (ix *Index) unhold(b uint64, s int32, n int32) {
	ei := ix.nodes[n].ent
	e := &ix.ents[ei]
	e.holders--
	if s < 64 {
		e.mask &^= 1 << uint(s)
	} else {
		ix.unholdWide(e, n)
	}
	if e.holders <= 0 {
		ix.dropBlock(b, ei)
		ix.ents[ei] = entry{over: ix.entFree}
		ix.entFree = ei + 1
	}
}

// entry returns block b's entry (the zero entry, no holders, if none holds
// it).
func (ix *Index) entry(b uint64) entry {
	if ei, ok := ix.lookupBlock(b); ok {
		return ix.ents[ei]
	}
	return entry{}
}

// allocEntry returns a free entry (zero) of the slab.
func (ix *Index) allocEntry() int32 {
	if ix.entFree != 0 {
		ei := ix.entFree - 1
		ix.entFree = ix.ents[ei].over
		ix.ents[ei].over = 0
		return ei
	}
	if len(ix.ents) >= math.MaxInt32 {
		panic(errTooManyNodes)
	}
	ix.ents = append(ix.ents, entry{})
	return int32(len(ix.ents) - 1)
}

func (ix *Index) alloc() int32 {
	ix.used++
	if ix.free != nilNode {
		n := ix.free
		ix.free = ix.nodes[n].next
		return n
	}
	if len(ix.nodes) >= math.MaxInt32 {
		panic(errTooManyNodes)
	}
	ix.nodes = append(ix.nodes, node{})
	return int32(len(ix.nodes) - 1)
}

var errTooManyNodes = errors.New("prefix: more than 2^31-1 (block, replica) pairs; lower capacity_tokens")

// syncTail records slot s's tail's touch time in tailAt.
func (ix *Index) syncTail(s int32) {
	if t := ix.reps[s].tail; t != nilNode {
		ix.tailAt[s] = ix.nodes[t].touched
		ix.list.tailLow = min(ix.list.tailLow, ix.tailAt[s])
	} else {
		ix.tailAt[s] = math.MaxInt64
	}
}

// release frees node n; its slot -1 tells Insert's found nodes that it no
// longer holds their block.
func (ix *Index) release(n int32) {
	ix.used--
	ix.nodes[n] = node{next: ix.free, slot: -1, bprev: nilNode, bnext: nilNode}
	ix.free = n
}

// Stats is a summary of an Index.
type Stats struct {
	Replicas   int            // replicas holding state (inserted, not forgotten)
	Pairs      int            // (block, replica) pairs held
	Blocks     int            // distinct blocks held by some replica
	PerReplica []ReplicaStats // by replica id
	Bytes      int64          // estimated memory of the Index (see BytesPerPair)
}

// ReplicaStats is one replica's share of an Index.
type ReplicaStats struct {
	Replica uint32
	Blocks  int
}

// Sizes behind Stats.Bytes: a node in the slab, an entry in its slab (the
// tables count their own, blocks.go).
const (
	nodeBytes       = 40
	entryBytes      = 32
	repFixedBytes   = 48 // rep struct + slotOf entry
	indexFixedBytes = 256
)

// Stats summarizes the Index. It allocates (PerReplica); it is not meant for
// the request path.
func (ix *Index) Stats() Stats {
	var st Stats
	st.Pairs = ix.used
	st.Blocks = ix.blocks.n
	for _, r := range ix.reps {
		if !r.live {
			continue
		}
		st.Replicas++
		st.PerReplica = append(st.PerReplica, ReplicaStats{Replica: r.id, Blocks: int(r.count)})
	}
	slices.SortFunc(st.PerReplica, func(a, b ReplicaStats) int { return int(a.Replica) - int(b.Replica) })
	st.Bytes = indexFixedBytes +
		int64(cap(ix.nodes))*nodeBytes + int64(cap(ix.ents))*entryBytes +
		int64(cap(ix.tailAt))*8 + int64(cap(ix.found))*4 +
		int64(len(ix.reps)+len(ix.slotOf))*repFixedBytes/2 +
		ix.blocks.bytes() + ix.pairs.bytes() +
		ix.wide.bytes()
	return st
}
