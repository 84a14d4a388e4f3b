package sim

import (
	"errors"

	"github.com/llm-ring/llm-ring/internal/model"
	"github.com/llm-ring/llm-ring/internal/state"
	"github.com/llm-ring/llm-ring/internal/wire"
)

// ticketNone is the ticket of a request that reached no replica.
var ticketNone = state.Ticket{}

// route routes the user's request (its prompt written by send) and submits
// it to the picked replica.
func (s *sim) route(u int32) error {
	us := &s.users[u]
	c := &us.conv
	turn := &c.Turns[us.turn]
	prompt := model.AppendGenerationPrompt(us.toks)
	in := state.Input{Key: us.in.Key, Hash: us.hash, Chars: us.in.Chars, OutputTokens: turn.MaxTokens,
		Blocks: us.in.Blocks, FirstUser: us.in.FirstUser}
	us.router = s.routerOf(us)
	tab := s.tables[us.router]
	if s.set != nil { // the pool of the request's model (pools.go)
		t, adapter, err := s.poolRoute(us)
		if err != nil {
			us.replica, us.reason, us.ticket = -1, "", state.Ticket{}
			return s.fail(u, 404, err.Error())
		}
		tab, us.tab, us.adapter, in.Adapter = t, t, adapter, adapter
	}
	tk, d, err := tab.Route(in, int64(s.now))
	if err != nil {
		if !errors.Is(err, state.ErrNoReplica) {
			return err
		}
		us.replica, us.reason, us.ticket = -1, "", state.Ticket{}
		return s.fail(u, 503, wire.ErrTextNoReplica)
	}
	r := s.replicaIndex(&tk)
	us.ticket, us.reason, us.replica = tk, d.Reason, r
	ref := &s.reps[r]
	us.load = s.needsLoad(r, us.adapter)
	id, err := s.groups[ref.group].Submit(s.now, int(ref.member), model.Request{Tokens: prompt, NPredict: turn.MaxTokens, Adapter: us.adapter})
	s.changes[ref.group]++
	if err != nil {
		// The replica refuses it (llama.cpp answers 400, e.g. a prompt over
		// the slot's context): the router releases the load, nothing is
		// learned.
		s.tableOf(us).Release(&us.ticket, state.Outcome{}, int64(s.now))
		s.reschedule(ref.group)
		return s.fail(u, 400, err.Error())
	}
	s.flights[r] = append(s.flights[r], flight{id, u})
	s.admRouted(u) // admission's work ledger (admit.go)
	s.reschedule(ref.group)
	return nil
}

// fail records the user's request as failed with status and text, and ends
// the conversation: without an answer, its next turn cannot be written.
func (s *sim) fail(u int32, status int, text string) error {
	s.admEnded(u) // admission's work ledger (admit.go)
	us := &s.users[u]
	s.res.Failed++
	s.count(us, status)
	if err := s.writeRow(us, status, errorText(status, text), nil, s.now); err != nil {
		return err
	}
	s.startConversation(u, us.convIdx+s.prof.Concurrency, s.now)
	return nil
}
