// Package prefix is the router's approximate prefix index: what part of a
// request's prompt each replica probably still holds in its cache.
//
// A driver (the live router or the simulator) turns a prompt into chained
// block hashes once per request with a Hasher:
//
//	h.Reset(cfg.BlockChars)
//	for _, m := range messages {
//		h.WriteMessage(m.Role, m.Content) // or h.WriteString(prompt)
//	}
//	blocks := h.Blocks()
//
// then asks the Index how many leading blocks each candidate replica holds,
// and records where the request went:
//
//	ix, err := prefix.New(cfg)                 // errors name the setting
//	ix.Match(blocks, now, replicas, matched)   // matched[i]: leading blocks on replicas[i]
//	ix.Insert(picked, blocks, now)             // optimistic: it will cache them
//	ix.Evict(picked, blocks, from)             // it reported it did not hold blocks[from:]
//	ix.Forget(gone)                            // it left the replica set
//	ix.Expire(now)                             // on a timer: drop blocks past the TTL
//
// A LoRA adapter's requests use MatchSalted, InsertSalted and EvictSalted
// with Salt(adapter): the engines keep each adapter's cache apart (salt.go).
//
// The package is pure: no clock (time is an argument, in ns), no I/O, no
// goroutines, no map-order dependence in any result.
package prefix
