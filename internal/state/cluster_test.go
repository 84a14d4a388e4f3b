package state

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/llm-ring/llm-ring/internal/policy"
	"github.com/llm-ring/llm-ring/internal/replicaset"
)

// wire is a readable in-memory cluster: every Publish of one table is
// applied synchronously to the others (no delay, no loss), loads are summed
// per origin, and everything published is logged for the test to read.
// With late set, what a release publishes (a load decrease, a placement, a
// failed turn) is held until deliver: the release packet a client's next
// turn overtakes.
type wire struct {
	tables []*Table
	loads  []map[string]policy.Load // loads[i]: table i's own in-flight load, as published
	log    []string
	late   bool
	held   []func()
}

// send applies f now, or holds it when late and release.
func (w *wire) send(release bool, f func()) {
	if w.late && release {
		w.held = append(w.held, f)
		return
	}
	f()
}

// deliver applies what was held, in publish order.
func (w *wire) deliver() {
	for _, f := range w.held {
		f()
	}
	w.held = nil
}

// wirePeer is table i's view of the wire.
type wirePeer struct {
	w *wire
	i int
}

func newWire(tables ...*Table) *wire {
	w := &wire{tables: tables}
	for i, t := range tables {
		w.loads = append(w.loads, map[string]policy.Load{})
		t.SetPeers(wirePeer{w, i})
	}
	return w
}

func (p wirePeer) PublishPlacement(u PlacementUpdate) {
	p.w.log = append(p.w.log, fmt.Sprintf("%d placement %s cached=%d", p.i, u.Replica, u.Cached))
	p.w.send(true, func() {
		for j, t := range p.w.tables {
			if j != p.i {
				go2(func() { t.ApplyPlacement(u) })
			}
		}
	})
}

func (p wirePeer) PublishTurn(u TurnUpdate) {
	p.w.log = append(p.w.log, fmt.Sprintf("%d turn %s failed=%v charge=%d", p.i, u.Replica, u.Failed, u.Charge))
	p.w.send(u.Failed, func() {
		for j, t := range p.w.tables {
			if j != p.i {
				go2(func() { t.ApplyTurn(u) })
			}
		}
	})
}

func (p wirePeer) PublishPrefix(u PrefixUpdate) {
	p.w.log = append(p.w.log, fmt.Sprintf("%d prefix %s lost=%v blocks=%d", p.i, u.Replica, u.Lost, len(u.Blocks)))
	for j, t := range p.w.tables {
		if j != p.i {
			u := u
			u.Blocks = slices.Clone(u.Blocks)
			go2(func() { t.ApplyPrefix(u) })
		}
	}
}

func (p wirePeer) AddLoad(replica string, req, tok int64) {
	p.w.send(req < 0, func() {
		l := p.w.loads[p.i][replica]
		l.Requests += req
		l.Tokens += tok
		p.w.loads[p.i][replica] = l
	})
}

func (p wirePeer) RemoteLoad(replica string) (req, tok int64) {
	for j, m := range p.w.loads {
		if j != p.i {
			req += m[replica].Requests
			tok += m[replica].Tokens
		}
	}
	return req, tok
}

// go2 runs f on another goroutine and waits: the publishing table holds its
// own lock, the receiving table takes its own (as memberlist's goroutines
// would).
func go2(f func()) {
	done := make(chan struct{})
	go func() { f(); close(done) }()
	<-done
}

func newPrefixTable(t testing.TB) *Table {
	p, err := policy.New("llm-aware", &policy.LLMAware{Epsilon: 0.25, CacheAwareLoad: true,
		PlacementMemory: true, LongStickiness: true, LongPromptTokens: 800, LongCapFactor: 2})
	if err != nil {
		t.Fatal(err)
	}
	return New(Config{VirtualNodes: 64, CharsPerToken: 4, MaxEntries: 1000, TTL: time.Minute,
		Prefix: PrefixConfig{BlockChars: 16, CapacityTokens: 10000, TTL: time.Minute}}, p)
}

