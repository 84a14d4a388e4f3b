// Package cluster lets several router instances route as one: they gossip
// what changes routing (placement-memory updates, turns in flight,
// prefix-index inserts and evictions, and each instance's in-flight load per
// replica) over
// hashicorp/memberlist, encrypted and authenticated with a shared AES key.
//
// The package knows nothing of the routing state. The state talks to it
// through a few methods and one interface:
//
//	n, err := cluster.New(cluster.Options{Config: cfg, Applier: a})
//	go n.Run(ctx)                        // join peers, push, sync; leave when ctx ends
//	n.PublishPlacement(p)                // local changes: enqueue, never block
//	n.PublishTurn(t)
//	n.PublishPrefix(u)
//	n.AddLoad("llm-0", +1, +800)         // this instance's in-flight delta
//	req, tok := n.RemoteLoad("llm-0")    // sum of the peers' loads
//	a.ApplyPlacement(p)                  // remote changes arrive here
//
// How it travels (docs/cluster.md says why and
// gives sizes): local changes are batched for flush_interval, a turn
// (routed or failed) and a release (load decrease, placement, lost cache)
// not at all, and pushed as UDP packets to every alive peer
// (SendBestEffort); every sync_interval each instance sends its full load
// snapshot to every peer over TCP (SendReliable), which repairs any lost
// push. Loads travel as absolute values with a per-sender generation and
// sequence, so a lost, late or repeated message costs accuracy, never
// correctness: a released load is never resurrected and no sum goes below
// zero. A peer that leaves or fails (memberlist's failure detector) has its
// loads dropped at once.
package cluster

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/llm-ring/llm-ring/internal/config"
	"log/slog"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/prometheus/client_golang/prometheus"
)

// Applier receives the updates other instances publish.
//
// Its methods are called from memberlist's goroutines, possibly
// concurrently: they must be safe for concurrent use, must not block (they
// stall the packet loop) and must not retain the Hashes slice beyond the
// call unless they own it (each call gets a fresh slice; it is theirs).
type Applier interface {
	ApplyPlacement(p Placement)
	ApplyTurn(t Turn)
	ApplyPrefix(u PrefixUpdate)
}

// Options configures New.
type Options struct {
	// Config is the validated cluster block; Mode must be gossip.
	Config config.Cluster
	// Name identifies this instance among its peers; "" uses the host
	// name (the pod name on Kubernetes). Names must be unique.
	Name string
	// Applier receives remote updates; nil discards them (loads are
	// still summed).
	Applier Applier
	// Key is the gossip key; nil reads Config.SecretFile.
	Key []byte
	// Peers publishes peer addresses; nil builds the source Config.Peers
	// selects.
	Peers PeerSource
	// Logger receives the node's and memberlist's log lines; nil
	// discards them.
	Logger *slog.Logger
	// Registerer receives the llm_ring_cluster_* metrics; nil registers
	// none.
	Registerer prometheus.Registerer
	// Getenv expands ${VAR} in Config.Advertise; nil is os.Getenv.
	Getenv func(string) string

	// tune adjusts memberlist's configuration (tests shorten intervals).
	tune func(*memberlist.Config)
	// dropOut, when set, drops outgoing messages of the kinds it returns
	// true for (tests inject loss).
	dropOut func(Kind) bool
}

// Status is a node's view of its cluster, for /replicas and logs.
type Status struct {
	// Name and Addr identify this instance.
	Name string `json:"name"`
	Addr string `json:"addr"`
	// Isolated is true when no other instance is alive: this instance
	// routes on its own view alone.
	Isolated bool `json:"isolated"`
	// Peers are the other instances known, alive or recently gone,
	// sorted by name.
	Peers []PeerStatus `json:"peers"`
}

// PeerStatus is one other instance.
type PeerStatus struct {
	Name  string `json:"name"`
	Addr  string `json:"addr,omitempty"`
	Alive bool   `json:"alive"`
	// LastHeard is when its last load message (push or snapshot) was
	// applied; zero if never.
	LastHeard time.Time `json:"last_heard"`
}

// Bounds of the local queues and caches.
const (
	maxQueued    = 8192             // placement + prefix updates waiting for a push
	maxInterned  = 4096             // replica and node names kept for decoding
	forgetPeer   = 10 * time.Minute // how long a departed peer's Gen/Seq guard is kept
	leaveTimeout = 2 * time.Second
)

