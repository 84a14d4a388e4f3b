package model

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// bestReference is best as it was before the RAM cache's pass stopped at
// the count of candidates the prefix index allows (the scale session,
// round four): every entry is read.
func (s *Server) bestReference(r *request, lru int) (target, keep, from int) {
	target, from = lru, -1
	if sl := &s.slots[lru]; sl.indexed {
		keep = sl.seq.lcp(r.toks, r.blocks)
	}
	d := s.idx.depth(r.blocks)
	for pass := 0; pass < 2; pass++ {
		found := false
		for i := range s.slots {
			sl := &s.slots[i]
			if !sl.indexed || !candidate(&sl.seq, r.blocks, d) {
				continue
			}
			found = true
			l := d*blockSize + commonPrefix(sl.toks[d*blockSize:], r.toks[d*blockSize:])
			if l > keep && 10*l > len(r.toks) {
				target, keep = i, l
			}
		}
		keepBest, simBest := 0.0, float64(keep)/float64(len(r.toks))
		if n := len(s.slots[target].toks); s.slots[target].indexed && n > 0 {
			keepBest = float64(keep) / float64(n)
		}
		for i := len(s.cache) - 1; i >= 0; i-- {
			e := s.cache[i]
			if !candidate(&e.seq, r.blocks, d) {
				continue
			}
			found = true
			l := d*blockSize + commonPrefix(e.toks[d*blockSize:], r.toks[d*blockSize:])
			fKeep, fSim := float64(l)/float64(len(e.toks)), float64(l)/float64(len(r.toks))
			if fKeep < 0.25 {
				continue
			}
			if fKeep > keepBest && fSim > simBest {
				keepBest, simBest = fKeep, fSim
				keep, from = l, i
			}
		}
		if found || d == 0 {
			break
		}
		d = 0
	}
	if from >= 0 {
		target = lru
	}
	return target, keep, from
}

// TestBestEqualsReadingEveryEntry: conversations that share system prompts
// and grow turn by turn on a server of 2 slots whose RAM cache holds many
// of them; before every submission, best (which scans the RAM cache only
// for as many candidates as the index counts) and the reference (which
// reads every entry) choose the same slot, prefix and entry. The check
// fails if the count of candidates is too low by one (the scan stops
// early) — the test's own assertion below makes sure entries do win.
func TestBestEqualsReadingEveryEntry(t *testing.T) {
	cfg := DefaultConfig()
	cfg.NParallel, cfg.CtxSize = 2, 8192
	cfg.BytesPerToken = 1 << 8
	cfg.CacheRAMMiB = 4 // 16,384 tokens: a few dozen conversations
	r := mustNew(t, cfg)
	s := r.Server()
	rng := rand.New(rand.NewPCG(1, 2))
	systems := [][]Token{seqTokens(1, 300), seqTokens(2, 130), seqTokens(3, 64)}
	convs := make([][]Token, 40)
	for c := range convs {
		convs[c] = slices.Clone(systems[c%len(systems)])
	}
	now, loads, checked := time.Duration(0), 0, 0
	for step := 0; step < 600; step++ {
		c := rng.IntN(len(convs))
		convs[c] = append(convs[c], seqTokens(1000+step, 20+rng.IntN(150))...)
		if len(convs[c]) > 3000 {
			convs[c] = slices.Clone(systems[c%len(systems)])
		}
		toks := convs[c]
		if step%7 == 0 { // a prompt that matches a slot or entry only partly
			toks = slices.Clone(toks[:len(toks)*2/3])
		}
		rq := &request{toks: toks, blocks: chainHashes(nil, toks)}
		if lru := idleLRU(s); lru >= 0 {
			gt, gk, gf := s.best(rq, lru)
			wt, wk, wf := s.bestReference(rq, lru)
			if gt != wt || gk != wk || gf != wf {
				t.Fatalf("step %d: best = (slot %d, keep %d, entry %d), reading every entry = (%d, %d, %d)", step, gt, gk, gf, wt, wk, wf)
			}
			checked++
			if gf >= 0 {
				loads++
			}
		}
		mustSubmit(t, r, now, Request{Tokens: toks, NPredict: 8})
		run(t, r)
		now += time.Second
	}
	if checked < 500 || loads < 50 {
		t.Fatalf("checked %d picks, %d loads from the RAM cache: the test no longer exercises the cache", checked, loads)
	}
}

// idleLRU is the slot assign would start from: the least recently used
// idle one (-1: none).
func idleLRU(s *Server) int {
	lru := -1
	for i := range s.slots {
		if sl := &s.slots[i]; sl.state == slotIdle && (lru < 0 || sl.lastUsed < s.slots[lru].lastUsed) {
			lru = i
		}
	}
	return lru
}