// Issue 13: a conversation redirected by one instance keeps its placement
// when its next turn reaches another instance.
func TestPeersSharePlacement(t *testing.T) {
	a, b := newTable(t, "llm-aware"), newTable(t, "llm-aware")
	for _, tb := range []*Table{a, b} {
		tb.SetReplicas(replicas("x", "y", "z"))
	}
	w := newWire(a, b)
	key := "redirected"
	home, _, _ := a.Route(in(key, 40, 10), 0)
	a.Release(&home, Outcome{OK: true, Known: true, PromptN: 10, PredictedN: 10}, 1)
	// A fails it over away from home: the conversation now lives elsewhere.
	tk, _, _ := a.Route(in(key, 80, 10), 2, home.Replica.Name)
	a.Release(&tk, Outcome{OK: true, Known: true, PromptN: 20, PredictedN: 10}, 3)
	// Its third turn reaches B, which routed none of it.
	tk3, d3, _ := b.Route(in(key, 120, 10), 4)
	if !replicaset.Equal(tk3.Replica, tk.Replica) || d3.Reason != policy.Sticky || tk3.ExpectCached != 30 {
		t.Fatalf("turn 3 on B → %s (%s, expect cached %d), want %s (sticky, 30)\n%s\nlog: %q",
			tk3.Replica.Name, d3.Reason, tk3.ExpectCached, tk.Replica.Name, d3.Format(), w.log)
	}
}

// Applied updates are not published again (no echo between instances), and
// a placement B used after the update's time is newer and stays.
func TestPeersApplyWithoutEcho(t *testing.T) {
	a, b := newTable(t, "llm-aware"), newTable(t, "llm-aware")
	for _, tb := range []*Table{a, b} {
		tb.SetReplicas(replicas("x", "y", "z"))
	}
	w := newWire(a, b)
	tk, _, _ := a.Route(in("c", 40, 10), 10)
	a.Release(&tk, Outcome{OK: true, Known: true, PromptN: 10, PredictedN: 10}, 20)
	want := []string{"0 turn " + tk.Replica.Name + " failed=false charge=20", "0 placement " + tk.Replica.Name + " cached=20"}
	if !slices.Equal(w.log, want) {
		t.Fatalf("published %q, want %q (B must not re-publish)", w.log, want)
	}
	// B routes the next turn at 30 and answers it elsewhere; a late
	// update from A (at 25) must not undo that.
	other := "x"
	if tk.Replica.Name == "x" {
		other = "y"
	}
	tb, _, _ := b.Route(in("c", 80, 10), 30, tk.Replica.Name)
	b.Release(&tb, Outcome{OK: true, Known: true, PromptN: 30, PredictedN: 10}, 40)
	b.ApplyPlacement(PlacementUpdate{Key: in("c", 0, 0).Hash, Replica: other, Cached: 5, At: 25})
	if st, _, _ := b.Route(in("c", 120, 10), 50); !replicaset.Equal(st.Replica, tb.Replica) || st.ExpectCached != 40 {
		t.Fatalf("after a late update: → %s expecting %d, want %s expecting 40", st.Replica.Name, st.ExpectCached, tb.Replica.Name)
	}
}

// Each instance balances the summed load: loads in flight on the other
// instances are in every row (and the total) the policy reads, and leave it
// when they are released.
func TestPeersLoadIsSummed(t *testing.T) {
	a, b := newTable(t, "least-loaded"), newTable(t, "least-loaded")
	for _, tb := range []*Table{a, b} {
		tb.SetReplicas(replicas("x", "y"))
	}
	newWire(a, b)
	var rows []policy.Row
	var total policy.Load
	spy := rowSpy{func(v *policy.View) { rows, total = slices.Clone(v.Rows), v.Total }}
	// Two requests in flight on A (on x and y, least-loaded alternates).
	t1, _, _ := a.Route(in("c1", 400, 100), 0)
	t2, _, _ := a.Route(in("c2", 400, 100), 0)
	if replicaset.Equal(t1.Replica, t2.Replica) {
		t.Fatalf("A put both on %s", t1.Replica.Name)
	}
	b.SetPolicy(spy)
	b.Route(in("c3", 400, 100), 0)
	if rows[0].Load.Requests != 1 || rows[1].Load.Requests != 1 || total.Requests != 2 {
		t.Fatalf("B sees loads %v total %v, want A's 1+1", rows, total)
	}
	// B's own request c3 (the spy put it on x) stays in B's rows.
	a.Release(&t1, Outcome{}, 1)
	a.Release(&t2, Outcome{}, 1)
	b.Route(in("c4", 400, 100), 2)
	if rows[0].Load.Requests != 1 || rows[1].Load.Requests != 0 || total.Requests != 1 {
		t.Fatalf("after A's releases B sees %v total %v, want only its own request on x", rows, total)
	}
}

