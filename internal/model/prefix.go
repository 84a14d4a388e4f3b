package model

import "math/bits"

// Prefix matching. A replica must find, among its idle slots and its RAM
// cache entries, the one sharing the longest common prefix (LCP) with a new
// prompt. Comparing token by token with every entry would cost
// O(entries × prompt); instead every token sequence carries the chain
// hashes of its full blocks of blockSize tokens (hash k covers tokens
// [0, (k+1)·blockSize)), and the server keeps a count of how many indexed
// sequences hold each chain hash. "Some sequence shares the first k blocks"
// is monotone in k, so a binary search over the prompt's chain hashes finds
// the deepest shared block d with O(log blocks) map lookups; only the
// sequences whose d-th hash matches are then compared token by token, over
// at most one block.

// blockSize is the number of tokens per hashed block.
const blockSize = 64

// chainHashes appends to dst the chain hashes of the full blocks of toks
// from block len(dst) on (dst holds the hashes of earlier blocks).
func chainHashes(dst []uint64, toks []Token) []uint64 {
	var h uint64
	if len(dst) > 0 {
		h = dst[len(dst)-1]
	}
	for b := len(dst); (b+1)*blockSize <= len(toks); b++ {
		h = hashBlock(h, toks[b*blockSize:(b+1)*blockSize])
		dst = append(dst, h)
	}
	return dst
}

func hashBlock(h uint64, blk []Token) uint64 {
	h ^= 0x243F6A8885A308D3
	i := 0
	for ; i+3 < len(blk); i += 4 {
		a := uint64(uint32(blk[i])) | uint64(uint32(blk[i+1]))<<32
		b := uint64(uint32(blk[i+2])) | uint64(uint32(blk[i+3]))<<32
		h = (h^a)*0x9E3779B97F4A7C15 + bits.RotateLeft64(b*0xC2B2AE3D27D4EB4F, 31)
		h ^= h >> 29
	}
	for ; i < len(blk); i++ {
		h = (h ^ uint64(uint32(blk[i]))) * 0x9E3779B97F4A7C15
		h ^= h >> 29
	}
	return splitmix64(h)
}

// PromptKey identifies a prompt for answer generation: a hash of all its
// tokens.
func PromptKey(toks []Token) uint64 {
	return promptKey(toks, nil)
}

// promptKey hashes toks, reusing the chain hashes of its full blocks.
func promptKey(toks []Token, blocks []uint64) uint64 {
	var h uint64
	if len(blocks) > 0 {
		h = blocks[len(blocks)-1]
	}
	rest := toks[len(blocks)*blockSize:]
	for len(rest) >= blockSize {
		h = hashBlock(h, rest[:blockSize])
		rest = rest[blockSize:]
	}
	return splitmix64(hashBlock(h, rest) ^ uint64(len(toks)))
}

// commonPrefix returns the length of the common prefix of a and b.
func commonPrefix(a, b []Token) int {
	n := min(len(a), len(b))
	b = b[:n]
	for i := 0; i < n; i++ {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// seq is a token sequence held by an idle slot or a RAM cache entry, with
// its chain hashes.
type seq struct {
	toks   []Token
	blocks []uint64
}

// lcp returns the common prefix length of s and (toks, blocks), using the
// block hashes to skip equal blocks.
func (s *seq) lcp(toks []Token, blocks []uint64) int {
	nb := min(len(s.blocks), len(blocks))
	d := 0
	for d < nb && s.blocks[d] == blocks[d] {
		d++
	}
	off := d * blockSize
	return off + commonPrefix(s.toks[off:], toks[off:])
}

// isPrefix reports whether a's tokens are a prefix of b's, comparing one
// block hash and at most one block of tokens.
func isPrefix(a, b *seq) bool {
	if len(a.toks) > len(b.toks) {
		return false
	}
	nb := len(a.blocks)
	if nb > 0 && b.blocks[nb-1] != a.blocks[nb-1] {
		return false
	}
	off := nb * blockSize
	return commonPrefix(a.toks[off:], b.toks[off:len(a.toks)]) == len(a.toks)-off
}

// prefixIndex counts, for each chain hash, the indexed sequences holding it.
type prefixIndex struct {
	count counts
}

func (x *prefixIndex) add(blocks []uint64) {
	for _, h := range blocks {
		x.count.inc(h)
	}
}

func (x *prefixIndex) remove(blocks []uint64) {
	for _, h := range blocks {
		x.count.dec(h)
	}
}

// depth returns the largest d such that some indexed sequence holds
// blocks[d-1] (0 if none): the number of leading full blocks some sequence
// shares with the prompt.
func (x *prefixIndex) depth(blocks []uint64) int {
	lo, hi := 0, len(blocks) // invariant: depth in [lo, hi]
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if x.count.get(blocks[mid-1]) > 0 {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
}
