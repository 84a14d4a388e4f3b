// Package ring is a consistent-hash ring with virtual nodes.
//
// Replica i (of names sorted by the caller) owns virtual nodes labelled
// "v:name" for v in [0, vnodes): labels cannot collide, since a name cannot
// contain the separator's position ambiguity ("1:1a" ≠ "11:a"). The hash is
// xxhash64 with no seed, so every process with the same replicas builds the
// same ring and maps every key identically — two router instances agree, and
// so do restarts. A Ring is immutable: membership changes build a new one.
//
//	r := ring.New([]string{"llm-0", "llm-1", "llm-2"}, 160, nil)
//	home := r.Replica(r.Search(ring.HashString("conversation-7")))
package ring

import (
	"slices"
	"strconv"

	"github.com/cespare/xxhash/v2"
)

// Hash maps a byte string to a ring position.
type Hash func(data []byte) uint64

// HashString is the ring's hash of a key: xxhash64, unseeded. It does not
// allocate.
func HashString(s string) uint64 { return xxhash.Sum64String(s) }

// Ring is an immutable hash ring. The zero value is an empty ring.
type Ring struct {
	points   []uint64 // sorted virtual-node positions
	owners   []int32  // owners[i] is the replica index of points[i]
	replicas int
}

// New builds a ring for replicas 0..len(names)-1 with vnodes virtual nodes
// each. hash nil means xxhash64. Colliding positions are ordered by replica
// index, so the result never depends on input order beyond names itself.
func New(names []string, vnodes int, hash Hash) *Ring {
	if hash == nil {
		hash = xxhash.Sum64
	}
	type point struct {
		pos   uint64
		owner int32
	}
	pts := make([]point, 0, len(names)*vnodes)
	buf := make([]byte, 0, 64)
	for i, name := range names {
		for v := range vnodes {
			buf = strconv.AppendInt(buf[:0], int64(v), 10)
			buf = append(buf, ':')
			buf = append(buf, name...)
			pts = append(pts, point{hash(buf), int32(i)})
		}
	}
	slices.SortFunc(pts, func(a, b point) int {
		if a.pos != b.pos {
			if a.pos < b.pos {
				return -1
			}
			return 1
		}
		return int(a.owner - b.owner)
	})
	r := &Ring{points: make([]uint64, len(pts)), owners: make([]int32, len(pts)), replicas: len(names)}
	for i, p := range pts {
		r.points[i], r.owners[i] = p.pos, p.owner
	}
	return r
}

// Len is the number of virtual nodes.
func (r *Ring) Len() int { return len(r.points) }

// Replicas is the number of replicas on the ring.
func (r *Ring) Replicas() int { return r.replicas }

// Search returns the index of the first virtual node at or after h,
// wrapping around. The ring must not be empty.
func (r *Ring) Search(h uint64) int {
	i, _ := slices.BinarySearch(r.points, h)
	if i == len(r.points) {
		i = 0
	}
	return i
}

// Replica returns the replica index owning virtual node i (taken modulo Len,
// so callers may walk past the end).
func (r *Ring) Replica(i int) int { return int(r.owners[i%len(r.owners)]) }

// Home returns the replica index owning key hash h.
func (r *Ring) Home(h uint64) int { return r.Replica(r.Search(h)) }

// Share returns each replica's share of the hash space (the fraction of keys
// it is home for), indexed like names.
func (r *Ring) Share() []float64 {
	share := make([]float64, r.replicas)
	n := len(r.points)
	for i := range n {
		// Virtual node i owns (points[i-1], points[i]].
		prev := r.points[(i+n-1)%n]
		span := r.points[i] - prev // wraps correctly in uint64 arithmetic
		if n == 1 {
			span = ^uint64(0)
		}
		share[r.owners[i]] += float64(span) / (1 << 64)
	}
	return share
}