// Prefix inserts travel; a replica that lost its cache is forgotten on the
// other instances too.
func TestPeersSharePrefix(t *testing.T) {
	a, b := newPrefixTable(t), newPrefixTable(t)
	for _, tb := range []*Table{a, b} {
		tb.SetReplicas(replicas("x", "y", "z"))
	}
	newWire(a, b)
	blocks := []uint64{1, 2, 3, 4}
	var match []int
	spy := rowSpy{func(v *policy.View) {
		match = match[:0]
		for _, r := range v.Rows {
			match = append(match, r.Match)
		}
	}}
	tk, _, _ := a.Route(Input{Key: "doc-1", Hash: 1, Chars: 64, OutputTokens: 10, Blocks: blocks}, 0)
	b.SetPolicy(spy)
	b.Route(Input{Key: "doc-2", Hash: 2, Chars: 64, OutputTokens: 10, Blocks: blocks}, 1)
	want := []int{0, 0, 0}
	want[tk.Index] = 16 // 4 blocks of 16 chars at 4 chars per token
	if !slices.Equal(match, want) {
		t.Fatalf("B's matches after A routed the prompt: %v, want %v", match, want)
	}
	a.Release(&tk, Outcome{OK: true, Known: true, CacheN: 0, PromptN: 16, PredictedN: 10}, 2)
	// A sends a prompt sharing two blocks to the same replica, which
	// answers reusing nothing: it lost its cache. B forgets what it
	// believed of it too, and keeps the prompt it has just processed.
	var others []string
	for _, n := range []string{"x", "y", "z"} {
		if n != tk.Replica.Name {
			others = append(others, n)
		}
	}
	tk2, _, _ := a.Route(Input{Key: "doc-4", Hash: 4, Chars: 48, OutputTokens: 10, Blocks: []uint64{1, 2, 7}}, 3, others...)
	a.Release(&tk2, Outcome{OK: true, Known: true, CacheN: 0, PromptN: 12, PredictedN: 10}, 4)
	b.Route(Input{Key: "doc-3", Hash: 3, Chars: 64, OutputTokens: 10, Blocks: blocks}, 5)
	if match[tk.Index] != 8 {
		t.Fatalf("B's matches after the loss: %v, want 8 on %s (blocks 1, 2 of the reprocessed prompt; 3, 4 forgotten)", match, tk.Replica.Name)
	}
}

// A table without peers publishes nothing and reads no remote load.
func TestNoPeersIsAlone(t *testing.T) {
	a := newTable(t, "least-loaded")
	a.SetReplicas(replicas("x", "y"))
	if a.PeerLoad() != nil {
		t.Fatal("PeerLoad without peers must be nil")
	}
}

func BenchmarkRoutePeers(b *testing.B) {
	for _, n := range []int{3, 64} {
		b.Run(fmt.Sprintf("replicas=%d", n), func(b *testing.B) {
			tb := newTable(b, "llm-aware")
			names := make([]string, n)
			for i := range names {
				names[i] = fmt.Sprintf("llm-%d", i)
			}
			tb.SetReplicas(replicas(names...))
			tb.SetPeers(nopPeers{})
			inputs := make([]Input, 1024)
			for i := range inputs {
				inputs[i] = in(fmt.Sprintf("conv-%d", i), 1000+i, 128)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				tk, _, _ := tb.Route(inputs[i&1023], int64(i))
				tb.Release(&tk, Outcome{OK: true, Known: true, PromptN: 300, PredictedN: 128}, int64(i))
			}
		})
	}
}

// nopPeers is a connected cluster whose peers carry a constant load.
type nopPeers struct{}

func (nopPeers) PublishPlacement(PlacementUpdate)   {}
func (nopPeers) PublishPrefix(PrefixUpdate)         {}
func (nopPeers) PublishTurn(TurnUpdate)             {}
func (nopPeers) AddLoad(string, int64, int64)       {}
func (nopPeers) RemoteLoad(string) (req, tok int64) { return 1, 500 }