// Node is one router instance's membership in the cluster. All exported
// methods are safe for concurrent use; the Publish and AddLoad methods only
// take a short lock and enqueue.
type Node struct {
	cfg     config.Cluster
	name    string
	gen     uint64
	log     *slog.Logger
	ml      *memberlist.Memberlist
	applier Applier
	peers   PeerSource
	m       *metrics
	dropOut func(Kind) bool

	mu    sync.Mutex // guards local, outP, outT, outX
	local *localLoads
	outP  []Placement
	outT  []Turn
	outX  []PrefixUpdate
	kick  chan struct{} // a push is pending
	now   chan struct{} // a push is pending that must not wait (a release)

	bookMu sync.RWMutex // guards book
	book   *loadBook

	internMu sync.RWMutex
	intern   map[string]string

	knownMu sync.Mutex
	known   []string // peer addresses from the PeerSource
	rejoin  chan struct{}

	crashed atomic.Bool // tests: memberlist shut down without leaving

	// members are copies of the alive peers, kept from membership events.
	// (memberlist's Members returns pointers into state it keeps mutating,
	// which the race detector rightly flags; events run under its lock.)
	membersMu sync.RWMutex
	members   map[string]*memberlist.Node
	addr      string
}

// New checks the options, reads the key and starts memberlist (it binds the
// gossip port), without contacting any peer: Run joins.
func New(opts Options) (*Node, error) {
	cfg := opts.Config
	if cfg.Mode != config.ClusterGossip {
		return nil, fmt.Errorf("cluster.mode: %w (got %q)", ErrNotGossip, cfg.Mode)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	key := opts.Key
	if key == nil {
		k, err := ReadKey(cfg.SecretFile)
		if err != nil {
			return nil, err
		}
		key = k
	}
	if !keyLen(len(key)) {
		return nil, fmt.Errorf("cluster.secret_file: key of %d bytes; want 16, 24 or 32", len(key))
	}
	getenv := opts.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	adv, err := advertise(&cfg, getenv)
	if err != nil {
		return nil, err
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	name := opts.Name
	if name == "" {
		if name, err = os.Hostname(); err != nil {
			return nil, fmt.Errorf("cluster: node name: %w", err)
		}
	}
	peers := opts.Peers
	if peers == nil {
		if peers, err = NewPeerSource(cfg.Peers, log); err != nil {
			return nil, err
		}
	}

	n := &Node{
		cfg:     cfg,
		name:    name,
		gen:     uint64(time.Now().UnixNano()),
		log:     log.With("component", "cluster", "node", name),
		applier: opts.Applier,
		peers:   peers,
		dropOut: opts.dropOut,
		local:   newLocalLoads(),
		kick:    make(chan struct{}, 1),
		now:     make(chan struct{}, 1),
		book:    newLoadBook(),
		intern:  map[string]string{},
		rejoin:  make(chan struct{}, 1),
		members: map[string]*memberlist.Node{},
	}

	mc := memberlist.DefaultLANConfig()
	mc.Name = name
	host, port, _ := net.SplitHostPort(cfg.Bind) // validated
	mc.BindAddr = host
	mc.BindPort, _ = strconv.Atoi(port)
	mc.AdvertisePort = mc.BindPort
	if adv != "" {
		h, p, _ := net.SplitHostPort(adv)
		mc.AdvertiseAddr = h
		mc.AdvertisePort, _ = strconv.Atoi(p)
	}
	mc.SecretKey = key
	mc.GossipVerifyIncoming, mc.GossipVerifyOutgoing = true, true
	mc.Label = "llm-ring"
	// No LZW: our pushes are small and mostly random hashes (nothing to
	// compress), and compressing each packet was 70 % of the cost of
	// sending it (profiled live: a 64 KiB table cleared per packet), on
	// the request path when a release is flushed.
	mc.EnableCompression = false
	mc.Delegate = delegate{n}
	mc.Events = events{n}
	mc.LogOutput = logWriter{n.log}
	mc.TCPTimeout = min(max(cfg.SyncInterval.D(), time.Second), 10*time.Second)
	// A restarted pod may come back under its name with a new address.
	mc.DeadNodeReclaimTime = 30 * time.Second
	if opts.tune != nil {
		opts.tune(mc)
	}
	n.m = newMetrics(opts.Registerer, n)
	ml, err := memberlist.Create(mc)
	if err != nil {
		return nil, fmt.Errorf("cluster.bind: %w", err)
	}
	n.ml = ml
	n.addr = ml.LocalNode().Address()
	return n, nil
}

// Crash shuts memberlist down without leaving, as a killed process does
// (for tests of losing an instance): peers find out through memberlist's
// failure detector, and drop this instance's loads then. Run returns
// without leaving once its context ends.
func (n *Node) Crash() {
	n.crashed.Store(true)
	_ = n.ml.Shutdown()
}

// Name is this instance's name among its peers.
func (n *Node) Name() string { return n.name }

// Addr is the address peers reach this instance at (host:port).
func (n *Node) Addr() string { return n.addr }

// Run joins the peers the PeerSource publishes (again whenever the set
// changes, and every sync interval while some are not members), pushes
// batched changes and sends load snapshots, until ctx is done. Then it
// leaves the cluster (peers drop its loads at once) and shuts memberlist
// down. It returns the PeerSource's error, if any.
func (n *Node) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var srcErr error
	wg.Go(func() {
		srcErr = n.peers.Run(ctx, func(addrs []string) {
			n.knownMu.Lock()
			n.known = slices.Clone(addrs)
			n.knownMu.Unlock()
			signal(n.rejoin)
		})
		if srcErr != nil {
			n.log.Error("cluster_peer_source_failed", "err", srcErr)
		}
	})
	wg.Go(func() { n.pushLoop(ctx) })
	wg.Go(func() { n.syncLoop(ctx) })
	wg.Go(func() { n.joinLoop(ctx) })
	<-ctx.Done()
	wg.Wait()
	if n.crashed.Load() {
		return srcErr // memberlist panics on Leave after Shutdown
	}
	if err := n.ml.Leave(leaveTimeout); err != nil {
		n.log.Debug("cluster_leave", "err", err)
	}
	if err := n.ml.Shutdown(); err != nil {
		n.log.Debug("cluster_shutdown", "err", err)
	}
	return srcErr
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// PublishPlacement enqueues a local placement-memory update for the next
// push. It never blocks; when the queue is full the update is dropped (and
// counted).
func (n *Node) PublishPlacement(p Placement) {
	if n.enqueue(KindPlacement, func() { n.outP = append(n.outP, p) }) {
		signal(n.now) // a placement is learned when an answer ends: see pushLoop
	}
}

// enqueue runs add under n.mu unless the queue is full, in which case the
// update is dropped and counted under kind; it reports whether it ran.
func (n *Node) enqueue(kind Kind, add func()) bool {
	n.mu.Lock()
	full := n.queuedLocked() >= maxQueued
	if !full {
		add()
	}
	n.mu.Unlock()
	if full {
		n.m.dropped.WithLabelValues(kind.String(), dropQueueFull).Inc()
	}
	return !full
}

// PublishTurn enqueues a turn routed or failed and pushes at once, with
// everything pending (the routed turn's load and prefix insert among it).
// It never blocks; when the queue is full the turn is dropped (and
// counted).
//
// Why routed turns do not wait for the flush interval either (issue #13,
// measured live, 30 runs each, no think time): batched, a request that
// started on one instance was invisible to the others for 5 ms plus a
// hop, and two instances could both send work to a replica they saw
// idle; three routers' p95 was 22 % above one router's (126 vs 103 ms)
// and their hit rate 1.1 points below. Pushed at once: 12 % and none
// (121 vs 109 ms; 96.5 vs 96.0 %). A push is one UDP send per peer,
// uncompressed (BenchmarkPushDelivery).
func (n *Node) PublishTurn(t Turn) {
	if n.enqueue(KindTurn, func() { n.outT = append(n.outT, t) }) {
		signal(n.now)
	}
}

// queuedLocked is the number of queued updates; n.mu is held.
func (n *Node) queuedLocked() int { return len(n.outP) + len(n.outT) + len(n.outX) }

// PublishPrefix enqueues a local prefix-index insert or eviction; chains
// longer than a packet holds are split. It never blocks; when the queue is
// full the update is dropped (and counted). u.Hashes is copied.
func (n *Node) PublishPrefix(u PrefixUpdate) {
	if len(u.Hashes) == 0 || u.Replica == "" {
		return
	}
	n.mu.Lock()
	full := false
	for h := u.Hashes; len(h) > 0; {
		if n.queuedLocked() >= maxQueued {
			full = true
			break
		}
		k := min(len(h), maxPrefixHashes)
		part := u
		part.Hashes = slices.Clone(h[:k])
		n.outX = append(n.outX, part)
		if u.Op == PrefixLost {
			u.Op = PrefixInsert // the rest of the chain only adds to the first part
		}
		h = h[k:]
	}
	n.mu.Unlock()
	if full {
		n.m.dropped.WithLabelValues(KindPrefix.String(), dropQueueFull).Inc()
	}
	if u.Op == PrefixLost {
		signal(n.now) // learned when an answer ends, like a placement
	} else {
		signal(n.kick)
	}
}

// AddLoad records a change of THIS instance's in-flight load on replica
// (+1 request and its tokens when a request starts, the negation when it
// ends). It never blocks. An increase reaches peers within about the flush
// interval; a decrease (a request ended) is pushed at once, with everything
// else pending (see pushLoop).
func (n *Node) AddLoad(replica string, dRequests, dTokens int64) {
	if dRequests == 0 && dTokens == 0 {
		return
	}
	n.mu.Lock()
	first := n.local.add(replica, dRequests, dTokens)
	n.mu.Unlock()
	switch {
	case dRequests < 0:
		signal(n.now)
	case first:
		signal(n.kick)
	}
}

// RemoteLoad returns the sum of the alive peers' last-known in-flight load
// on replica (not including this instance's own). It does not allocate.
func (n *Node) RemoteLoad(replica string) (requests, tokens int64) {
	n.bookMu.RLock()
	l := n.book.sum[replica]
	n.bookMu.RUnlock()
	return l.Requests, l.Tokens
}

// PeerLoads clears dst and fills it with the peers' summed load per
// replica (replicas with no peer load are absent).
func (n *Node) PeerLoads(dst map[string]Load) {
	clear(dst)
	n.bookMu.RLock()
	for r, l := range n.book.sum {
		dst[r] = l
	}
	n.bookMu.RUnlock()
}

// Status reports the membership as this instance sees it.
func (n *Node) Status() Status {
	addrs := map[string]string{}
	for _, m := range n.targets() {
		addrs[m.Name] = m.Address()
	}
	s := Status{Name: n.name, Addr: n.Addr(), Isolated: len(addrs) == 0}
	n.bookMu.RLock()
	for _, name := range n.book.peerNames() {
		p := n.book.peers[name]
		s.Peers = append(s.Peers, PeerStatus{Name: name, Addr: addrs[name], Alive: p.alive, LastHeard: p.lastHeard})
	}
	n.bookMu.RUnlock()
	return s
}

func (n *Node) alivePeers() int {
	n.membersMu.RLock()
	defer n.membersMu.RUnlock()
	return len(n.members)
}

// maxStaleness is the age of the oldest last-heard load message among alive
// peers; a peer never heard from counts from when it joined.
func (n *Node) maxStaleness() time.Duration {
	now := time.Now()
	var worst time.Duration
	n.bookMu.RLock()
	defer n.bookMu.RUnlock()
	for _, p := range n.book.peers {
		if p.alive && !p.lastHeard.IsZero() {
			worst = max(worst, now.Sub(p.lastHeard))
		}
	}
	return worst
}

// targets returns the alive peers (not this node), sorted by name. The
// nodes are the node's own copies: never modified after an event stores them.
func (n *Node) targets() []*memberlist.Node {
	n.membersMu.RLock()
	out := make([]*memberlist.Node, 0, len(n.members))
	for _, m := range n.members {
		out = append(out, m)
	}
	n.membersMu.RUnlock()
	slices.SortFunc(out, func(a, b *memberlist.Node) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// setMember stores a copy of m (called under memberlist's lock).
func (n *Node) setMember(m *memberlist.Node, alive bool) {
	n.membersMu.Lock()
	defer n.membersMu.Unlock()
	if !alive {
		delete(n.members, m.Name)
		return
	}
	n.members[m.Name] = &memberlist.Node{Name: m.Name, Addr: slices.Clone(m.Addr), Port: m.Port}
}

// pushLoop waits for a change, lets changes accumulate for the flush
// interval, then pushes them all; a turn (routed or failed) and a release
// (a load decrease, a placement, a lost cache) are pushed at once, with
// whatever else is pending.
//
// Why releases do not wait (issue #13, measured live): the router releases a
// request when the replica's answer ends, just before its last bytes reach
// the client, and a client with no think time sends its next turn at once —
// possibly to another instance. Batched for 5 ms, that turn found the
// previous one still in flight there and no placement yet, and was
// redirected away from its cache. Increases may wait: a request that starts
// is seen by peers a flush interval late, which only matters for arrivals
// within that window.
func (n *Node) pushLoop(ctx context.Context) {
	t := time.NewTimer(0)
	<-t.C
	for {
		select {
		case <-ctx.Done():
			return
		case <-n.now:
			n.push()
			continue
		case <-n.kick:
		}
		t.Reset(n.cfg.FlushInterval.D())
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		case <-n.now:
			t.Stop()
		}
		n.push()
	}
}

// Flush pushes every pending change now, on the caller's goroutine (a few
// UDP sends per peer; it does not wait for an answer). The router calls it
// when it releases a request, before the answer's last bytes reach the
// client, so that the client's next turn, wherever it is sent, finds the
// release applied (see pushLoop). It is safe for concurrent use with the
// push loop: loads travel as absolute values under increasing Seqs, and a
// push that overtakes another only makes the other's entries stale.
func (n *Node) Flush() { n.push() }

// push sends every pending change as UDP packets to every alive peer.
func (n *Node) push() {
	n.mu.Lock()
	seq, loads := n.local.takeDirty()
	ps, ts, xs := n.outP, n.outT, n.outX
	n.outP, n.outT, n.outX = nil, nil, nil
	n.mu.Unlock()

	var pkts [][]byte
	var kinds []Kind
	add := func(b []byte, k Kind) { pkts, kinds = append(pkts, b), append(kinds, k) }

	if len(loads) > 0 {
		start := func() []byte { return appendLoadHeader(make([]byte, 0, maxPacket), false, n.name, n.gen, seq) }
		b := start()
		hdr := len(b)
		for _, e := range loads {
			before := len(b)
			b = appendLoadEntry(b, e)
			if len(b) > maxPacket && before > hdr {
				add(b[:before], KindLoadDelta)
				b = appendLoadEntry(start(), e)
			}
		}
		add(b, KindLoadDelta)
	}
	// Turns before placements: a turn routed and answered within one batch
	// is announced, then answered (which forgets it), in that order.
	packItems(ts, KindTurn, turnAt, appendTurn, add)
	packItems(ps, KindPlacement, placementAt, appendPlacement, add)
	packItems(xs, KindPrefix, prefixAt, appendPrefix, add)
	if len(pkts) == 0 {
		return
	}
	to := n.targets()
	for i, pkt := range pkts {
		k := kinds[i].String()
		if len(to) == 0 {
			n.m.dropped.WithLabelValues(k, dropNoPeer).Inc()
			continue
		}
		if n.dropOut != nil && n.dropOut(kinds[i]) {
			n.m.dropped.WithLabelValues(k, dropTestHook).Add(float64(len(to)))
			continue
		}
		for _, t := range to {
			if err := n.ml.SendBestEffort(t, pkt); err != nil {
				n.m.dropped.WithLabelValues(k, dropSendError).Inc()
				n.log.Debug("cluster_push_failed", "peer", t.Name, "err", err)
				continue
			}
			n.m.sent.WithLabelValues(k).Inc()
			n.m.bytesSent.WithLabelValues(k).Add(float64(len(pkt)))
		}
	}
}

// packItems encodes items into as few packets of at most maxPacket bytes as
// they fit, each with its own base time.
func packItems[T any](items []T, kind Kind, at func(T) int64, appendItem func([]byte, int64, T) []byte, add func([]byte, Kind)) {
	if len(items) == 0 {
		return
	}
	var b []byte
	var base int64
	var hdr int
	start := func(it T) {
		base = max(at(it), 0)
		b = binary.AppendUvarint(appendHeader(make([]byte, 0, maxPacket), kind), uint64(base))
		hdr = len(b)
	}
	start(items[0])
	for _, it := range items {
		before := len(b)
		b = appendItem(b, base, it)
		if len(b) > maxPacket && before > hdr {
			add(b[:before], kind)
			start(it)
			b = appendItem(b, base, it)
		}
	}
	add(b, kind)
}

// syncLoop sends the full load snapshot to every alive peer each sync
// interval, and forgets long-gone peers.
func (n *Node) syncLoop(ctx context.Context) {
	t := time.NewTicker(n.cfg.SyncInterval.D())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n.sendSnapshots()
		n.bookMu.Lock()
		n.book.prune(time.Now(), forgetPeer)
		n.bookMu.Unlock()
	}
}

// snapshot encodes this instance's full load view under a new Seq.
func (n *Node) snapshot() []byte {
	n.mu.Lock()
	seq, entries := n.local.snapshot()
	n.mu.Unlock()
	b := appendLoadHeader(nil, true, n.name, n.gen, seq)
	for _, e := range entries {
		b = appendLoadEntry(b, e)
	}
	if len(b) > maxMessage {
		n.m.dropped.WithLabelValues(KindLoadSnapshot.String(), dropOversized).Inc()
		n.log.Error("cluster_snapshot_oversized", "bytes", len(b), "replicas", len(entries))
		return nil
	}
	return b
}

func (n *Node) sendSnapshots() {
	to := n.targets()
	if len(to) == 0 {
		return
	}
	b := n.snapshot()
	if b == nil {
		return
	}
	k := KindLoadSnapshot.String()
	for _, t := range to {
		if n.dropOut != nil && n.dropOut(KindLoadSnapshot) {
			n.m.dropped.WithLabelValues(k, dropTestHook).Inc()
			continue
		}
		if err := n.ml.SendReliable(t, b); err != nil {
			n.m.dropped.WithLabelValues(k, dropSendError).Inc()
			n.log.Debug("cluster_snapshot_failed", "peer", t.Name, "err", err)
			continue
		}
		n.m.sent.WithLabelValues(k).Inc()
		n.m.bytesSent.WithLabelValues(k).Add(float64(len(b)))
	}
}

// joinLoop joins the published peers that are not members, when the set
// changes and every sync interval, and logs when the node becomes or stops
// being isolated.
func (n *Node) joinLoop(ctx context.Context) {
	t := time.NewTicker(n.cfg.SyncInterval.D())
	defer t.Stop()
	wasIsolated := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-n.rejoin:
		case <-t.C:
		}
		n.join(ctx)
		iso := n.alivePeers() == 0
		n.knownMu.Lock()
		expected := len(n.known) > 0
		n.knownMu.Unlock()
		switch {
		case iso && !wasIsolated && expected:
			n.log.Warn("cluster_isolated", "msg", "no peer reachable; routing on this instance's view alone")
		case !iso && wasIsolated:
			n.log.Info("cluster_joined", "peers", n.alivePeers())
		}
		wasIsolated = iso && expected
	}
}

