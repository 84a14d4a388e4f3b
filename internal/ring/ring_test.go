package ring

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// digits is a readable hash: label "v:name" is at position name+v·10 when
// name is a number, so positions can be read off the test.
func digits(b []byte) uint64 {
	v, name, _ := strings.Cut(string(b), ":")
	vi, _ := strconv.Atoi(v)
	ni, err := strconv.Atoi(name)
	if err != nil {
		panic(err)
	}
	return uint64(ni + vi*10)
}

func TestRingPositions(t *testing.T) {
	// Replicas "2", "4", "6" with 3 virtual nodes: 2, 12, 22 / 4, 14, 24 / 6, 16, 26.
	r := New([]string{"2", "4", "6"}, 3, digits)
	names := []string{"2", "4", "6"}
	for _, tc := range []struct {
		key  uint64
		want string
	}{
		{2, "2"},  // exactly on a node
		{11, "2"}, // next node clockwise is 12
		{23, "4"}, // 24
		{27, "2"}, // past the last node: wraps to 2
		{0, "2"},
		{15, "6"}, // 16
	} {
		if got := names[r.Home(tc.key)]; got != tc.want {
			t.Errorf("key %d → %s, want %s", tc.key, got, tc.want)
		}
	}
	// Adding replica "8" (8, 18, 28): 27 now maps to 8.
	r = New([]string{"2", "4", "6", "8"}, 3, digits)
	names = append(names, "8")
	if got := names[r.Home(27)]; got != "8" {
		t.Errorf("after adding 8, key 27 → %s, want 8", got)
	}
	if r.Len() != 12 || r.Replicas() != 4 {
		t.Errorf("Len=%d Replicas=%d, want 12, 4", r.Len(), r.Replicas())
	}
}

// TestLabelsDoNotCollide guards the groupcache flaw: with labels built as
// index+name, replica "1" vnode 11 and replica "11" vnode 1 would both be
// "111". Ours are "11:1" and "1:11".
func TestLabelsDoNotCollide(t *testing.T) {
	seen := map[string]bool{}
	New([]string{"1", "11"}, 12, func(b []byte) uint64 {
		if seen[string(b)] {
			t.Fatalf("label %q built twice", b)
		}
		seen[string(b)] = true
		return 0
	})
	if len(seen) != 24 {
		t.Fatalf("%d labels, want 24", len(seen))
	}
}

func TestStableAcrossInstances(t *testing.T) {
	names := []string{"llm-0", "llm-1", "llm-2"}
	a, b := New(names, 160, nil), New(names, 160, nil)
	for i := range 1000 {
		h := HashString(fmt.Sprintf("conversation-%d", i))
		if a.Home(h) != b.Home(h) {
			t.Fatalf("two rings disagree on key %d", i)
		}
	}
	// xxhash64 is unseeded: the same value in every process, every version.
	if got, want := HashString("llm-ring"), uint64(0x27e3219d173fd309); got != want {
		t.Errorf("HashString(llm-ring) = %#x, want %#x", got, want)
	}
}

func moved(before, after func(uint64) string, keys int) float64 {
	n := 0
	for i := range keys {
		h := HashString(fmt.Sprintf("conv-%d", i))
		if before(h) != after(h) {
			n++
		}
	}
	return float64(n) / float64(keys)
}

// TestMovementOnScaleUp: 3 → 4 replicas moves ~1/4 of keys on the ring and
// ~3/4 under mod-N.
func TestMovementOnScaleUp(t *testing.T) {
	three := []string{"llm-0", "llm-1", "llm-2"}
	four := append(three[:3:3], "llm-3")
	r3, r4 := New(three, 160, nil), New(four, 160, nil)
	ringMoved := moved(func(h uint64) string { return three[r3.Home(h)] }, func(h uint64) string { return four[r4.Home(h)] }, 10000)
	if ringMoved < 0.15 || ringMoved > 0.35 {
		t.Errorf("consistent: %.1f%% of keys moved, want 15–35%%", 100*ringMoved)
	}
	modMoved := moved(func(h uint64) string { return three[h%3] }, func(h uint64) string { return four[h%4] }, 10000)
	if modMoved < 0.65 || modMoved > 0.85 {
		t.Errorf("mod-n: %.1f%% of keys moved, want 65–85%%", 100*modMoved)
	}
	t.Logf("moved: consistent %.1f%%, mod-n %.1f%%", 100*ringMoved, 100*modMoved)
}

func TestShare(t *testing.T) {
	r := New([]string{"a", "b", "c"}, 160, nil)
	var total float64
	for i, s := range r.Share() {
		total += s
		if s < 0.2 || s > 0.47 {
			t.Errorf("replica %d share %.3f, far from 1/3", i, s)
		}
	}
	if total < 0.999 || total > 1.001 {
		t.Errorf("shares sum to %f", total)
	}
}

var sinkInt int

func BenchmarkHome(b *testing.B) {
	for _, n := range []int{3, 64, 1024} {
		b.Run(fmt.Sprintf("replicas=%d", n), func(b *testing.B) {
			names := make([]string, n)
			for i := range names {
				names[i] = fmt.Sprintf("llm-%d", i)
			}
			r := New(names, 160, nil)
			keys := make([]string, 1024)
			for i := range keys {
				keys[i] = fmt.Sprintf("conversation-%d", i)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				sinkInt = r.Home(HashString(keys[i&1023]))
			}
		})
	}
}