// pickSpy records what a pick reads: the request and the view's rows and
// total (copies), and picks row 0.
type pickSpy struct {
	req   policy.Request
	rows  []policy.Row
	total policy.Load
}

func (*pickSpy) Name() string { return "spy" }
func (s *pickSpy) Pick(req *policy.Request, v *policy.View, d *policy.Decision) {
	s.req, s.rows, s.total = *req, slices.Clone(v.Rows), v.Total
	*d = policy.Decision{Replica: 0, Reason: "spy"}
}

// answered is a successful answer's outcome.
func answered(prompt, predicted int) Outcome {
	return Outcome{OK: true, Known: true, PromptN: prompt, PredictedN: predicted}
}

// Issue 13: a client with no think time sends its next turn, possibly to
// another instance, as soon as it has the answer — before that instance has
// heard the release. The turn announced when it was routed tells it where
// the conversation went and that the turn's load there is over: the next
// turn stays with its cache instead of being pushed off a replica that
// only looks busy.
func TestPeersTurnOverBeforeRelease(t *testing.T) {
	a, b := newTable(t, "llm-aware"), newTable(t, "llm-aware")
	for _, tb := range []*Table{a, b} {
		tb.SetReplicas(replicas("x", "y", "z"))
	}
	w := newWire(a, b)
	w.late = true
	key := "c"
	home, _, _ := a.Route(in(key, 40, 10), 0)
	a.Release(&home, answered(10, 10), 1)
	w.deliver()
	// A fails turn 2 over away from home; its release is late.
	tk, _, _ := a.Route(in(key, 80, 10), 2, home.Replica.Name)
	a.Release(&tk, answered(20, 10), 3)
	if got := b.PeerLoad()[tk.Index]; got.Requests != 1 {
		t.Fatalf("B's peer load on %s before the release: %+v, want the turn's request", tk.Replica.Name, got)
	}
	// Turn 3 (a longer prompt) reaches B first. Cached there: turn 2's
	// prompt and its answer, at most the 10 tokens it asked for (the
	// prompt grew by 40 chars = 10 tokens).
	tk3, d3, _ := b.Route(in(key, 120, 10), 4)
	if !replicaset.Equal(tk3.Replica, tk.Replica) || d3.Reason != policy.Sticky || tk3.ExpectCached != tk.EstPrompt+10 {
		t.Fatalf("turn 3 on B → %s (%s, expect cached %d), want %s (sticky, %d)\n%s\nlog: %q",
			tk3.Replica.Name, d3.Reason, tk3.ExpectCached, tk.Replica.Name, tk.EstPrompt+10, d3.Format(), w.log)
	}
	// Then the release arrives; B's own answer is newer and stays.
	w.deliver()
	b.Release(&tk3, answered(40, 10), 5)
	w.deliver()
	if tk4, _, _ := a.Route(in(key, 160, 10), 6); !replicaset.Equal(tk4.Replica, tk.Replica) || tk4.ExpectCached != 50 {
		t.Fatalf("turn 4 on A → %s expecting %d, want %s expecting 50", tk4.Replica.Name, tk4.ExpectCached, tk.Replica.Name)
	}
}

