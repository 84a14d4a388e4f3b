package state

import (
	"time"

	"github.com/llm-ring/llm-ring/internal/prefix"
)

// PrefixConfig sizes the approximate prefix index (config key prefix_index);
// BlockChars 0 means no prefix index.
type PrefixConfig struct {
	BlockChars     int           // characters per block (the drivers hash with the same size)
	CapacityTokens int64         // per replica, approximating its prompt cache
	TTL            time.Duration // forget a block not sent for this long
}

// prefixIndexer is the second indexer: per replica, the prompt blocks it was
// sent (prefix.Index), so that a prompt shared across conversations (a long
// system prompt, a document many users ask about) is found where it was
// processed, not only where its own conversation was last served.
type prefixIndexer struct {
	ix  *prefix.Index
	cfg prefix.Config
	out []int32 // scratch for Match, grown to the replica count
	// tok[n] is cfg.Tokens(n), the tokens of n matched blocks, for n up
	// to the longest prompt seen: a Match result converts by a read.
	tok []int
}

var _ indexer = (*prefixIndexer)(nil)

func newPrefixIndexer(c PrefixConfig, charsPerToken float64) (*prefixIndexer, error) {
	cfg := prefix.Config{BlockChars: c.BlockChars, CharsPerToken: charsPerToken,
		CapacityTokens: c.CapacityTokens, TTL: int64(c.TTL)}
	ix, err := prefix.New(cfg)
	if err != nil {
		return nil, err
	}
	return &prefixIndexer{ix: ix, cfg: cfg}, nil
}

// lookup implements indexer: the tokens of the prompt's leading blocks each
// replica holds.
func (p *prefixIndexer) lookup(q *query, m *matches, now int64) {
	if len(q.Blocks) == 0 {
		return
	}
	ids := m.ids
	if cap(p.out) < len(ids) {
		p.out = make([]int32, len(ids))
	}
	out := p.out[:len(ids)]
	p.ix.MatchListSalted(q.Blocks, q.Salt, now, ids, m.list, out)
	m.raiseEach(out, p.tokens(len(q.Blocks)))
}

// tokens returns the table of cfg.Tokens(n) for n ≤ blocks.
func (p *prefixIndexer) tokens(blocks int) []int {
	for n := len(p.tok); n <= blocks; n++ {
		p.tok = append(p.tok, int(p.cfg.Tokens(int32(n))))
	}
	return p.tok
}

// routed implements indexer: optimistic insert of the prompt's blocks on the
// chosen replica.
func (p *prefixIndexer) routed(q *query, tk *Ticket, now int64) {
	if len(q.Blocks) == 0 {
		return
	}
	if tk.match == 0 {
		// The pick did not consult the index (its policy does not read
		// Match): what the chosen replica was believed to hold is still
		// the expectation Finished checks the replica's report against,
		// found by the insert's own walk of the replica's blocks.
		tk.match = int(p.cfg.Tokens(p.ix.MatchInsertSalted(tk.id, q.Blocks, q.Salt, now)))
		return
	}
	p.ix.InsertSalted(tk.id, q.Blocks, q.Salt, now)
}

// finished implements indexer. The correction: a turn that expected a hit
// (the view's Match on its replica) and got less than half of it from the
// replica's own report shows that the replica lost more than the index
// modelled (a restart, or an eviction that LRU at our capacity did not
// predict). Its blocks are dropped, and this prompt, which it has just
// processed and now holds, is inserted again.
func (p *prefixIndexer) finished(tk *Ticket, out Outcome, now int64) {
	if !lostCache(tk, out) {
		return
	}
	p.ix.Forget(tk.id)
	p.ix.InsertSalted(tk.id, tk.blocks, tk.salt, now)
}

// lostCache reports the prefix index's correction case: the turn expected a
// hit and the replica reported reusing less than half of it.
func lostCache(tk *Ticket, out Outcome) bool {
	return out.OK && out.Known && !out.CachedUnknown && tk.match > 0 && out.CacheN*2 < tk.match && len(tk.blocks) > 0
}

// forget implements indexer.
func (p *prefixIndexer) forget(id uint32) { p.ix.Forget(id) }

// reset implements indexer.
func (p *prefixIndexer) reset() {
	ix, err := prefix.New(p.cfg)
	if err != nil {
		panic(err) // the same configuration was valid when the indexer was made
	}
	p.ix = ix
}

// PrefixStats returns the prefix index's size (nil without one), for
// /replicas and metrics.
func (t *Table) PrefixStats() *prefix.Stats {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.px == nil {
		return nil
	}
	st := t.px.ix.Stats()
	return &st
}
