package cluster

import (
	"context"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/llm-ring/llm-ring/internal/config"
	"github.com/llm-ring/llm-ring/internal/state"
)

// Generous: the machine is shared; "eventually" never asserts a speed.
const eventually = 20 * time.Second

var (
	keyA = []byte("0123456789abcdef0123456789abcdef")
	keyB = []byte("fedcba9876543210fedcba9876543210")
)

// recorder is an Applier that keeps what it was given.
type recorder struct {
	mu         sync.Mutex
	placements []Placement
	turns      []Turn
	prefixes   []PrefixUpdate
}

func (r *recorder) ApplyTurn(t Turn) {
	r.mu.Lock()
	r.turns = append(r.turns, t)
	r.mu.Unlock()
}

func (r *recorder) hasTurn(key uint64, failed bool) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.ContainsFunc(r.turns, func(t Turn) bool { return t.Key == key && t.Failed == failed })
}

func (r *recorder) ApplyPlacement(p Placement) {
	r.mu.Lock()
	r.placements = append(r.placements, p)
	r.mu.Unlock()
}

func (r *recorder) ApplyPrefix(u PrefixUpdate) {
	r.mu.Lock()
	r.prefixes = append(r.prefixes, u)
	r.mu.Unlock()
}

func (r *recorder) hasPlacement(key uint64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.ContainsFunc(r.placements, func(p Placement) bool { return p.Key == key })
}

func (r *recorder) hasPrefix(h uint64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.ContainsFunc(r.prefixes, func(u PrefixUpdate) bool { return slices.Contains(u.Hashes, h) })
}

type testNode struct {
	*Node
	rec    *recorder
	reg    *prometheus.Registry
	cancel context.CancelFunc
	done   chan struct{}
}

// fastMemberlist shortens memberlist's timers so that failures are noticed
// quickly on loopback (memberlist.DefaultLocalConfig, shortened further).
func fastMemberlist(c *memberlist.Config) {
	l := memberlist.DefaultLocalConfig()
	// Short, but not so short that a busy machine (-race, 7 engineers
	// compiling) makes peers flap: a flap rightly drops a peer's loads and
	// would fail the load tests for the wrong reason.
	c.ProbeInterval = 200 * time.Millisecond
	c.ProbeTimeout = 200 * time.Millisecond
	c.GossipInterval = 20 * time.Millisecond
	c.SuspicionMult = 3
	c.SuspicionMaxTimeoutMult = 2
	c.PushPullInterval = l.PushPullInterval
	c.TCPTimeout = time.Second
	c.IndirectChecks = 1
}

type nodeOpt func(*Options)

func withKey(k []byte) nodeOpt           { return func(o *Options) { o.Key = k } }
func withDrop(f func(Kind) bool) nodeOpt { return func(o *Options) { o.dropOut = f } }
func withSync(d time.Duration) nodeOpt {
	return func(o *Options) { o.Config.SyncInterval = config.Duration(d) }
}
func withPeers(addrs ...string) nodeOpt { return func(o *Options) { o.Peers = StaticPeers(addrs) } }

// startNode starts a node on 127.0.0.1 (any free port) and stops it at the
// end of the test.
func startNode(t testing.TB, name string, opts ...nodeOpt) *testNode {
	t.Helper()
	tn := &testNode{rec: &recorder{}, reg: prometheus.NewRegistry(), done: make(chan struct{})}
	o := Options{
		Config: config.Cluster{
			Mode: config.ClusterGossip, Bind: "127.0.0.1:0",
			Peers:         config.ClusterPeers{Mode: config.ClusterPeersStatic, Static: []string{"127.0.0.1:1"}},
			SecretFile:    "unused: Key is set",
			SyncInterval:  config.Duration(200 * time.Millisecond),
			FlushInterval: config.Duration(5 * time.Millisecond),
		},
		Name: name, Key: keyA, Applier: tn.rec, Registerer: tn.reg,
		Peers: StaticPeers(nil), tune: fastMemberlist,
	}
	for _, f := range opts {
		f(&o)
	}
	n, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	tn.Node = n
	ctx, cancel := context.WithCancel(context.Background())
	tn.cancel = cancel
	go func() {
		defer close(tn.done)
		_ = n.Run(ctx)
	}()
	t.Cleanup(tn.stop)
	return tn
}

func (tn *testNode) stop() {
	tn.cancel()
	<-tn.done
}

// kill stops the node without leaving: peers must notice by themselves.
func (tn *testNode) kill() {
	tn.Crash()
	tn.stop()
}

func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(eventually)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", eventually, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func remote(n *testNode, replica string) Load {
	r, tok := n.RemoteLoad(replica)
	return Load{r, tok}
}

