package sim

import (
	"math"
	"time"

	"github.com/llm-ring/llm-ring/internal/model"
	"github.com/llm-ring/llm-ring/internal/prefix"
	"github.com/llm-ring/llm-ring/internal/traffic"
)

// A user's conversation as the simulated client writes it: its start, then
// each turn sent after its think time. The user keeps the conversation's
// tokens (the replica's prompt) and the router's conversation accumulator
// (internal/convo: the routing input), both fed each message as it is sent
// or answered (complete appends the answers).

// startConversation makes user u start conversation idx (if the run has
// it) after the conversation's first think time, counted from `from`.
func (s *sim) startConversation(u int32, idx int, from time.Duration) {
	us := &s.users[u]
	if idx >= s.prof.Conversations {
		s.active--
		return
	}
	toks, blocks := us.toks[:0], us.blocks // keep their buffers
	*us = user{conv: s.src.Conversation(idx), convIdx: idx, toks: toks, blocks: blocks}
	c := &us.conv
	var hs *prefix.Hasher
	if s.blockChars > 0 {
		us.blocks.Reset(s.blockChars)
		hs = &us.blocks
	}
	us.acc.Reset(s.spec.Router.ConversationKey.PrefixChars, hs)
	if s.prof.Headers() { // the client names its conversation; else the router keys it by its start
		us.acc.Name(c.ID)
	}
	if c.System != "" { // a trace request has none
		us.toks = model.AppendMessageTokens(us.toks, model.Message{Role: "system", Content: c.System})
		us.acc.Add("system", c.System)
	}
	if len(c.Turns) == 0 || !traffic.Fits(s.prof, c, 0, 0) {
		s.startConversation(u, idx+s.prof.Concurrency, from)
		return
	}
	s.q.push(s.arrive(from+seconds(c.Turns[0].ThinkS)), evSend, u, 0)
}

// arrive returns when a turn due at t is sent: at t, or when the profile's
// on/off arrivals next switch on.
func (s *sim) arrive(t time.Duration) time.Duration {
	return t + seconds(s.prof.ArrivalWait(t.Seconds()))
}

// seconds converts model seconds to a duration, rounded to the nanosecond.
func seconds(x float64) time.Duration { return time.Duration(math.Round(x * 1e9)) }

// send sends the user's next turn: route, then submit to the picked replica.
func (s *sim) send(u int32) error {
	us := &s.users[u]
	c := &us.conv
	turn := &c.Turns[us.turn]
	if s.utoks != nil { // the source has the message's tokens: the same, untokenized
		us.toks = model.AppendMessageHead(us.toks, "user")
		us.toks = s.utoks.AppendUserTokens(us.toks, us.convIdx, us.turn)
		us.toks = model.AppendMessageEnd(us.toks)
	} else {
		us.toks = model.AppendMessageTokens(us.toks, model.Message{Role: "user", Content: turn.User})
	}
	us.acc.Add("user", turn.User)
	us.in = us.acc.Routing()
	if us.turn == 0 { // the key is known once the first user message closed the start
		us.hash = s.hash(us.in.Key)
	}
	// The prompt and the history share one array: the answer is appended
	// over the generation prompt (the same tokens) once the replica is done
	// reading the prompt.
	prompt := model.AppendGenerationPrompt(us.toks)
	us.toks = prompt[:len(us.toks)]
	us.sent, us.ttft, us.wait = s.now, 0, 0
	s.res.Sent++
	if s.adm != nil {
		return s.offer(u)
	}
	return s.route(u)
}
