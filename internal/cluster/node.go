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
	"context"
	"fmt"
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

	"github.com/llm-ring/llm-ring/internal/config"
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

// Node is one router instance's membership in the cluster.
//
// Locking: every exported method is safe for concurrent use. A Node holds
// three mutexes, each guarding its own fields and never held while another
// is taken, while a callback runs (the Applier, the PeerSource's update, a
// log handler) or while a packet is sent:
//   - mu guards the outgoing side: local (this instance's loads) and the
//     queues outP, outT, outX. Publish and AddLoad take it briefly to
//     enqueue; the push loop takes it to drain the queues.
//   - bookMu guards book, the peers' loads: read-locked by RemoteLoad on
//     every pick, write-locked by received load messages and membership
//     events.
//   - peersMu guards what membership knows: known (the PeerSource's
//     addresses) and members (copies of the alive peers' nodes).
//
// The name interner has a lock of its own (interner). memberlist calls the
// delegate and the event handlers from its goroutines, the events under its
// own lock: they take only the Node's locks above, which call nothing.
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

	mu    sync.Mutex
	local *localLoads
	outP  []Placement
	outT  []Turn
	outX  []PrefixUpdate
	kick  chan struct{} // a push is pending
	now   chan struct{} // a push is pending that must not wait (a release)

	bookMu sync.RWMutex
	book   *loadBook

	intern interner

	// members are copies of the alive peers, kept from membership events.
	// (memberlist's Members returns pointers into state it keeps mutating,
	// which the race detector rightly flags; events run under its lock.)
	peersMu sync.RWMutex
	known   []string // peer addresses from the PeerSource
	members map[string]*memberlist.Node
	rejoin  chan struct{}

	crashed atomic.Bool // tests: memberlist shut down without leaving
	addr    string      // set by New, read-only after
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
	key, err := nodeKey(&opts)
	if err != nil {
		return nil, err
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
		rejoin:  make(chan struct{}, 1),
		members: map[string]*memberlist.Node{},
	}
	mc := n.memberlistConfig(key, adv)
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

// nodeKey returns the gossip key: the options', or the secret file's.
func nodeKey(opts *Options) ([]byte, error) {
	key := opts.Key
	if key == nil {
		k, err := ReadKey(opts.Config.SecretFile)
		if err != nil {
			return nil, err
		}
		key = k
	}
	if !keyLen(len(key)) {
		return nil, fmt.Errorf("cluster.secret_file: key of %d bytes; want 16, 24 or 32", len(key))
	}
	return key, nil
}

// memberlistConfig is memberlist's configuration for the node: its bind
// and advertised addresses (adv: host:port, or "" for the bind address),
// the key, and the node as delegate and event handler.
func (n *Node) memberlistConfig(key []byte, adv string) *memberlist.Config {
	cfg := &n.cfg
	mc := memberlist.DefaultLANConfig()
	mc.Name = n.name
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
	return mc
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
			n.peersMu.Lock()
			n.known = slices.Clone(addrs)
			n.peersMu.Unlock()
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
	n.peersMu.RLock()
	defer n.peersMu.RUnlock()
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
	n.peersMu.RLock()
	out := make([]*memberlist.Node, 0, len(n.members))
	for _, m := range n.members {
		out = append(out, m)
	}
	n.peersMu.RUnlock()
	slices.SortFunc(out, func(a, b *memberlist.Node) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// setMember stores a copy of m (called under memberlist's lock).
func (n *Node) setMember(m *memberlist.Node, alive bool) {
	n.peersMu.Lock()
	defer n.peersMu.Unlock()
	if !alive {
		delete(n.members, m.Name)
		return
	}
	n.members[m.Name] = &memberlist.Node{Name: m.Name, Addr: slices.Clone(m.Addr), Port: m.Port}
}
