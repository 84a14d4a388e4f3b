package cluster

import "github.com/llm-ring/llm-ring/internal/state"

// The two adapters between a Node and the routing state (state.Table), one
// per direction, so that neither package depends on the other's types:
//
//	n, _ := cluster.New(cluster.Options{Config: cfg, Applier: cluster.TableApplier{Table: t}})
//	t.SetPeers(cluster.TablePeers{Node: n})

// Locking: the adapters hold no state and no lock of their own. The table
// calls TablePeers under its lock; TablePeers takes only the Node's enqueue
// lock (Node.mu, or bookMu read-locked for RemoteLoad), which calls nothing,
// so the two locks are always taken in that order. TableApplier runs on
// memberlist's goroutines with no Node lock held, and takes the table's.

// TablePeers is a Node seen by the routing state: state.Peers. Model names
// the pool of the table it serves (issue 23; "" the catch-all pool, the
// whole router without models): its updates carry it, so that peers apply
// them to the same model's pool. Loads are per replica, whatever the pool.
type TablePeers struct {
	Node  *Node
	Model string
}

var _ state.Peers = TablePeers{}

// PublishPlacement implements state.Peers.
func (p TablePeers) PublishPlacement(u state.PlacementUpdate) {
	p.Node.PublishPlacement(Placement{Model: p.Model, PlacementUpdate: u})
}

// PublishTurn implements state.Peers.
func (p TablePeers) PublishTurn(u state.TurnUpdate) {
	p.Node.PublishTurn(Turn{Model: p.Model, TurnUpdate: u})
}

// PublishPrefix implements state.Peers (PublishPrefix copies the blocks).
func (p TablePeers) PublishPrefix(u state.PrefixUpdate) {
	op := PrefixInsert
	if u.Lost {
		op = PrefixLost
	}
	p.Node.PublishPrefix(PrefixUpdate{Model: p.Model, Replica: u.Replica, Op: op, Hashes: u.Blocks, At: u.At})
}

// AddLoad implements state.Peers.
func (p TablePeers) AddLoad(replica string, requests, tokens int64) {
	p.Node.AddLoad(replica, requests, tokens)
}

// RemoteLoad implements state.Peers; it does not allocate.
func (p TablePeers) RemoteLoad(replica string) (requests, tokens int64) {
	return p.Node.RemoteLoad(replica)
}

// TableApplier feeds what peers publish into a routing table: Applier.
type TableApplier struct{ Table *state.Table }

var _ Applier = TableApplier{}

// ApplyPlacement implements Applier.
func (a TableApplier) ApplyPlacement(p Placement) {
	a.Table.ApplyPlacement(p.PlacementUpdate)
}

// ApplyTurn implements Applier.
func (a TableApplier) ApplyTurn(t Turn) {
	a.Table.ApplyTurn(t.TurnUpdate)
}

// ApplyPrefix implements Applier. An eviction removes nothing the index
// can express per block today (state publishes none): it is ignored.
func (a TableApplier) ApplyPrefix(u PrefixUpdate) {
	switch u.Op {
	case PrefixInsert, PrefixLost:
		a.Table.ApplyPrefix(state.PrefixUpdate{Replica: u.Replica, Lost: u.Op == PrefixLost, Blocks: u.Hashes, At: u.At})
	}
}