// What a pick reads when a remote turn is in flight: a longer prompt of the
// conversation discounts exactly that turn's load (one request, its charge)
// and takes its replica as the conversation's place, once; a request no
// longer than the turn's prompt (a retry, a concurrent request) does not.
func TestPeersTurnDiscount(t *testing.T) {
	a, b := newTable(t, "least-loaded"), newTable(t, "least-loaded")
	for _, tb := range []*Table{a, b} {
		tb.SetReplicas(replicas("x", "y"))
	}
	w := newWire(a, b)
	w.late = true
	other, _, _ := a.Route(in("other", 400, 100), 0) // stays in flight
	tk, _, _ := a.Route(in("c", 400, 100), 1)
	if replicaset.Equal(other.Replica, tk.Replica) {
		t.Fatalf("least-loaded put both on %s", tk.Replica.Name)
	}
	a.Release(&tk, answered(100, 100), 2) // held
	spy := &pickSpy{}
	b.SetPolicy(spy)

	retry, _, _ := b.Route(in("c", 400, 100), 3) // not longer: the turn may still run
	if spy.req.Last != -1 || spy.rows[tk.Index].Load != (policy.Load{Requests: 1, Tokens: tk.Charge}) || spy.total.Requests != 2 {
		t.Fatalf("a retry read last %d, rows %+v, total %+v; want no place and both of A's requests", spy.req.Last, spy.rows, spy.total)
	}
	// The next turn: 80 more chars (20 tokens), fewer than the 100 the
	// turn asked for: its answer is at most those 20.
	b.Route(in("c", 480, 100), 4)
	if spy.req.Last != tk.Index || spy.req.CachedTokens != tk.EstPrompt+20 {
		t.Fatalf("the next turn read last %d cached %d, want %d cached %d", spy.req.Last, spy.req.CachedTokens, tk.Index, tk.EstPrompt+20)
	}
	// Row 0 holds B's retry (the spy picks row 0), A's other request is
	// counted, A's finished turn is not.
	want := make([]policy.Load, 2)
	want[0] = policy.Load{Requests: 1, Tokens: retry.Charge}
	want[other.Index].Requests++
	want[other.Index].Tokens += other.Charge
	for i, r := range spy.rows {
		if r.Load != want[i] {
			t.Fatalf("row %d read %+v, want %+v (A's finished turn not counted)", i, r.Load, want[i])
		}
	}
	if spy.total.Requests != 2 {
		t.Fatalf("total %+v, want B's request and A's other", spy.total)
	}
	b.Route(in("c", 560, 100), 5) // once: the turn is forgotten
	if spy.req.Last != -1 || spy.rows[tk.Index].Load.Requests < 1 {
		t.Fatalf("a second longer request read last %d and %+v: the turn must be used once", spy.req.Last, spy.rows)
	}
}

// A turn that failed, or that its publisher answered, is forgotten — even
// when its own announcement arrives after the news (memberlist hands queued
// messages over last in, first out); a turn older than what an instance
// knows of the conversation is ignored.
func TestPeersTurnForgotten(t *testing.T) {
	a, b := newTable(t, "llm-aware"), newTable(t, "llm-aware")
	for _, tb := range []*Table{a, b} {
		tb.SetReplicas(replicas("x", "y", "z"))
	}
	newWire(a, b)
	spy := &pickSpy{}
	key := in("c", 40, 10).Hash
	announced := func() bool {
		tn, _, ok := b.mem.turns.peek(key)
		return ok && !tn.Failed
	}
	// Failed: the next (longer) request finds no place.
	tk, _, _ := a.Route(in("c", 40, 10), 0)
	a.Release(&tk, Outcome{}, 1)
	if announced() {
		t.Fatal("a failed turn stays announced")
	}
	// Its announcement, late, changes nothing.
	b.ApplyTurn(TurnUpdate{Key: key, Replica: tk.Replica.Name, Charge: tk.Charge, Prompt: 10, Chars: 40, At: 0})
	if announced() {
		t.Fatal("a failed turn's late announcement was kept")
	}
	b.SetPolicy(spy)
	b.Route(in("c", 80, 10), 2)
	if spy.req.Last != -1 {
		t.Fatalf("after a failed turn the next request read last %d, want none", spy.req.Last)
	}
	b.SetPolicy(a.Policy())
	// Answered: placement memory has it, the turn is gone; its late
	// announcement is ignored.
	tk, _, _ = a.Route(in("c", 40, 10), 3)
	if !announced() {
		t.Fatal("a routed turn was not announced")
	}
	a.Release(&tk, answered(10, 10), 4)
	if announced() {
		t.Fatal("an answered turn stays announced")
	}
	b.ApplyTurn(TurnUpdate{Key: key, Replica: tk.Replica.Name, Charge: tk.Charge, Prompt: 10, Chars: 40, At: 3})
	if announced() {
		t.Fatal("an answered turn's late announcement was kept")
	}
	// Stale: B answered a later turn itself (at 10); A's turn of 5 is older.
	tb, _, _ := b.Route(in("c", 80, 10), 9)
	b.Release(&tb, answered(20, 10), 10)
	b.ApplyTurn(TurnUpdate{Key: key, Replica: "z", Charge: 30, Prompt: 20, Chars: 80, At: 5})
	if announced() {
		t.Fatal("a turn older than B's own answer was kept")
	}
}
