package model

import (
	"fmt"
	"time"
)

// Group is several servers on one time line. With a shared CPU (processor
// sharing), a step's work progresses at rate 1/k while k servers of the group
// are busy, so each one's steps take k× longer: replicas of one process
// share one compute budget, as the study's three replicas shared one laptop
// CPU. Without sharing, every server has a CPU of its own and the group only
// puts them on one clock.
//
// Time is model time since an arbitrary origin. A Group is not safe for
// concurrent use. NextEvent looks at every server, so a Group is meant for a
// few servers (those of one process); a simulator of many independent
// replicas uses one Replica each.
type Group struct {
	shared  bool
	clk     timebase
	servers []*Server
	now     time.Duration
	pending []Event // events made due by Submit, returned by the next Advance
}

// NewGroup returns a group of servers, one per configuration. shared makes
// them share one CPU.
func NewGroup(shared bool, cfgs ...Config) (*Group, error) {
	g := &Group{shared: shared, clk: timebase{k: 1}}
	for _, c := range cfgs {
		if _, err := g.Add(c); err != nil {
			return nil, err
		}
	}
	return g, nil
}

// Add adds an idle server and returns its index.
func (g *Group) Add(cfg Config) (int, error) {
	if err := cfg.Validate(); err != nil {
		return 0, err
	}
	i := len(g.servers)
	g.servers = append(g.servers, newServer(cfg, i, &g.clk))
	return i, nil
}

// Len returns the number of servers.
func (g *Group) Len() int { return len(g.servers) }

// Shared reports whether the servers share one CPU.
func (g *Group) Shared() bool { return g.shared }

// Server returns server i, for inspection.
func (g *Group) Server(i int) *Server { return g.servers[i] }

// Now returns the model time the group was last advanced to.
func (g *Group) Now() time.Duration { return g.now }

// Submit queues req on server i at model time now (not before the last
// Advance or Submit). Events due at or before now, including any this
// submission causes, are returned by the next Advance.
func (g *Group) Submit(now time.Duration, i int, req Request) (ID, error) {
	if i < 0 || i >= len(g.servers) {
		return 0, fmt.Errorf("%w: %d of %d", ErrBadMember, i, len(g.servers))
	}
	g.pending = g.advance(now, g.pending)
	now = g.now // never before the last Advance
	s := g.servers[i]
	if g.shared && !s.busy() {
		g.rebase(now) // the rate may change now
	}
	id, evs, err := s.submit(g.clk.v(now), req, g.pending)
	g.pending = evs
	g.setRate()
	return id, err
}

// Cancel abandons request id of server i at model time now: a queued
// request is dropped; a running one leaves its slot at the next step
// boundary, with an EventDone whose Result has Cancelled set. It reports
// whether the request was still queued or running.
func (g *Group) Cancel(now time.Duration, i int, id ID) bool {
	if i < 0 || i >= len(g.servers) {
		return false
	}
	g.pending = g.advance(now, g.pending)
	evs, ok := g.servers[i].cancel(g.clk.v(g.now), id, g.pending)
	g.pending = evs
	g.setRate()
	return ok
}

// setRate sets the work rate from the number of busy servers.
func (g *Group) setRate() {
	if !g.shared {
		return
	}
	busy := 0
	for _, s := range g.servers {
		if s.busy() {
			busy++
		}
	}
	g.clk.k = time.Duration(max(busy, 1))
}

// NextEvent returns the model time of the next event (or internal step
// boundary): calling Advance with that time makes progress. ok is false
// when every server is idle.
func (g *Group) NextEvent() (t time.Duration, ok bool) {
	if len(g.pending) > 0 {
		return g.now, true
	}
	v, _, ok := g.nextV()
	if !ok {
		return 0, false
	}
	return g.clk.t(v), true
}

// nextV returns the earliest work time of a server's next boundary, and
// that server.
func (g *Group) nextV() (time.Duration, int, bool) {
	best, who, ok := time.Duration(0), -1, false
	for i, s := range g.servers {
		if v, has := s.next(); has && (!ok || v < best) {
			best, who, ok = v, i, true
		}
	}
	return best, who, ok
}

// Advance processes everything up to model time now and appends the
// events to dst, in time order (ties: server index, then slot).
func (g *Group) Advance(now time.Duration, dst []Event) []Event {
	if len(g.pending) > 0 {
		dst = append(dst, g.pending...)
		clear(g.pending)
		g.pending = g.pending[:0]
	}
	dst = g.advance(now, dst)
	for _, s := range g.servers {
		s.sync(g.clk.v(g.now))
	}
	return dst
}

func (g *Group) advance(now time.Duration, dst []Event) []Event {
	if now < g.now {
		now = g.now
	}
	for {
		v, _, ok := g.nextV()
		if !ok || g.clk.t(v) > now {
			break
		}
		t := g.clk.t(v)
		g.rebase(t) // exact: t is on the work-time grid
		for _, s := range g.servers {
			if nv, has := s.next(); has && nv == v {
				dst = s.advance(v, dst)
			}
		}
		g.setRate()
	}
	g.now = now
	return dst
}

// rebase moves the time base to model time t, so that the rate can change
// there. Work time advances by whole nanoseconds, so up to k−1 ns of model
// time may pass without work (a deterministic rounding, never accumulated
// across calls beyond that).
func (g *Group) rebase(t time.Duration) {
	v := g.clk.v(t)
	g.clk.t0, g.clk.v0 = t, v
}

// Replica is one server with a CPU of its own: the unit of the
// discrete-event simulator.
//
//	r, _ := model.New(model.DefaultConfig())
//	id, err := r.Submit(now, model.Request{Tokens: toks, NPredict: 256})
//	t, ok := r.NextEvent()          // schedule a wake-up at t
//	evs = r.Advance(t, evs[:0])     // EventFirstToken, EventDone{Result}
type Replica struct {
	g Group
}

// New returns a replica with the given configuration.
func New(cfg Config) (*Replica, error) {
	r := &Replica{g: Group{clk: timebase{k: 1}}}
	if _, err := r.g.Add(cfg); err != nil {
		return nil, err
	}
	return r, nil
}

// Submit queues req at model time now; see Group.Submit.
func (r *Replica) Submit(now time.Duration, req Request) (ID, error) {
	return r.g.Submit(now, 0, req)
}

// NextEvent returns the time of the next event; see Group.NextEvent.
func (r *Replica) NextEvent() (time.Duration, bool) { return r.g.NextEvent() }

// Advance processes everything up to now; see Group.Advance.
func (r *Replica) Advance(now time.Duration, dst []Event) []Event { return r.g.Advance(now, dst) }

// Cancel abandons a request; see Group.Cancel.
func (r *Replica) Cancel(now time.Duration, id ID) bool { return r.g.Cancel(now, 0, id) }

// Server returns the replica's server, for inspection.
func (r *Replica) Server() *Server { return r.g.servers[0] }
