package admission

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/llm-ring/llm-ring/internal/policy"
)

const sec = int64(1e9)

func on() Settings {
	s := Defaults()
	s.Enabled = true
	return s
}

// drain dispatches everything (pool not saturated) and returns the ids.
func drain(c *Controller, now int64) []uint64 {
	var ids []uint64
	for {
		it, ok := c.Dispatch(now, false)
		if !ok {
			return ids
		}
		ids = append(ids, it.ID)
		now += sec
	}
}

func mustQueue(t *testing.T, c *Controller, it Item, now int64) {
	t.Helper()
	v, _, disp := c.Offer(it, now, true)
	if v.Outcome != Queued || disp {
		t.Fatalf("offer %d: got %+v displaced=%v, want queued", it.ID, v, disp)
	}
}

func eq(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestDisabledAdmitsEverything(t *testing.T) {
	c := New(Defaults())
	for i := 0; i < 1000; i++ {
		if v, _, _ := c.Offer(Item{ID: uint64(i)}, 0, true); v.Outcome != Admitted {
			t.Fatalf("disabled controller answered %+v", v)
		}
	}
	if c.Len() != 0 {
		t.Fatal("disabled controller queued")
	}
}

func TestAdmitWhenIdleQueueWhenSaturated(t *testing.T) {
	c := New(on())
	if v, _, _ := c.Offer(Item{ID: 1}, 0, false); v.Outcome != Admitted {
		t.Fatalf("idle pool: %+v", v)
	}
	mustQueue(t, c, Item{ID: 2}, 0)
	// Not saturated, but someone waits: a newcomer queues behind it.
	if v, _, _ := c.Offer(Item{ID: 3}, 0, false); v.Outcome != Queued {
		t.Fatalf("newcomer jumped the queue: %+v", v)
	}
	if _, ok := c.Dispatch(sec, true); ok {
		t.Fatal("dispatched while saturated")
	}
	if got := drain(c, sec); !eq(got, []uint64{2, 3}) {
		t.Fatalf("dispatch order %v", got)
	}
}

func TestHigherBandsFirst(t *testing.T) {
	c := New(on())
	mustQueue(t, c, Item{ID: 1, Priority: 0}, 0)
	mustQueue(t, c, Item{ID: 2, Priority: 10}, 1)
	mustQueue(t, c, Item{ID: 3, Priority: 0}, 2)
	mustQueue(t, c, Item{ID: 4, Priority: -5}, 3)
	mustQueue(t, c, Item{ID: 5, Priority: 10}, 4)
	if got := drain(c, 10); !eq(got, []uint64{2, 5, 1, 3, 4}) {
		t.Fatalf("dispatch order %v, want [2 5 1 3 4]", got)
	}
}

// Round robin between flows of one band, hand-computed: A has four
// requests queued before B's two.
func TestRoundRobinBetweenFlows(t *testing.T) {
	c := New(on())
	for i, f := range []string{"a", "a", "a", "a", "b", "b"} {
		mustQueue(t, c, Item{ID: uint64(i + 1), Flow: f}, int64(i))
	}
	if got := drain(c, 10); !eq(got, []uint64{1, 5, 2, 6, 3, 4}) {
		t.Fatalf("dispatch order %v, want [1 5 2 6 3 4]", got)
	}
}

func TestWeightedFlowsShare(t *testing.T) {
	s := on()
	s.QueueCapacity = 1000
	s.FlowWeights = map[string]float64{"gold": 3}
	c := New(s)
	for i := 0; i < 400; i++ {
		f := "gold"
		if i%2 == 1 {
			f = "free"
		}
		mustQueue(t, c, Item{ID: uint64(i), Flow: f}, int64(i))
	}
	gold := 0
	for i := 0; i < 200; i++ {
		it, _ := c.Dispatch(int64(1000+i), false)
		if it.Flow == "gold" {
			gold++
		}
	}
	if gold != 150 {
		t.Fatalf("gold got %d of 200 dispatches, want 150 (weight 3:1)", gold)
	}
}

func TestEDFWithinFlow(t *testing.T) {
	s := on()
	s.Order = OrderEDF
	c := New(s)
	mustQueue(t, c, Item{ID: 1, Arrived: 0, Deadline: 9 * sec}, 0)
	mustQueue(t, c, Item{ID: 2, Arrived: 0, Deadline: 3 * sec}, 0)
	mustQueue(t, c, Item{ID: 3, Arrived: 0}, 0) // due at MaxWait = 30 s
	mustQueue(t, c, Item{ID: 4, Arrived: 0, Deadline: 5 * sec}, 0)
	if got := drain(c, 0); !eq(got, []uint64{2, 4, 1, 3}) {
		t.Fatalf("EDF order %v, want [2 4 1 3]", got)
	}
}

func TestMinShareBoundsStarvation(t *testing.T) {
	s := on()
	s.QueueCapacity = 10000
	s.MinShare = map[int]float64{0: 0.1}
	c := New(s)
	id := uint64(0)
	offer := func(p int) {
		id++
		mustQueue(t, c, Item{ID: id, Priority: p}, 0)
	}
	for i := 0; i < 500; i++ {
		offer(1)
		offer(0)
	}
	low := 0
	for i := 0; i < 200; i++ {
		it, _ := c.Dispatch(int64(i), false)
		if it.Priority == 0 {
			low++
		}
	}
	if low != 20 {
		t.Fatalf("low band got %d of 200 dispatches, want 20 (min share 0.1)", low)
	}
	// Without a share, strict priority: the low band waits.
	c = New(on())
	for i := 0; i < 10; i++ {
		mustQueue(t, c, Item{ID: uint64(2 * i), Priority: 1}, 0)
		mustQueue(t, c, Item{ID: uint64(2*i + 1), Priority: 0}, 0)
	}
	for i := 0; i < 10; i++ {
		if it, _ := c.Dispatch(int64(i), false); it.Priority != 1 {
			t.Fatalf("dispatch %d went to band %d before the higher band emptied", i, it.Priority)
		}
	}
}

func TestFullQueueDisplacesLowerBandNewestFirst(t *testing.T) {
	s := on()
	s.QueueCapacity = 2
	c := New(s)
	mustQueue(t, c, Item{ID: 1, Priority: 0}, 0)
	mustQueue(t, c, Item{ID: 2, Priority: 0}, 1)
	v, out, ok := c.Offer(Item{ID: 3, Priority: 5}, 2, true)
	if v.Outcome != Queued || !ok || out.ID != 2 {
		t.Fatalf("high request: %+v displaced=%v %d, want queued displacing 2", v, ok, out.ID)
	}
	if v, _, ok := c.Offer(Item{ID: 4, Priority: 0}, 3, true); v.Outcome != Shed || v.Reason != QueueFull || ok {
		t.Fatalf("low request into a full queue: %+v", v)
	}
	if v, _, ok := c.Offer(Item{ID: 5, Priority: 5}, 3, true); v.Outcome != Queued || !ok {
		t.Fatalf("second high request: %+v", v)
	}
	if c.Waiting(1) || !c.Waiting(3) || !c.Waiting(5) {
		t.Fatal("wrong requests waiting")
	}
}

func TestFullQueueShedsTheHopelessFirst(t *testing.T) {
	s := on()
	s.QueueCapacity = 2
	c := New(s)
	mustQueue(t, c, Item{ID: 1, Priority: 9}, 0)
	mustQueue(t, c, Item{ID: 2, Priority: 9, Deadline: 10 * sec, Service: sec}, 0)
	// At 9.5 s request 2 can no longer make its deadline: it goes, not the newcomer.
	v, out, ok := c.Offer(Item{ID: 3, Priority: 0}, 9*sec+sec/2, true)
	if v.Outcome != Queued || !ok || out.ID != 2 {
		t.Fatalf("%+v displaced=%v %d, want request 2 displaced", v, ok, out.ID)
	}
}

func TestSLOShedAtOnce(t *testing.T) {
	c := New(on())
	// Hopeless even with no wait.
	if v, _, _ := c.Offer(Item{ID: 1, Arrived: 0, Deadline: sec, Service: 2 * sec}, 0, false); v.Reason != Deadline {
		t.Fatalf("%+v, want shed for deadline", v)
	}
	// Teach it one dispatch a second, then three wait: a fourth due in 2 s
	// would wait about 4 s.
	for i := 0; i < 3; i++ {
		mustQueue(t, c, Item{ID: uint64(10 + i)}, 0)
	}
	for i := 0; i < 3; i++ {
		c.Dispatch(int64(i)*sec, false)
	}
	for i := 0; i < 3; i++ {
		mustQueue(t, c, Item{ID: uint64(20 + i)}, 3*sec)
	}
	v, _, _ := c.Offer(Item{ID: 30, Arrived: 3 * sec, Deadline: 5 * sec, Service: sec / 10}, 3*sec, true)
	if v.Outcome != Shed || v.Reason != Deadline || v.RetryAfterNs != 4*sec {
		t.Fatalf("%+v, want shed (deadline) with a 4 s retry hint", v)
	}
	v, _, _ = c.Offer(Item{ID: 31, Arrived: 3 * sec, Deadline: 8 * sec, Service: sec / 10}, 3*sec, true)
	if v.Outcome != Queued {
		t.Fatalf("%+v, want queued (4 s wait + 0.1 s fits in 5 s)", v)
	}
}

func TestExpire(t *testing.T) {
	c := New(on())
	mustQueue(t, c, Item{ID: 1, Arrived: 0}, 0)
	mustQueue(t, c, Item{ID: 2, Arrived: 0, Deadline: 5 * sec, Service: sec}, 0)
	mustQueue(t, c, Item{ID: 3, Arrived: sec}, sec)
	if at := c.NextExpiry(); at != 4*sec+1 {
		t.Fatalf("next expiry %d", at)
	}
	var got []string
	rec := func(it Item, r Reason) { got = append(got, r.String()) }
	if n := c.Expire(4*sec, rec); n != 0 {
		t.Fatalf("expired %d at 4 s", n)
	}
	c.Expire(4*sec+1, rec)
	c.Expire(30*sec, rec)
	if strings.Join(got, ",") != "deadline,timeout" || !c.Waiting(3) {
		t.Fatalf("expired %v", got)
	}
	c.Expire(31*sec, rec)
	if c.Len() != 0 {
		t.Fatalf("%d still waiting", c.Len())
	}
}

func TestBudgets(t *testing.T) {
	s := on()
	s.TokensPerMinute = 600 // 10 tokens a second
	s.FlowTokensPerMinute = map[string]int64{"vip": 0}
	c := New(s)
	if v, _, _ := c.Offer(Item{ID: 1, Flow: "t", Tokens: 900}, 0, false); v.Outcome != Admitted {
		t.Fatalf("%+v", v)
	}
	v, _, _ := c.Offer(Item{ID: 2, Flow: "t", Tokens: 10}, 0, false)
	if v.Reason != Budget || v.RetryAfterNs < 30*sec || v.RetryAfterNs > 31*sec {
		t.Fatalf("%+v, want budget with ~30 s retry (300 tokens of debt at 10/s)", v)
	}
	if v, _, _ := c.Offer(Item{ID: 3, Flow: "vip", Tokens: 1e6}, 0, false); v.Outcome != Admitted {
		t.Fatalf("unlimited flow: %+v", v)
	}
	c.Budgets().Charge("t", -500, 0) // the answer was shorter than estimated
	if v, _, _ := c.Offer(Item{ID: 4, Flow: "t", Tokens: 10}, 0, false); v.Outcome != Admitted {
		t.Fatalf("after correction: %+v", v)
	}
	if lvl, _ := c.Budgets().Level("t", 60*sec); lvl != 600 {
		t.Fatalf("level after a minute %v, want full 600", lvl)
	}
}

func TestCancel(t *testing.T) {
	c := New(on())
	mustQueue(t, c, Item{ID: 1, Bytes: 100}, 0)
	mustQueue(t, c, Item{ID: 2, Bytes: 50}, 0)
	if !c.Cancel(1) || c.Cancel(1) || c.Bytes() != 50 {
		t.Fatal("cancel bookkeeping")
	}
	if got := drain(c, 0); !eq(got, []uint64{2}) {
		t.Fatalf("after cancel %v", got)
	}
}

// Every offered request ends in exactly one of admitted, shed, cancelled;
// none is dispatched twice or both shed and dispatched; the counts agree.
func TestPropertyEveryRequestEndsOnce(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		s := on()
		s.QueueCapacity = 1 + rng.IntN(20)
		s.QueueBytes = int64(rng.IntN(3)) * 500
		if rng.IntN(2) == 0 {
			s.Order = OrderEDF
		}
		s.MinShare = map[int]float64{0: 0.2}
		c := New(s)
		ends := map[uint64]string{}
		end := func(id uint64, how string) {
			if prev, ok := ends[id]; ok {
				t.Fatalf("seed %d: request %d ended twice (%s, then %s)", seed, id, prev, how)
			}
			ends[id] = how
		}
		now, next := int64(0), uint64(0)
		for step := 0; step < 3000; step++ {
			now += int64(rng.IntN(200)) * 1e6
			switch op := rng.IntN(10); {
			case op < 5:
				next++
				it := Item{ID: next, Priority: rng.IntN(3), Flow: string(rune('a' + rng.IntN(4))), Arrived: now, Bytes: int64(rng.IntN(300))}
				if rng.IntN(2) == 0 {
					it.Deadline, it.Service = now+int64(rng.IntN(5000))*1e6, int64(rng.IntN(500))*1e6
				}
				v, out, ok := c.Offer(it, now, rng.IntN(3) > 0)
				if ok {
					end(out.ID, "displaced")
				}
				switch v.Outcome {
				case Admitted:
					end(it.ID, "admitted")
				case Shed:
					end(it.ID, "shed")
				}
			case op < 8:
				if it, ok := c.Dispatch(now, rng.IntN(4) == 0); ok {
					end(it.ID, "admitted")
				}
			case op < 9:
				c.Expire(now, func(it Item, r Reason) { end(it.ID, r.String()) })
			default:
				if id := uint64(rng.IntN(int(next) + 1)); c.Cancel(id) {
					end(id, "cancelled")
				}
			}
			if c.Len() > s.QueueCapacity || (s.QueueBytes > 0 && c.Bytes() > s.QueueBytes) {
				t.Fatalf("seed %d: queue over its bounds: %d requests, %d bytes", seed, c.Len(), c.Bytes())
			}
		}
		for _, id := range drain(c, now) {
			end(id, "admitted")
		}
		if uint64(len(ends)) != next {
			t.Fatalf("seed %d: %d of %d requests ended", seed, len(ends), next)
		}
	}
}

