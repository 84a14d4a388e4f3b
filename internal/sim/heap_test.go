package sim

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestQueueOrder: events come out by time, and events at the same time in
// the order they were pushed, whatever the order of pushes.
func TestQueueOrder(t *testing.T) {
	var q queue
	pushes := []struct {
		at  time.Duration
		who int32
	}{
		{5, 0}, // later time, pushed first
		{1, 1},
		{3, 2},
		{1, 3}, // ties with who=1: after it (pushed later)
		{0, 4}, // earliest
		{3, 5}, // ties with who=2
		{1, 6}, // third at time 1
	}
	for _, p := range pushes {
		q.push(p.at, evSend, p.who, 0)
	}
	var got []int32
	for q.len() > 0 {
		got = append(got, q.pop().who)
	}
	want := []int32{4, 1, 3, 6, 2, 5, 0}
	if !slices.Equal(got, want) {
		t.Fatalf("pop order %v, want %v", got, want)
	}
}

// TestQueueMatchesSort: a heap that interleaves pushes and pops returns the
// same sequence as a stable sort by time of what is pending (a property
// test over random operations, seeded).
func TestQueueMatchesSort(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var q queue
	type item struct {
		at  time.Duration
		seq uint64
	}
	var pending []item
	var now time.Duration
	for step := range 20_000 {
		if rng.IntN(3) > 0 || len(pending) == 0 {
			// Times never before the last popped event, as in the simulator;
			// few distinct values so that ties are common.
			at := now + time.Duration(rng.IntN(4))
			seq := q.push(at, evSend, int32(step), 0)
			pending = append(pending, item{at, seq})
			continue
		}
		e := q.pop()
		i := 0
		for j := range pending {
			if pending[j].at < pending[i].at || (pending[j].at == pending[i].at && pending[j].seq < pending[i].seq) {
				i = j
			}
		}
		if e.at != pending[i].at || e.seq != pending[i].seq {
			t.Fatalf("step %d: popped (%v, %d), want (%v, %d)", step, e.at, e.seq, pending[i].at, pending[i].seq)
		}
		if e.at < now {
			t.Fatalf("step %d: time went back from %v to %v", step, now, e.at)
		}
		now = e.at
		pending = slices.Delete(pending, i, i+1)
	}
}
