package model

import (
	"math/rand/v2"
	"testing"
)

// TestCountsEqualsAMap: random increments, decrements (some of absent
// keys) and reads, on few keys (long runs, with keys that collide on
// their home slot) and many (growth), agree with a Go map.
func TestCountsEqualsAMap(t *testing.T) {
	for _, keys := range []int{7, 40, 5000} {
		r := rand.New(rand.NewPCG(uint64(keys), 1))
		var c counts
		ref := map[uint64]int32{}
		key := func() uint64 {
			k := uint64(r.IntN(keys))
			if k%3 == 0 {
				return k << 58 // the same home slot in a small table
			}
			return k * 0x2545F4914F6CDD1D
		}
		for step := range 200000 {
			k := key()
			switch op := r.IntN(10); {
			case op < 5:
				c.inc(k)
				ref[k]++
			case op < 9:
				c.dec(k)
				if ref[k] > 1 {
					ref[k]--
				} else {
					delete(ref, k)
				}
			}
			if got, want := c.get(k), ref[k]; got != want || c.len() != len(ref) {
				t.Fatalf("%d keys, step %d: key %#x count %d, map %d; %d keys held, map %d", keys, step, k, got, want, c.len(), len(ref))
			}
		}
		for k, want := range ref {
			if got := c.get(k); got != want {
				t.Fatalf("%d keys, at the end: key %#x count %d, map %d", keys, k, got, want)
			}
		}
	}
}