// cluster3 starts a, b, c; b and c know a's address.
func cluster3(t *testing.T, opts ...nodeOpt) (a, b, c *testNode) {
	a = startNode(t, "a", opts...)
	b = startNode(t, "b", append(opts, withPeers(a.Addr()))...)
	c = startNode(t, "c", append(opts, withPeers(a.Addr()))...)
	for _, n := range []*testNode{a, b, c} {
		waitFor(t, n.name+" sees 2 peers", func() bool { return n.alivePeers() == 2 })
	}
	return a, b, c
}

// Three nodes converge: what one publishes, the others apply.
func TestClusterConverges(t *testing.T) {
	a, b, c := cluster3(t)
	a.PublishPlacement(Placement{PlacementUpdate: state.PlacementUpdate{Key: 77, Replica: "llm-1", Cached: 100, Prompt: 120, Chars: 480, At: time.Now().UnixNano()}})
	a.PublishPrefix(PrefixUpdate{Replica: "llm-1", Op: PrefixInsert, Hashes: []uint64{5, 6, 7}, At: time.Now().UnixNano()})
	a.PublishTurn(Turn{TurnUpdate: state.TurnUpdate{Key: 78, Replica: "llm-2", Charge: 900, Prompt: 800, Chars: 3200, At: time.Now().UnixNano()}})
	a.PublishTurn(Turn{TurnUpdate: state.TurnUpdate{Key: 79, Replica: "llm-2", Failed: true, At: time.Now().UnixNano()}})
	for _, n := range []*testNode{b, c} {
		waitFor(t, n.name+" applies a's placement", func() bool { return n.rec.hasPlacement(77) })
		waitFor(t, n.name+" applies a's turns", func() bool { return n.rec.hasTurn(78, false) && n.rec.hasTurn(79, true) })
		waitFor(t, n.name+" applies a's prefix insert", func() bool { return n.rec.hasPrefix(6) })
	}
	if a.rec.hasPlacement(77) {
		t.Fatal("a node must not apply its own update")
	}
	st := b.Status()
	if st.Isolated || len(st.Peers) != 2 || !st.Peers[0].Alive || st.Peers[0].Name != "a" {
		t.Fatalf("b status = %+v", st)
	}
}

// A long prefix chain is split into packets that each fit, and all of it
// arrives.
func TestLongPrefixChainArrivesWhole(t *testing.T) {
	a := startNode(t, "a")
	b := startNode(t, "b", withPeers(a.Addr()))
	waitFor(t, "b joins a", func() bool { return a.alivePeers() == 1 })
	chain := make([]uint64, 1000)
	for i := range chain {
		chain[i] = uint64(i + 1)
	}
	a.PublishPrefix(PrefixUpdate{Replica: "llm-0", Hashes: chain})
	waitFor(t, "b gets the first and last block", func() bool { return b.rec.hasPrefix(1) && b.rec.hasPrefix(1000) })
}

// Loads sum across instances, and a release brings the peers' view back to
// zero.
func TestLoadsSum(t *testing.T) {
	a, b, c := cluster3(t)
	a.AddLoad("llm-0", 5, 5000)
	c.AddLoad("llm-0", 1, 100)
	waitFor(t, "b sees a's 5 and c's 1 on llm-0", func() bool { return remote(b, "llm-0") == Load{6, 5100} })
	waitFor(t, "a sees only c's load", func() bool { return remote(a, "llm-0") == Load{1, 100} })
	a.AddLoad("llm-0", -5, -5000)
	c.AddLoad("llm-0", -1, -100)
	waitFor(t, "b sees the releases", func() bool { return remote(b, "llm-0") == Load{} })
	dst := map[string]Load{"stale": {1, 1}}
	b.PeerLoads(dst)
	if len(dst) != 0 {
		t.Fatalf("PeerLoads = %v, want empty", dst)
	}
}

// A killed instance's loads disappear from the others (failure detection),
// and the survivors say who is left.
func TestKilledNodeLoadsDropped(t *testing.T) {
	a, b, c := cluster3(t)
	c.AddLoad("llm-2", 3, 300)
	waitFor(t, "a sees c's load", func() bool { return remote(a, "llm-2") == Load{3, 300} })
	c.kill()
	for _, n := range []*testNode{a, b} {
		waitFor(t, n.name+" drops c's load", func() bool { return remote(n, "llm-2") == Load{} })
	}
	waitFor(t, "a sees one peer", func() bool { return a.alivePeers() == 1 })
	if got := testutil.ToFloat64(gauge(t, a.reg, "llm_ring_cluster_peers_alive")); got != 1 {
		t.Fatalf("peers_alive = %v", got)
	}
}

