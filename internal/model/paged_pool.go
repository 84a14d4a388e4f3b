package model

// blockPool is a paged KV cache, as vLLM V1's BlockPool keeps it
// (vllm-project/vllm, vllm/v1/core/block_pool.py and kv_cache_utils.py):
// a fixed number of blocks of blockSize tokens; each block has a reference
// count (the running requests holding it); a full block carries the chain
// hash of its tokens and everything before them and stays findable by that
// hash until it is evicted; a free block (reference count 0) sits in the
// free queue, least recently freed first. Allocation takes the head of the
// queue, evicting its hash if it has one; a prefix-cache hit on a free
// block takes it out of the queue ("touch").
//
// vLLM's initial free queue holds every block in id order, and freed blocks
// join at the tail, so blocks never used come out first: the pool hands out
// fresh ids (up to used) before it pops the queue, which is the same order
// and lets the arrays grow only as far as they are used.
type blockPool struct {
	n    int32 // blocks in the pool
	bs   int   // tokens per block
	used int32 // blocks [0, used) have been handed out at least once

	ref    []int32
	hash   []uint64
	cached []bool // hash is valid and byHash points here
	prev   []int32
	next   []int32
	head   int32 // free queue, -1 when empty
	tail   int32
	queued int32 // blocks in the free queue

	byHash    blockIndex
	evictions int64
	// double-free and leak guards for tests: frees of a block with
	// reference count 0 (must stay 0).
	badFrees int64
}

func newBlockPool(n, bs int) *blockPool {
	return &blockPool{n: int32(n), bs: bs, head: -1, tail: -1}
}

// free is the number of blocks an allocation can take: never used, or in
// the free queue (cached or not).
func (p *blockPool) free() int { return int(p.n-p.used) + int(p.queued) }

// usage is vLLM's kv_cache_usage_perc: the share of blocks held by
// requests (1 − free / total). vLLM subtracts its one null block from the
// total; this pool has none.
func (p *blockPool) usage() float64 {
	return 1 - float64(p.free())/float64(p.n)
}

// cachedBlocks is the number of blocks findable by hash.
func (p *blockPool) cachedBlocks() int { return p.byHash.len() }

// alloc takes one block (p.free() must be positive), evicting the cached
// content of a reused block, and gives it reference count 1.
func (p *blockPool) alloc() int32 {
	var b int32
	if p.used < p.n {
		b = p.used
		p.used++
		p.ref = append(p.ref, 0)
		p.hash = append(p.hash, 0)
		p.cached = append(p.cached, false)
		p.prev = append(p.prev, -1)
		p.next = append(p.next, -1)
	} else {
		b = p.head
		p.unlink(b)
		if p.cached[b] {
			p.byHash.del(p.hash[b])
			p.cached[b] = false
			p.evictions++
		}
	}
	p.ref[b] = 1
	return b
}

// release drops one reference to b; at zero b joins the free queue's tail
// (keeping its hash: it stays a cache hit until evicted).
func (p *blockPool) release(b int32) {
	if p.ref[b] <= 0 {
		p.badFrees++
		return
	}
	p.ref[b]--
	if p.ref[b] > 0 {
		return
	}
	p.prev[b], p.next[b] = p.tail, -1
	if p.tail >= 0 {
		p.next[p.tail] = b
	} else {
		p.head = b
	}
	p.tail = b
	p.queued++
}

// touch adds a reference to a cached block found by a prefix match, taking
// it out of the free queue if nobody held it.
func (p *blockPool) touch(b int32) {
	if p.ref[b] == 0 {
		p.unlink(b)
	}
	p.ref[b]++
}

func (p *blockPool) unlink(b int32) {
	pv, nx := p.prev[b], p.next[b]
	if pv >= 0 {
		p.next[pv] = nx
	} else {
		p.head = nx
	}
	if nx >= 0 {
		p.prev[nx] = pv
	} else {
		p.tail = pv
	}
	p.prev[b], p.next[b] = -1, -1
	p.queued--
}

// lookup returns the cached block with chain hash h.
func (p *blockPool) lookup(h uint64) (int32, bool) {
	return p.byHash.get(h)
}

// register makes the full block b findable by its chain hash h; a block
// with the same content already cached keeps the entry (vLLM keeps both,
// but returns the first; the duplicate is then never a hit either).
func (p *blockPool) register(b int32, h uint64) {
	if p.cached[b] {
		return
	}
	if _, ok := p.byHash.get(h); ok {
		return
	}
	p.byHash.put(h, b)
	p.hash[b] = h
	p.cached[b] = true
}

// queueOrder returns the free queue from head (next evicted) to tail, for
// tests.
func (p *blockPool) queueOrder() []int32 {
	var out []int32
	for b := p.head; b >= 0; b = p.next[b] {
		out = append(out, b)
	}
	return out
}
