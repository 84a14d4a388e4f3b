package admission

import "testing"

// TestExpectedWaitIsFair: three requests admitted at once, a second apart,
// set the pace (1 s); then flooder A queues ten. A light flow B's request
// goes after at most one of A's (fair queuing): it expects (1 + 1) × 1 s
// and fits a 3 s deadline; A's next expects (10 + 1 + 1) × 1 s and is shed at
// once (its ten, B's one, itself: 12 s, the retry hint).
func TestExpectedWaitIsFair(t *testing.T) {
	c := New(on())
	for i := int64(0); i < 3; i++ {
		if v, _, _ := c.Offer(Item{ID: uint64(i + 1), Flow: "A"}, i*sec, false); v.Outcome != Admitted {
			t.Fatalf("offer %d: %+v, want admitted", i+1, v)
		}
	}
	for i := 0; i < 10; i++ {
		mustQueue(t, c, Item{ID: uint64(10 + i), Flow: "A", Arrived: 3 * sec}, 3*sec)
	}
	mustQueue(t, c, Item{ID: 30, Flow: "B", Arrived: 3 * sec, Deadline: 6 * sec}, 3*sec)
	v, _, _ := c.Offer(Item{ID: 31, Flow: "A", Arrived: 3 * sec, Deadline: 6 * sec}, 3*sec, true)
	if v.Outcome != Shed || v.Reason != Deadline || v.RetryAfterNs != 12*sec {
		t.Fatalf("flooder's request: %+v, want shed (deadline) with a 12 s hint", v)
	}
	if it, _ := c.Dispatch(4*sec, false); it.ID != 10 {
		t.Fatalf("first dispatch %d, want A's oldest (10)", it.ID)
	}
	if it, _ := c.Dispatch(4*sec, false); it.ID != 30 {
		t.Fatalf("second dispatch %d, want B's (30)", it.ID)
	}
}

// TestServiceFloor: with a 300 ms floor, a request due at 1 s with no
// prediction of its own expires at 700 ms + 1 ns, not after its deadline;
// one offered at 800 ms with that deadline is shed at once.
func TestServiceFloor(t *testing.T) {
	s := on()
	s.ServiceFloorNs = 300e6
	c := New(s)
	mustQueue(t, c, Item{ID: 1, Deadline: sec}, 0)
	if at := c.NextExpiry(); at != 700e6+1 {
		t.Fatalf("next expiry %d, want 700 ms + 1 ns", at)
	}
	var shed []uint64
	c.Expire(700e6+1, func(it Item, r Reason) { shed = append(shed, it.ID) })
	if len(shed) != 1 || c.Len() != 0 {
		t.Fatalf("shed %v, %d left, want [1] and none", shed, c.Len())
	}
	if v, _, _ := c.Offer(Item{ID: 2, Arrived: 800e6, Deadline: sec}, 800e6, false); v.Outcome != Shed || v.Reason != Deadline {
		t.Fatalf("%+v, want shed (deadline)", v)
	}
}