func TestSaturation(t *testing.T) {
	s := Defaults()
	s.TokenCapacity = 10000
	now := int64(10 * sec)
	rows := []policy.Row{
		{Load: policy.Load{Requests: 3}, Reported: policy.Reported{Running: 2, Waiting: 1, KVUse: 0.4, HasQueue: true, HasKV: true, At: now}}, // max(1/5, 0.4/0.8) = 0.5
		{Load: policy.Load{Requests: 9}, Reported: policy.Reported{Running: 2, Waiting: 0, HasQueue: true, At: now - sec}},                    // (9−2)/5 = 1.4
		{Load: policy.Load{Requests: 1}, Reported: policy.Reported{KVUse: 0.1, HasKV: true, At: now - 3*sec}},                                 // stale → 1
		{Load: policy.Load{Requests: 4, Tokens: 8000}}, // max(3/5, 0.8) = 0.8
	}
	want := []float64{0.5, 1.4, 1, 0.8}
	for i := range rows {
		if got := ReplicaScore(&rows[i], now, &s, 0); got < want[i]-1e-9 || got > want[i]+1e-9 {
			t.Errorf("replica %d: score %v, want %v", i, got, want[i])
		}
	}
	v := &policy.View{Names: []string{"a", "b", "c", "d"}, Rows: rows, Now: now}
	if got := PoolScore(v, &s, 0); got < 0.925-1e-9 || got > 0.925+1e-9 {
		t.Fatalf("pool %v, want 0.925", got)
	}
	if Saturated(v, &s, 0) {
		t.Fatal("0.925 < 1 is not saturated")
	}
	v.Exclude = []uint64{1 << 0} // without a, the mean is (1.4+1+0.8)/3
	if !Saturated(v, &s, 0) {
		t.Fatal("excluding the idle replica should saturate the pool")
	}
	// Three requests let go but not yet routed, spread over b, c, d: +1
	// in flight each raises b to 8/5 and d to 4/5 → (1.6+1+0.8)/3 ≥ 1.
	v.Exclude = []uint64{1<<0 | 1<<1}
	if Saturated(v, &s, 0) || !Saturated(v, &s, 4) {
		t.Fatalf("pending: %v without, %v with 4 pending", PoolScore(v, &s, 0), PoolScore(v, &s, 4))
	}
}

func TestValidate(t *testing.T) {
	s := Defaults()
	if err := s.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	s.KVThreshold, s.Order, s.MinShare = 1.5, "lifo", map[int]float64{0: 0.3, 1: 0.3}
	err := s.Validate()
	for _, want := range []string{"kv_threshold", `order: must be "fcfs" or "edf", got "lifo"`, "min_share: shares sum to 0.6"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not name %q", err, want)
		}
	}
}