// A release lost on the way is repaired by the next full snapshot; loads
// never read negative meanwhile.
func TestSnapshotRepairsDroppedPushes(t *testing.T) {
	var mu sync.Mutex
	dropping := false
	drop := func(k Kind) bool {
		mu.Lock()
		defer mu.Unlock()
		return dropping && k == KindLoadDelta
	}
	// No snapshot until the test asks: neither our sync nor memberlist's push-pull.
	noPushPull := func(o *Options) {
		o.tune = func(c *memberlist.Config) { fastMemberlist(c); c.PushPullInterval = 0 }
	}
	a := startNode(t, "a", withDrop(drop), withSync(time.Minute), noPushPull)
	b := startNode(t, "b", withPeers(a.Addr()), withSync(time.Minute), noPushPull)
	waitFor(t, "b joins a", func() bool { return b.alivePeers() == 1 && a.alivePeers() == 1 })
	a.AddLoad("llm-0", 2, 200)
	waitFor(t, "b sees a's load", func() bool { return remote(b, "llm-0") == Load{2, 200} })

	mu.Lock()
	dropping = true
	mu.Unlock()
	a.AddLoad("llm-0", -2, -200)
	a.AddLoad("llm-1", 1, 10)
	waitFor(t, "a's push was dropped", func() bool {
		return testutil.ToFloat64(a.Node.m.dropped.WithLabelValues("load_delta", dropTestHook)) >= 1
	})
	if got := remote(b, "llm-0"); got != (Load{2, 200}) {
		t.Fatalf("b sees %+v on llm-0 although the release was dropped; the test hook did not drop", got)
	}
	a.sendSnapshots()
	waitFor(t, "the snapshot repairs llm-0 and llm-1", func() bool {
		return remote(b, "llm-0") == Load{} && remote(b, "llm-1") == Load{1, 10}
	})
}

// A late or repeated push, replayed on the wire, never drives a load
// negative nor brings a released load back.
func TestReplayedPushesAreHarmless(t *testing.T) {
	a := startNode(t, "a")
	b := startNode(t, "b", withPeers(a.Addr()))
	waitFor(t, "b joins a", func() bool { return b.alivePeers() == 1 && a.alivePeers() == 1 })
	bNode := a.targets()[0]
	old := encodeLoad(loadMsg{Origin: "a", Gen: a.gen, Seq: 1_000_000, Entries: []LoadEntry{on("llm-0", 4, 400)}})
	newer := encodeLoad(loadMsg{Origin: "a", Gen: a.gen, Seq: 1_000_001, Entries: []LoadEntry{on("llm-0", 0, 0)}})
	for _, pkt := range [][]byte{old, newer, old, old, newer} { // late and duplicated
		if err := a.ml.SendReliable(bNode, pkt); err != nil {
			t.Fatal(err)
		}
	}
	marker := encodeLoad(loadMsg{Origin: "a", Gen: a.gen, Seq: 1_000_002, Entries: []LoadEntry{on("marker", 1, 1)}})
	if err := a.ml.SendReliable(bNode, marker); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "b got all replays", func() bool { return remote(b, "marker") == Load{1, 1} })
	if got := remote(b, "llm-0"); got != (Load{}) {
		t.Fatalf("after replays b sees %+v on llm-0, want zero", got)
	}
	if testutil.ToFloat64(b.Node.m.dropped.WithLabelValues("load_delta", dropStale)) < 2 {
		t.Fatal("replays not counted as stale")
	}
}

// An instance with the wrong key can neither join nor inject state; nor can
// raw unencrypted packets.
func TestWrongKeyCannotJoinOrInject(t *testing.T) {
	a := startNode(t, "a")
	b := startNode(t, "b", withPeers(a.Addr()))
	waitFor(t, "b joins a", func() bool { return a.alivePeers() == 1 })

	evil := startNode(t, "evil", withKey(keyB))
	if _, err := evil.ml.Join([]string{a.Addr()}); err == nil {
		t.Fatal("join with the wrong key succeeded")
	}
	// Encrypted with the wrong key: a user message straight to a's port.
	addr := memberlist.Address{Addr: a.Addr(), Name: "a"}
	if err := evil.ml.SendToAddress(addr, encodePlacements([]Placement{{PlacementUpdate: state.PlacementUpdate{Key: 666, Replica: "llm-0"}}})); err != nil {
		t.Fatal(err)
	}
	// Unencrypted, by hand: a memberlist user message over UDP (with and
	// without the label header) and over TCP.
	payload := encodePlacements([]Placement{{PlacementUpdate: state.PlacementUpdate{Key: 667, Replica: "llm-0"}}})
	raw := append([]byte{8 /* memberlist userMsg */}, payload...)
	labelled, err := memberlist.AddLabelHeaderToPacket(raw, "llm-ring")
	if err != nil {
		t.Fatal(err)
	}
	udp, err := net.Dial("udp", a.Addr())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range [][]byte{raw, labelled} {
		if _, err := udp.Write(p); err != nil {
			t.Fatal(err)
		}
	}
	udp.Close()
	tcp, err := net.Dial("tcp", a.Addr())
	if err != nil {
		t.Fatal(err)
	}
	// userMsg, then msgpack {"UserMsgLen": len} (fixmap, fixstr, fixint).
	stream := append([]byte{8, 0x81, 0xaa}, "UserMsgLen"...)
	stream = append(stream, byte(len(payload)))
	stream = append(stream, payload...)
	if _, err := tcp.Write(stream); err != nil {
		t.Fatal(err)
	}
	tcp.Close()

	// A control message with the right key, sent after the attempts.
	b.PublishPlacement(Placement{PlacementUpdate: state.PlacementUpdate{Key: 1, Replica: "llm-0"}})
	waitFor(t, "a applies b's placement", func() bool { return a.rec.hasPlacement(1) })
	time.Sleep(200 * time.Millisecond) // let any stray packet be processed too
	if a.rec.hasPlacement(666) || a.rec.hasPlacement(667) {
		t.Fatal("a applied a placement from an instance without the key")
	}
	for _, m := range a.targets() {
		if m.Name == "evil" {
			t.Fatal("evil is a member of a's cluster")
		}
	}
	if !evil.Status().Isolated {
		t.Fatal("evil should be isolated")
	}
}

