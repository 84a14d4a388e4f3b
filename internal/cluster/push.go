package cluster

import (
	"context"
	"encoding/binary"
	"net"
	"slices"
	"time"
)

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
	packByModel(n, ts, KindTurn, turnModel, turnAt, appendTurn, add)
	packByModel(n, ps, KindPlacement, placementModel, placementAt, appendPlacement, add)
	packByModel(n, xs, KindPrefix, prefixModel, prefixAt, appendPrefix, add)
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

// packByModel packs items per pool (issue 23), the pools in the order of
// their first item, each pool's items in their order; an item whose model
// name is longer than a name may be is dropped (and counted).
func packByModel[T any](n *Node, items []T, kind Kind, model func(T) string, at func(T) int64,
	appendItem func([]byte, int64, T) []byte, add func([]byte, Kind)) {
	var models []string
	for _, it := range items {
		if m := model(it); !slices.Contains(models, m) {
			models = append(models, m)
		}
	}
	if len(models) == 1 && len(models[0]) <= maxName {
		packItems(items, kind, models[0], at, appendItem, add)
		return
	}
	for _, m := range models {
		var group []T
		for _, it := range items {
			if model(it) == m {
				group = append(group, it)
			}
		}
		if len(m) > maxName {
			n.m.dropped.WithLabelValues(kind.String(), dropOversized).Add(float64(len(group)))
			continue
		}
		packItems(group, kind, m, at, appendItem, add)
	}
}

// packItems encodes items of model's pool into as few packets of at most
// maxPacket bytes as they fit, each with its own base time.
func packItems[T any](items []T, kind Kind, model string, at func(T) int64, appendItem func([]byte, int64, T) []byte, add func([]byte, Kind)) {
	if len(items) == 0 {
		return
	}
	var b []byte
	var base int64
	var hdr int
	start := func(it T) {
		base = max(at(it), 0)
		b = binary.AppendUvarint(appendItemsHeader(make([]byte, 0, maxPacket), kind, model), uint64(base))
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
		n.peersMu.Lock()
		expected := len(n.known) > 0
		n.peersMu.Unlock()
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
	n.peersMu.Lock()
	known := n.known
	n.peersMu.Unlock()
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
