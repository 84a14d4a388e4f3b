package sim

import (
	"slices"
	"time"

	"github.com/llm-ring/llm-ring/internal/policy"
	"github.com/llm-ring/llm-ring/internal/state"
)

// Several router instances (issue #13). Spec.Routers instances each keep
// their own routing table (their own view: load, placement memory, prefix
// index, replica reports). Each request goes to instance
// hash(conversation, turn) mod N, as a load balancer without affinity
// spreads a conversation's turns. With Spec.Gossip, every table is connected
// to the others through state.Peers — the same hooks the live router's
// gossip uses — and what one publishes reaches the others GossipDelay later
// (in publish order, with no loss: the sweep measures staleness, not loss).
// Without gossip, each instance sees only its own traffic.
//
// With Spec.GossipBatch, as the live node does: an instance holds load
// increases and prefix inserts for GossipBatch before sending them (its
// flush_interval), and a turn (routed or failed) or a release (a load
// decrease, a placement, a lost cache) goes at once, with everything the
// instance still holds — the live router publishes a request's turn right
// after its load and prefix insert, and flushes when it releases a request,
// before the client has the answer's end. So a request's start and its
// release both arrive GossipDelay later; only changes published on their
// own wait up to GossipBatch more (the model takes the whole window: the
// live batch starts at its first change).

// gossipMsg is one published change on its way to the other instances.
type gossipMsg struct {
	from      int32
	placement *state.PlacementUpdate
	turn      *state.TurnUpdate
	prefix    *state.PrefixUpdate
	replica   string // load delta
	req, tok  int64
	due       time.Duration // when the others receive it
}

// release tells whether m is sent at once (see GossipBatch above): a turn
// or a release.
func (m *gossipMsg) release() bool {
	switch {
	case m.placement != nil, m.turn != nil:
		return true
	case m.prefix != nil:
		return m.prefix.Lost
	}
	return m.req < 0
}

// simPeers is instance i's connection to the others.
type simPeers struct {
	s *sim
	i int32
}

var _ state.Peers = simPeers{}

func (p simPeers) PublishPlacement(u state.PlacementUpdate) {
	p.s.publish(gossipMsg{from: p.i, placement: &u})
}

func (p simPeers) PublishTurn(u state.TurnUpdate) {
	p.s.publish(gossipMsg{from: p.i, turn: &u})
}

func (p simPeers) PublishPrefix(u state.PrefixUpdate) {
	u.Blocks = slices.Clone(u.Blocks) // the caller's hasher keeps writing
	p.s.publish(gossipMsg{from: p.i, prefix: &u})
}

func (p simPeers) AddLoad(replica string, req, tok int64) {
	p.s.publish(gossipMsg{from: p.i, replica: replica, req: req, tok: tok})
}

// RemoteLoad is the other instances' load on replica as delivered to i: the
// sum of their deltas, each GossipDelay old.
func (p simPeers) RemoteLoad(replica string) (req, tok int64) {
	l := p.s.remote[p.i][replica]
	return l.Requests, l.Tokens
}

// newRouters makes the spec's router instances (at least one) from the
// table configuration and the policy, connected when the spec gossips.
func (s *sim) newRouters(scfg state.Config, pol policy.Policy) {
	n := max(s.spec.Routers, 1)
	s.tables = make([]*state.Table, n)
	for i := range s.tables {
		s.tables[i] = state.New(scfg, pol)
	}
	if n > 1 && s.spec.Gossip {
		s.remote = make([]map[string]policy.Load, n)
		s.gossip = make([]gossipQueue, n)
		for i, t := range s.tables {
			s.remote[i] = map[string]policy.Load{}
			t.SetPeers(simPeers{s, int32(i)})
		}
	}
}

// routerOf returns the instance that receives the user's next turn:
// hash(conversation, turn) mod N (a splitmix64 finalizer of the key hash and
// the turn), so a conversation's turns spread over the instances.
func (s *sim) routerOf(us *user) int32 {
	n := uint64(len(s.tables))
	if n == 1 {
		return 0
	}
	x := us.hash + uint64(us.turn+1)*0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	x ^= x >> 31
	return int32(x % n)
}

// gossipQueue is one instance's published messages not yet delivered, in
// publish order (from head); their due times never decrease.
type gossipQueue struct {
	msgs []gossipMsg
	head int
}

// publish queues m for the other instances. Each message gets its own
// delivery event; with the same delay for every message (GossipBatch 0), an
// event delivers exactly its message, so messages arrive in publish order
// across instances too. A release moves the instance's held messages up to
// its own due time and its event delivers them all, in order.
func (s *sim) publish(m gossipMsg) {
	q := &s.gossip[m.from]
	m.due = s.now + s.spec.GossipDelay
	flush := uint32(0)
	if s.spec.GossipBatch > 0 {
		if m.release() {
			for k := q.head; k < len(q.msgs); k++ {
				q.msgs[k].due = min(q.msgs[k].due, m.due)
			}
			flush = 1
		} else {
			m.due += s.spec.GossipBatch
		}
	}
	q.msgs = append(q.msgs, m)
	s.q.push(m.due, evGossip, m.from, flush)
}

// deliver applies instance i's oldest pending message (every due one when
// flush) on every other instance, through the tables' Apply methods, which
// do not publish again. A message already delivered by a flush leaves its
// event nothing, or the next due message.
func (s *sim) deliver(i int32, flush bool) {
	q := &s.gossip[i]
	for q.head < len(q.msgs) && q.msgs[q.head].due <= s.now {
		m := q.msgs[q.head]
		q.msgs[q.head] = gossipMsg{}
		q.head++
		s.apply(&m)
		if !flush {
			break
		}
	}
	if q.head > 1024 && q.head*2 > len(q.msgs) {
		q.msgs = slices.Delete(q.msgs, 0, q.head)
		q.head = 0
	}
}

// apply applies m on every instance but its publisher.
func (s *sim) apply(m *gossipMsg) {
	for j, t := range s.tables {
		if int32(j) == m.from {
			continue
		}
		switch {
		case m.placement != nil:
			t.ApplyPlacement(*m.placement)
		case m.turn != nil:
			t.ApplyTurn(*m.turn)
		case m.prefix != nil:
			t.ApplyPrefix(*m.prefix)
		default:
			l := s.remote[j][m.replica]
			l.Requests += m.req
			l.Tokens += m.tok
			s.remote[j][m.replica] = l
		}
	}
}
