package sim

import (
	"slices"

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

// gossipMsg is one published change on its way to the other instances.
type gossipMsg struct {
	from      int32
	placement *state.PlacementUpdate
	prefix    *state.PrefixUpdate
	replica   string // load delta
	req, tok  int64
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

// publish queues m for the other instances, GossipDelay from now. The delay
// is the same for every message, so the queue (ordered by time, then
// insertion) delivers them in publish order: each evGossip delivers the
// oldest pending message.
func (s *sim) publish(m gossipMsg) {
	s.gossip = append(s.gossip, m)
	s.q.push(s.now+s.spec.GossipDelay, evGossip, 0, 0)
}

// deliver applies the oldest pending message on every instance but its
// publisher (through the tables' Apply methods, which do not publish again).
func (s *sim) deliver() {
	m := s.gossip[s.gossipHead]
	s.gossip[s.gossipHead] = gossipMsg{}
	s.gossipHead++
	if s.gossipHead > 1024 && s.gossipHead*2 > len(s.gossip) {
		s.gossip = slices.Delete(s.gossip, 0, s.gossipHead)
		s.gossipHead = 0
	}
	for j, t := range s.tables {
		if int32(j) == m.from {
			continue
		}
		switch {
		case m.placement != nil:
			t.ApplyPlacement(*m.placement)
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
