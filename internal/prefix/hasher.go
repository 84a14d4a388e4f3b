package prefix

import (
	"encoding/binary"

	"github.com/cespare/xxhash/v2"
)

// Seed is h₋₁, the hash the first block is chained to. It is a constant, so
// every router instance and the simulator compute the same blocks for the
// same text.
const Seed uint64 = 0x6c6c6d2d72696e67 // "llm-ring"

// The canonical chat rendering (WriteMessage): ChatML, as Qwen2.5's template
// renders each message, so in the simulator the hashed text is exactly the
// text the replica renders (without the default system prompt the template
// may add in front and the "<|im_start|>assistant\n" generation prompt at the
// end, which the router cannot know or which differ per turn).
const (
	MessageStart = "<|im_start|>" // then the role, then '\n', then the content
	MessageEnd   = "<|im_end|>\n" // after the content
)

// Hasher turns a prompt's text into chained 64-bit block hashes, streaming.
//
// Characters are bytes of the UTF-8 text (see docs/notes/routing-seam.md): every full block of
// BlockChars bytes yields
//
//	h_i = xxhash64(le64(h_{i-1}) ‖ block_i),   h_{-1} = Seed
//
// so equal hashes mean equal prefixes (up to 64-bit collisions). A trailing
// partial block is not hashed, as vLLM and llm-d hash full blocks only.
//
// The text may be written in any pieces: any split of the same bytes (even
// inside a multi-byte character) gives the same blocks. A Hasher keeps its
// state between calls, so a conversation can be continued message by message
// without hashing its history again. Its buffers are reused across Reset, so
// once they have grown, hashing allocates nothing.
//
// The zero Hasher must be Reset before use.
type Hasher struct {
	blockChars int
	buf        []byte // le64(h_{i-1}) then up to blockChars pending bytes
	n          int    // pending bytes in buf[8:]
	chars      int
	blocks     []uint64
}

// NewHasher returns a Hasher Reset to blockChars.
func NewHasher(blockChars int) *Hasher {
	h := new(Hasher)
	h.Reset(blockChars)
	return h
}

// Reset starts a new prompt cut in blocks of blockChars bytes, keeping the
// buffers. It panics if blockChars < 1: configuration validation (New)
// rejects such a size before any Hasher sees it.
func (h *Hasher) Reset(blockChars int) {
	if blockChars < 1 {
		panic("prefix: Hasher.Reset: blockChars must be >= 1")
	}
	h.blockChars = blockChars
	if cap(h.buf) < 8+blockChars {
		h.buf = make([]byte, 8+blockChars)
	}
	h.buf = h.buf[:8+blockChars]
	binary.LittleEndian.PutUint64(h.buf, Seed)
	h.n = 0
	h.chars = 0
	h.blocks = h.blocks[:0]
}

// WriteString appends s to the prompt.
func (h *Hasher) WriteString(s string) {
	h.chars += len(s)
	for len(s) > 0 {
		k := copy(h.buf[8+h.n:], s)
		h.n += k
		s = s[k:]
		if h.n == h.blockChars {
			h.flush()
		}
	}
}

// writeByte appends one byte.
func (h *Hasher) writeByte(c byte) {
	h.chars++
	h.buf[8+h.n] = c
	h.n++
	if h.n == h.blockChars {
		h.flush()
	}
}

// flush hashes the full pending block and chains it.
func (h *Hasher) flush() {
	x := xxhash.Sum64(h.buf)
	h.blocks = append(h.blocks, x)
	binary.LittleEndian.PutUint64(h.buf, x)
	h.n = 0
}

// WriteMessage appends one chat message in the canonical rendering
//
//	<|im_start|>{role}\n{content}<|im_end|>\n
//
// A conversation is its messages written in order, so the rendering of turn
// k+1 starts with the rendering of turn k (prefix-stable): a Hasher kept per
// conversation only ever appends. Role and content are delimited, so moving
// bytes between them changes the text.
func (h *Hasher) WriteMessage(role, content string) {
	h.WriteString(MessageStart)
	h.WriteString(role)
	h.writeByte('\n')
	h.WriteString(content)
	h.WriteString(MessageEnd)
}

// Blocks returns the hashes of the full blocks written so far. The slice
// aliases the Hasher's buffer: it is valid until the next Reset or CopyFrom,
// and later writes may append to it.
func (h *Hasher) Blocks() []uint64 { return h.blocks }

// Chars returns the number of characters (bytes) written since Reset.
func (h *Hasher) Chars() int { return h.chars }

// BlockChars returns the block size of the current prompt.
func (h *Hasher) BlockChars() int { return h.blockChars }

// CopyFrom makes h a copy of src (same text so far, same block size), reusing
// h's buffers: to branch a conversation, for example to hash a request's
// prompt from a per-conversation Hasher without changing it. src is not
// modified.
func (h *Hasher) CopyFrom(src *Hasher) {
	h.blockChars = src.blockChars
	h.buf = append(h.buf[:0], src.buf...)
	h.n = src.n
	h.chars = src.chars
	h.blocks = append(h.blocks[:0], src.blocks...)
}
