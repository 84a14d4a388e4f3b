package admission

import (
	"math"
	"testing"
)

// TestCachedShare: the first answer sets the share, later ones move it by
// a tenth; answers without counts are skipped; New rounds and keeps one.
func TestCachedShare(t *testing.T) {
	var c CachedShare
	if c.New(1000) != 1000 {
		t.Fatalf("before any answer: New(1000) = %d, want 1000", c.New(1000))
	}
	c.Learn(0, 0)
	c.Learn(-1, 5)
	if c.Share() != 0 || c.seen {
		t.Fatalf("skipped answers changed the share: %v", c.Share())
	}
	c.Learn(600, 400) // 0.6
	c.Learn(0, 1000)  // 0.6 + 0.1 × (0 − 0.6) = 0.54
	if math.Abs(c.Share()-0.54) > 1e-12 {
		t.Fatalf("share %v, want 0.54", c.Share())
	}
	if got := c.New(1000); got != 460 {
		t.Fatalf("New(1000) = %d, want 460", got)
	}
	c.Learn(1000, 0) // 0.54 + 0.1 × 0.46 = 0.586
	if got := c.New(1); got != 1 {
		t.Fatalf("New(1) = %d, want at least 1", got)
	}
}