// TestSavedEntriesKeepTheirContent: save hands a slot's buffers to the RAM
// cache entry and the slot takes the spare entry's, so the two must never
// share one: after every request, each entry's hashes are still those of
// its tokens, and the prefix index counts exactly the indexed slots' and
// the entries' hashes. Sharing a buffer (the slot overwriting the entry's
// tokens with its next prompt), removing the slot's hashes from the index
// when save took them as the entry's, or keeping them when it did not,
// fails it.
func TestSavedEntriesKeepTheirContent(t *testing.T) {
	cfg := DefaultConfig()
	cfg.NParallel, cfg.CtxSize = 2, 8192
	cfg.BytesPerToken = 1 << 8
	cfg.CacheRAMMiB = 2
	r := mustNew(t, cfg)
	s := r.Server()
	rng := rand.New(rand.NewPCG(3, 4))
	convs := make([][]Token, 30)
	for c := range convs {
		convs[c] = seqTokens(c%3, 100)
	}
	now := time.Duration(0)
	for step := 0; step < 400; step++ {
		c := rng.IntN(len(convs))
		convs[c] = append(convs[c], seqTokens(5000+step, 30+rng.IntN(200))...)
		toks, predict := convs[c], 8
		if step%5 == 0 {
			// A prefix of the conversation with one token to generate:
			// the slot then holds just that prefix, which an entry may
			// hold already (save refreshes the entry instead).
			toks, predict = convs[c][:len(convs[c])/2], 1
		}
		mustSubmit(t, r, now, Request{Tokens: toks, NPredict: predict})
		run(t, r)
		now += time.Second
		checkCacheIndex(t, s, step)
	}
	if st := s.Stats(); st.CacheSaves < 100 {
		t.Fatalf("%d saves: the test no longer exercises the RAM cache", st.CacheSaves)
	}
}

// TestCacheKeysRuleOutOnlyWhatIsPrefixCannotSay: for sequences that are
// prefixes and extensions of each other (and unrelated ones), at every
// length around a block's end, an entry's key lets save's scan skip it
// only where isPrefix says false: mayExtend and mayPrefix are never false
// where isPrefix(q, e) or isPrefix(e, q) holds.
func TestCacheKeysRuleOutOnlyWhatIsPrefixCannotSay(t *testing.T) {
	base := seqTokens(9, 400)
	other := append(slices.Clone(base[:130]), seqTokens(10, 200)...)
	var seqs []seq
	for _, toks := range [][]Token{base, other} {
		for _, n := range []int{0, 1, 63, 64, 65, 127, 128, 129, 200, 256, 330, 400} {
			if n <= len(toks) {
				tk := slices.Clone(toks[:n])
				seqs = append(seqs, seq{toks: tk, blocks: chainHashes(nil, tk)})
			}
		}
	}
	skipped := 0
	for i := range seqs {
		for j := range seqs {
			q, e := &seqs[i], &seqs[j]
			k := keyOf(e)
			if isPrefix(q, e) && !k.mayExtend(q) {
				t.Errorf("q of %d tokens is a prefix of the entry of %d, but mayExtend is false", len(q.toks), len(e.toks))
			}
			if isPrefix(e, q) && !k.mayPrefix(q) {
				t.Errorf("the entry of %d tokens is a prefix of q of %d, but mayPrefix is false", len(e.toks), len(q.toks))
			}
			if !k.mayExtend(q) || !k.mayPrefix(q) {
				skipped++
			}
		}
	}
	if skipped == 0 {
		t.Fatal("the keys never rule an entry out")
	}
}

// checkCacheIndex fails unless each RAM cache entry's hashes are those of
// its tokens, its key says what it holds, and the prefix index counts
// exactly the indexed slots' and the entries' hashes.
func checkCacheIndex(t *testing.T, s *Server, step int) {
	t.Helper()
	want := map[uint64]int32{}
	for i := range s.slots {
		if sl := &s.slots[i]; sl.indexed {
			for _, h := range sl.blocks {
				want[h]++
			}
		}
	}
	if len(s.keys) != len(s.cache) {
		t.Fatalf("step %d: %d keys for %d entries", step, len(s.keys), len(s.cache))
	}
	for k, e := range s.cache {
		if !slices.Equal(e.blocks, chainHashes(nil, e.toks)) {
			t.Fatalf("step %d: entry %d's hashes are not those of its tokens", step, k)
		}
		if s.keys[k] != keyOf(&e.seq) {
			t.Fatalf("step %d: entry %d's key %+v, its content says %+v", step, k, s.keys[k], keyOf(&e.seq))
		}
		for _, h := range e.blocks {
			want[h]++
		}
	}
	if s.idx.count.len() != len(want) {
		t.Fatalf("step %d: the index holds %d hashes, the slots and entries %d", step, s.idx.count.len(), len(want))
	}
	for h, n := range want {
		if got := s.idx.count.get(h); got != n {
			t.Fatalf("step %d: hash %x counted %d times, held %d times", step, h, got, n)
		}
	}
}

// TestSaveRefreshKeepsTheIndex: a slot holding a prefix of an entry (too
// short a share of it to be loaded) is not saved again when it is
// replaced: the entry is refreshed, and the slot's hashes, which no entry
// took, leave the index.
func TestSaveRefreshKeepsTheIndex(t *testing.T) {
	cfg := DefaultConfig()
	cfg.NParallel, cfg.CtxSize = 1, 4096
	cfg.BytesPerToken = 1 << 8
	cfg.CacheRAMMiB = 2
	r := mustNew(t, cfg)
	a := seqTokens(21, 1000)
	now := time.Duration(0)
	for step, toks := range [][]Token{a, seqTokens(22, 100), a[:200], seqTokens(23, 100)} {
		mustSubmit(t, r, now, Request{Tokens: toks, NPredict: 1})
		run(t, r)
		now += time.Second
		checkCacheIndex(t, r.Server(), step)
	}
	s := r.Server()
	if st := s.Stats(); st.CacheSaves != 2 || len(s.cache) != 2 || len(s.cache[1].toks) != 1000 {
		t.Fatalf("saves %d, entries %d: want A saved, then B, and A refreshed (the newest) instead of a[:200] saved", st.CacheSaves, len(s.cache))
	}
}
