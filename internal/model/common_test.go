package model

import (
	"math/rand/v2"
	"testing"
)

// refCommonPrefix is commonPrefix as it was before issue 21's fifth
// session (one token at a time): the definition.
func refCommonPrefix(a, b []Token) int {
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// TestCommonPrefixIsTheTokenLoop: commonPrefix (sixteen tokens at a time
// while they agree) says what the token-by-token loop says, for every
// length around the chunk's and every place of the first difference.
func TestCommonPrefixIsTheTokenLoop(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 9))
	for la := range 70 {
		for range 40 {
			a := make([]Token, la)
			for i := range a {
				a[i] = Token(rng.IntN(3))
			}
			b := append([]Token(nil), a[:rng.IntN(la+1)]...)
			for range rng.IntN(40) {
				b = append(b, Token(rng.IntN(3)))
			}
			if len(b) > 0 && rng.IntN(2) == 0 {
				b[rng.IntN(len(b))] = Token(rng.IntN(3))
			}
			if got, want := commonPrefix(a, b), refCommonPrefix(a, b); got != want {
				t.Fatalf("commonPrefix(%v, %v) = %d, want %d", a, b, got, want)
			}
		}
	}
}