// An instance whose peers are unreachable routes alone and says so.
func TestIsolated(t *testing.T) {
	a := startNode(t, "a", withPeers("127.0.0.1:1")) // nothing listens there
	st := a.Status()
	if !st.Isolated || len(st.Peers) != 0 {
		t.Fatalf("status = %+v, want isolated", st)
	}
	if got := testutil.ToFloat64(gauge(t, a.reg, "llm_ring_cluster_isolated")); got != 1 {
		t.Fatalf("isolated gauge = %v", got)
	}
	a.AddLoad("llm-0", 1, 1) // works, goes nowhere
	waitFor(t, "the push is counted as having no peer", func() bool {
		return testutil.ToFloat64(a.Node.m.dropped.WithLabelValues("load_delta", dropNoPeer)) >= 1
	})
	b := startNode(t, "b", withPeers(a.Addr()))
	waitFor(t, "a is no longer isolated once b joins", func() bool { return !a.Status().Isolated })
	_ = b
}

// A node re-joins peers it lost (here: the peer source changes to name a
// peer that starts later).
func TestRejoinWhenPeerSetChanges(t *testing.T) {
	src := &chanPeers{ch: make(chan []string, 1)}
	a := startNode(t, "a", func(o *Options) { o.Peers = src })
	b := startNode(t, "b")
	src.ch <- []string{b.Addr()}
	waitFor(t, "a joins b after the set changed", func() bool { return a.alivePeers() == 1 && b.alivePeers() == 1 })
}

type chanPeers struct{ ch chan []string }

func (c *chanPeers) Run(ctx context.Context, update func([]string)) error {
	update(nil)
	for {
		select {
		case <-ctx.Done():
			return nil
		case s := <-c.ch:
			update(s)
		}
	}
}

func gauge(t *testing.T, reg *prometheus.Registry, name string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: "copy"}, func() float64 { return mf.GetMetric()[0].GetGauge().GetValue() })
		}
	}
	t.Fatalf("metric %s not registered", name)
	return nil
}

// chanApplier signals each placement it receives.
type chanApplier struct{ got chan struct{} }

func (a chanApplier) ApplyPlacement(Placement) { a.got <- struct{}{} }
func (a chanApplier) ApplyTurn(Turn)           {}
func (a chanApplier) ApplyPrefix(PrefixUpdate) {}

// BenchmarkPushDelivery: one placement published and flushed by one node,
// until its peer has applied it (loopback, encrypted, no compression):
// ns/op is the one-way delivery, flush-ns/op the part spent in Flush on
// the sender's goroutine (what a release adds to a request; the push loop,
// woken by the publish, sometimes sends it first). docs/cluster.md quotes
// both.
func BenchmarkPushDelivery(b *testing.B) {
	ca := chanApplier{make(chan struct{}, 1)}
	a := startNode(b, "a")
	c := startNode(b, "b", withPeers(a.Addr()), func(o *Options) { o.Applier = ca })
	waitFor(b, "join", func() bool { return a.alivePeers() == 1 && c.alivePeers() == 1 })
	var flush time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		a.PublishPlacement(Placement{PlacementUpdate: state.PlacementUpdate{Key: uint64(i), Replica: "llm-1", At: time.Now().UnixNano()}})
		start := time.Now()
		a.Flush()
		flush += time.Since(start)
		<-ca.got
	}
	b.ReportMetric(float64(flush.Nanoseconds())/float64(b.N), "flush-ns/op")
}