// join asks memberlist to join every published address that is neither
// this node nor an alive member. Names are resolved so that a host name and
// the member's IP compare equal.
func (n *Node) join(ctx context.Context) {
	n.knownMu.Lock()
	known := n.known
	n.knownMu.Unlock()
	if len(known) == 0 {
		return
	}
	have := map[string]bool{n.Addr(): true}
	for _, m := range n.targets() {
		have[m.Address()] = true
	}
	var missing []string
	for _, a := range known {
		if !have[a] && !have[resolve(ctx, a)] {
			missing = append(missing, a)
		}
	}
	if len(missing) == 0 {
		return
	}
	joined, err := n.ml.Join(missing)
	n.log.Debug("cluster_join", "addrs", missing, "joined", joined, "err", err)
}

// resolve maps host:port to ip:port (first address), or returns a as is.
func resolve(ctx context.Context, a string) string {
	host, port, err := net.SplitHostPort(a)
	if err != nil || net.ParseIP(host) != nil {
		return a
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	ips, err := net.DefaultResolver.LookupHost(ctx, host)
	if err != nil || len(ips) == 0 {
		return a
	}
	return net.JoinHostPort(ips[0], port)
}

// internName returns a shared string equal to b, so that decoding a known
// name allocates nothing. The table is bounded.
func (n *Node) internName(b []byte) string {
	n.internMu.RLock()
	s, ok := n.intern[string(b)]
	n.internMu.RUnlock()
	if ok {
		return s
	}
	s = string(b)
	n.internMu.Lock()
	if len(n.intern) < maxInterned {
		n.intern[s] = s
	}
	n.internMu.Unlock()
	return s
}

// receive decodes and applies one message from a peer.
func (n *Node) receive(b []byte, fromState bool) {
	msg, err := decode(b, n.internName)
	if err != nil {
		n.m.decodeErrors.Inc()
		n.log.Debug("cluster_decode_error", "err", err, "bytes", len(b))
		return
	}
	k := msg.Kind.String()
	if fromState && msg.Kind != KindLoadSnapshot {
		n.m.dropped.WithLabelValues(k, dropWrongKind).Inc()
		return
	}
	n.m.received.WithLabelValues(k).Inc()
	n.m.bytesRecv.WithLabelValues(k).Add(float64(len(b)))
	switch msg.Kind {
	case KindPlacement:
		if n.applier != nil {
			for _, p := range msg.Placements {
				n.applier.ApplyPlacement(p)
			}
		}
	case KindTurn:
		if n.applier != nil {
			for _, t := range msg.Turns {
				n.applier.ApplyTurn(t)
			}
		}
	case KindPrefix:
		if n.applier != nil {
			for _, u := range msg.Prefixes {
				n.applier.ApplyPrefix(u)
			}
		}
	case KindLoadDelta, KindLoadSnapshot:
		if msg.Load.Origin == n.name {
			return
		}
		n.bookMu.Lock()
		res := n.book.apply(msg.Load, time.Now())
		n.bookMu.Unlock()
		switch {
		case res.unknownPeer:
			n.m.dropped.WithLabelValues(k, dropUnknown).Inc()
		case res.oldGen:
			n.m.dropped.WithLabelValues(k, dropOldGen).Inc()
		case res.stale > 0:
			n.m.dropped.WithLabelValues(k, dropStale).Add(float64(res.stale))
		}
	}
}

// delegate is memberlist's view of the node (kept off Node's API).
type delegate struct{ n *Node }

func (delegate) NodeMeta(int) []byte { return nil }

// NotifyMsg receives a push (UDP) or a snapshot (TCP). b is not retained:
// decode copies what it keeps.
func (d delegate) NotifyMsg(b []byte) { d.n.receive(b, false) }

// GetBroadcasts returns nothing: pushes go out through push, not memberlist's
// gossip queue (docs/cluster.md).
func (delegate) GetBroadcasts(int, int) [][]byte { return nil }

// LocalState hands memberlist our load snapshot for its join and periodic
// push-pull exchanges: a joining peer learns our loads at once.
func (d delegate) LocalState(bool) []byte { return d.n.snapshot() }

func (d delegate) MergeRemoteState(b []byte, _ bool) {
	if len(b) > 0 {
		d.n.receive(b, true)
	}
}

// events follows membership: joins enable a peer's loads, leaves and
// failures drop them at once.
type events struct{ n *Node }

func (e events) NotifyJoin(m *memberlist.Node) {
	if m.Name == e.n.name {
		return
	}
	e.n.setMember(m, true)
	e.n.bookMu.Lock()
	e.n.book.join(m.Name)
	e.n.bookMu.Unlock()
	e.n.log.Info("cluster_peer_joined", "peer", m.Name, "addr", m.Address())
}

func (e events) NotifyLeave(m *memberlist.Node) {
	if m.Name == e.n.name {
		return
	}
	e.n.setMember(m, false)
	e.n.bookMu.Lock()
	e.n.book.leave(m.Name, time.Now())
	e.n.bookMu.Unlock()
	e.n.log.Info("cluster_peer_left", "peer", m.Name, "addr", m.Address())
}

// NotifyUpdate keeps the peer's address current.
func (e events) NotifyUpdate(m *memberlist.Node) {
	if m.Name != e.n.name {
		e.n.setMember(m, true)
	}
}

// ErrNotGossip is returned by New for a configuration whose mode is not
// gossip.
var ErrNotGossip = errors.New("cluster mode is not gossip")

// logWriter turns memberlist's log lines ("[WARN] memberlist: ...") into
// slog records at the matching level.
type logWriter struct{ log *slog.Logger }

func (w logWriter) Write(p []byte) (int, error) {
	line := bytes.TrimSpace(p)
	level := slog.LevelInfo
	for _, l := range []struct {
		tag   string
		level slog.Level
	}{{"[DEBUG]", slog.LevelDebug}, {"[INFO]", slog.LevelInfo}, {"[WARN]", slog.LevelWarn}, {"[ERR]", slog.LevelError}} {
		if i := bytes.Index(line, []byte(l.tag)); i >= 0 {
			level = l.level
			line = bytes.TrimSpace(line[i+len(l.tag):])
			break
		}
	}
	w.log.Log(context.Background(), level, "memberlist", "line", string(line))
	return len(p), nil
}
