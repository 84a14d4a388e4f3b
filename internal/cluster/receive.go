package cluster

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// interner hands out one shared string per name decoded (replica and node
// names), so that decoding a known name allocates nothing. The table is
// bounded by maxInterned. Safe for concurrent use: its own read-write lock
// guards the map, held only inside name.
type interner struct {
	mu    sync.RWMutex
	names map[string]string
}

// name returns a shared string equal to b.
func (in *interner) name(b []byte) string {
	in.mu.RLock()
	s, ok := in.names[string(b)]
	in.mu.RUnlock()
	if ok {
		return s
	}
	s = string(b)
	in.mu.Lock()
	if in.names == nil {
		in.names = map[string]string{}
	}
	if len(in.names) < maxInterned {
		in.names[s] = s
	}
	in.mu.Unlock()
	return s
}

// receive decodes and applies one message from a peer.
func (n *Node) receive(b []byte, fromState bool) {
	msg, err := decode(b, n.intern.name)
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

// delegate is memberlist's view of the node (kept off Node's API). memberlist
// calls it from its packet and push-pull goroutines, under none of its locks;
// receive calls the Applier with no Node lock held.
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
// failures drop them at once. memberlist calls it under its own node lock:
// it takes only Node's peersMu and bookMu (in turn, never both), logs, and
// calls nothing else.
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
