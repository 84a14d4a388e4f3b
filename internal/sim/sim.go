package sim

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/llm-ring/llm-ring/internal/convo"
	"github.com/llm-ring/llm-ring/internal/model"
	"github.com/llm-ring/llm-ring/internal/policy"
	"github.com/llm-ring/llm-ring/internal/pool"
	"github.com/llm-ring/llm-ring/internal/prefix"
	"github.com/llm-ring/llm-ring/internal/record"
	"github.com/llm-ring/llm-ring/internal/replicaset"
	"github.com/llm-ring/llm-ring/internal/ring"
	"github.com/llm-ring/llm-ring/internal/state"
	"github.com/llm-ring/llm-ring/internal/traffic"
)

// Mode is the record.Run mode of simulated runs.
const Mode = "sim"

// RowWriter receives the rows of a run, in the order requests end;
// *record.Writer is one.
type RowWriter interface {
	Write(r *record.Request) error
}

// Result is what a run produced besides its rows.
type Result struct {
	// Info is the run's JSON document (record.Run), ready to write.
	Info record.Run
	// Events counts the events the loop handled: sends, replica wake-ups
	// (stale ones skipped are not counted) and scale-up steps.
	Events int64
	// ModelEvents counts the replica model's events (first tokens and
	// completions).
	ModelEvents int64
	// Sent counts requests sent; Completed those answered; Failed those that
	// got an error (each is a row with a status and an error text).
	Sent, Completed, Failed int
}

// errorText is a failed request's error column, as the live runner writes
// it from the JSON error body: "HTTP <status>: <message>".
func errorText(status int, msg string) string { return fmt.Sprintf("HTTP %d: %s", status, msg) }

// user is one closed-loop simulated user and its current conversation.
type user struct {
	conv      traffic.Conversation
	convIdx   int           // index of conv in the run
	turn      int           // next turn to send (0-based)
	hash      uint64        // of the conversation key the router sees (in.Key)
	toks      []model.Token // the conversation so far (without the generation prompt)
	prevTotal int           // last answered turn: prompt + answer tokens

	// The router's reading of the conversation, message by message as it
	// is sent or answered (the rendered conversation only grows): acc is
	// the router's own conversation accumulator (internal/convo), feeding
	// blocks, the prompt's block hashes for the prefix index; in is what
	// it read when the request in flight was sent.
	acc    convo.Accumulator
	blocks prefix.Hasher
	in     convo.Routing

	// The request in flight, and the router instance it went through.
	router  int32
	ticket  state.Ticket
	reason  policy.Reason
	replica int32
	sent    time.Duration
	ttft    time.Duration

	// Admission (admit.go): the request's band and flow, its estimated
	// tokens, whether it waits in the queue, and how long it waited.
	prio   int
	flow   string
	tokens int64
	queued bool
	wait   time.Duration

	// Pools (pools.go): the table that routed the request in flight, the
	// model that served it, the adapter it asked for, and whether it made
	// its replica load the adapter.
	tab     *state.Table
	model   string
	adapter string
	load    bool
}

// replicaRef locates a replica in the model: member `member` of group
// `group`.
type replicaRef struct {
	name   string
	group  int32
	member int32
	index  int32 // its replica index (the i of llm-i)
	// load is what the replica's model reported at the last sample, read
	// when its group's changes counter was loadAt (sample reads it again
	// only after its group changed).
	load   model.Load
	loadAt uint32
}

// flight is a request in flight on a replica: its model id and its user.
type flight struct {
	id   model.ID
	user int32
}

type sim struct {
	spec    *Spec
	prof    traffic.Profile
	src     Source
	utoks   userTokens // src, when it has its user messages' tokens (trace.go)
	hash    func(string) uint64
	polName string
	// tables are the router instances (one unless Spec.Routers > 1); the
	// gossip between them is in routers.go.
	tables []*state.Table
	remote []map[string]policy.Load // remote[i]: the others' load as delivered to i
	gossip []gossipQueue            // gossip[i]: instance i's published messages not yet delivered

	groups  []*model.Group
	members [][]int32 // members[g][m] is the replica index of member m of group g
	reps    []replicaRef
	up      []int32           // slots on the ring, in the order they joined
	dead    []bool            // dead[group]: its replica failed; its events are ignored
	snapIdx []int32           // replica index of each position of the table's (name-sorted) snapshot
	reports []policy.Reported // sample's scratch: the replicas' reports, by snapshot position
	wakeAt  []time.Duration
	wakeSet []bool
	wakeVer []uint32
	// changes[g] counts the calls that may have changed group g's models
	// (Add, Submit, Advance): a replica's Load is a function of its model's
	// state, which changes only in those calls.
	changes []uint32
	q       queue
	now     time.Duration
	users   []user
	active  int
	flights [][]flight // flights[r]: the requests in flight on replica r (a handful)
	evs     []model.Event
	rows    RowWriter
	row     record.Request
	res     Result

	// counters counts requests by replica, reason and status.
	counters                     map[counterKey]int64
	sampleEvery                  time.Duration // replica signals: 0 = not sampled
	blockChars                   int           // prefix blocks: 0 = none
	cached, prompted, predicted  int64
	cacheLost                    int64
	lastEnd, scaleAt, scaleReady time.Duration
	scaled                       bool
	adm                          *admState // nil: admission off

	// With Spec.Pools (pools.go): the router's pools, and the slot of
	// each replica on the ring by name.
	set        *pool.Set
	slotByName map[string]int32
}

// Run simulates one run and writes its rows to rows, in the order requests
// end. It is single-threaded and deterministic: the same spec gives the
// same rows and the same Result. ctx only interrupts a run (its error is
// returned); it never changes what a complete run produces.
func Run(ctx context.Context, spec Spec, rows RowWriter) (Result, error) {
	if err := spec.Validate(); err != nil {
		return Result{}, err
	}
	s, err := newSim(&spec, rows)
	if err != nil {
		return Result{}, err
	}
	if err := s.loop(ctx); err != nil {
		return s.res, err
	}
	s.finish()
	return s.res, nil
}

func newSim(spec *Spec, rows RowWriter) (*sim, error) {
	// Settings that are engine facts (slots, cache capacity, speed priors)
	// come from the replicas' model unless the configuration gives them.
	rc := spec.Router
	rc.Facts = spec.Model.Facts()
	pol, err := NewPolicy(spec.Policy, &rc)
	if err != nil {
		return nil, err
	}
	src := spec.Source
	if src == nil {
		g, err := traffic.NewGenerator(spec.Profile, spec.Seed)
		if err != nil {
			return nil, err
		}
		src = g
	}
	scfg := spec.Router.StateConfig()
	scfg.Hash = spec.Hash
	s := &sim{
		spec:     spec,
		prof:     spec.Profile,
		src:      src,
		hash:     ring.HashString,
		polName:  pol.Name(),
		users:    make([]user, spec.Profile.Concurrency),
		rows:     rows,
		counters: map[counterKey]int64{},

		sampleEvery: spec.Router.Signals.Interval.D(),
		blockChars:  spec.Router.PrefixIndex.BlockChars,
	}
	s.utoks, _ = src.(userTokens)
	if h := spec.Hash; h != nil {
		s.hash = func(k string) uint64 { return h([]byte(k)) }
	}
	s.newRouters(scfg, pol)
	if spec.Pools != nil {
		if err := s.newPools(scfg); err != nil {
			return nil, err
		}
	}
	if spec.Admission != nil {
		s.adm = newAdmState(spec.Admission, spec.Model)
	}
	if spec.SharedCPU {
		g, err := model.NewGroup(true)
		if err != nil {
			return nil, err
		}
		s.addGroup(g)
	}
	for i := range spec.Replicas {
		if _, err := s.addReplica(ReplicaName(i), i); err != nil {
			return nil, err
		}
		s.up = append(s.up, int32(i))
	}
	if err := s.setMembers(); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *sim) addGroup(g *model.Group) {
	s.groups = append(s.groups, g)
	s.members = append(s.members, nil)
	s.wakeAt = append(s.wakeAt, 0)
	s.wakeSet = append(s.wakeSet, false)
	s.wakeVer = append(s.wakeVer, 0)
	s.changes = append(s.changes, 1)
	s.dead = append(s.dead, false)
}

// addReplica adds an idle replica to the model under name: a member of the
// shared group, or a group of its own, at the profile's speed for it. It
// returns the replica's slot (its index in s.reps); a replica that fails
// and returns cold gets a new slot under its old name.
func (s *sim) addReplica(name string, index int) (int32, error) {
	i := int32(len(s.reps))
	if !s.spec.SharedCPU {
		g, err := model.NewGroup(false)
		if err != nil {
			return 0, err
		}
		s.addGroup(g)
	}
	gi := len(s.groups) - 1
	m, err := s.groups[gi].Add(s.replicaModel(index).WithSpeed(s.prof.ReplicaSpeed(index)))
	s.changes[gi]++
	if err != nil {
		return 0, err
	}
	s.members[gi] = append(s.members[gi], i)
	s.flights = append(s.flights, nil)
	s.reps = append(s.reps, replicaRef{name: name, group: int32(gi), member: int32(m), index: int32(index)})
	return i, nil
}

// join puts slot on the ring (a discovery update).
func (s *sim) join(slot int32) {
	s.up = append(s.up, slot)
	s.setMembers()
}

// leave takes slot off the ring (a discovery update).
func (s *sim) leave(slot int32) {
	if k := slices.Index(s.up, slot); k >= 0 {
		s.up = slices.Delete(s.up, k, k+1)
	}
	s.setMembers()
}

// setMembers gives the table (the pools) the replicas in s.up, as
// discovery would. Only a pools run's can fail (a pool's new table), and
// a pools run has no replica joining or leaving.
func (s *sim) setMembers() error {
	if s.set != nil {
		return s.setPoolMembers()
	}
	rs := make([]replicaset.Replica, len(s.up))
	for i, slot := range s.up {
		rs[i] = simReplica(s.reps[slot].name)
	}
	for _, t := range s.tables {
		t.SetReplicas(rs)
	}
	// The table orders replicas by name, as replicaset.Normalize does.
	idx := slices.Clone(s.up)
	slices.SortFunc(idx, func(a, b int32) int { return strings.Compare(s.reps[a].name, s.reps[b].name) })
	s.snapIdx = idx
	return nil
}

func (s *sim) loop(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	for u := range s.users {
		s.active++
		s.startConversation(int32(u), u, 0)
	}
	if s.spec.ScaleAt > 0 {
		s.q.push(s.spec.ScaleAt, evScaleStart, 0, 0)
	}
	for k, ev := range s.prof.ReplicaEvents {
		s.q.push(seconds(ev.AtS), evReplica, int32(k), 0)
	}
	if s.sampleEvery > 0 {
		s.sample()
	}
	for s.active > 0 {
		if s.q.len() == 0 {
			return fmt.Errorf("sim: no event pending at %v with %d users still active (a request was lost)", s.now, s.active)
		}
		e := s.q.pop()
		if e.kind == evWake && (e.ver != s.wakeVer[e.who] || s.dead[e.who]) {
			continue // the group's next event moved since (or its replica failed)
		}
		if handled, err := s.observe(&e); handled || err != nil {
			if err != nil {
				return err
			}
			continue
		}
		s.now = e.at
		s.res.Events++
		if s.res.Events&0xfff == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		switch e.kind {
		case evSend:
			if err := s.send(e.who); err != nil {
				return err
			}
		case evWake:
			if err := s.wake(e.who); err != nil {
				return err
			}
		case evScaleStart:
			slot, err := s.addReplica(ReplicaName(s.spec.Replicas), s.spec.Replicas)
			if err != nil {
				return err
			}
			s.scaleAt, s.scaled = s.now, true
			s.q.push(s.now+s.spec.LoadDelay, evScaleReady, slot, 0)
		case evScaleReady:
			s.join(e.who)
			s.scaleReady = s.now
			if err := s.admitStep(); err != nil {
				return err
			}
		case evReplica:
			if err := s.replicaEvent(&s.prof.ReplicaEvents[e.who]); err != nil {
				return err
			}
		case evJoin:
			s.join(e.who)
			if err := s.admitStep(); err != nil {
				return err
			}
		}
	}
	return nil
}

// observe handles the events that change no replica and are not counted in
// Events: gossip deliveries (they carry what routing learned), the
// replicas' reports (sampling observes; it changes nothing the study's
// policies read) and admission's timer.
func (s *sim) observe(e *event) (bool, error) {
	switch e.kind {
	case evGossip:
		s.now = e.at
		s.deliver(e.who, e.ver == 1)
	case evSample:
		s.now = e.at
		if s.q.len() > 0 {
			s.sample()
		}
		return true, s.admitStep()
	case evExpire:
		s.now = e.at
		return true, s.expire(e.at)
	default:
		return false, nil
	}
	return true, nil
}

// reschedule makes sure group g's next model event is on the queue.
func (s *sim) reschedule(g int32) {
	t, ok := s.groups[g].NextEvent()
	if !ok {
		if s.wakeSet[g] {
			s.wakeSet[g] = false
			s.wakeVer[g]++
		}
		return
	}
	if s.wakeSet[g] && s.wakeAt[g] == t {
		return
	}
	s.wakeVer[g]++
	s.wakeAt[g], s.wakeSet[g] = t, true
	s.q.push(t, evWake, g, s.wakeVer[g])
}

// wake advances group g to now and hands its events to their users.
func (s *sim) wake(g int32) error {
	s.wakeSet[g] = false
	s.evs = s.groups[g].Advance(s.now, s.evs[:0])
	s.changes[g]++
	for i := range s.evs {
		ev := &s.evs[i]
		s.res.ModelEvents++
		r := s.members[g][ev.Replica]
		fl := s.flights[r]
		k := slices.IndexFunc(fl, func(f flight) bool { return f.id == ev.ID })
		if k < 0 {
			return fmt.Errorf("sim: %s event for request %d on %s, which is not in flight", ev.Kind, ev.ID, s.reps[r].name)
		}
		u := fl[k].user
		us := &s.users[u]
		switch ev.Kind {
		case model.EventFirstToken:
			us.ttft = ev.At - us.sent
			s.admFirst(u, ev.At) // admission's work ledger: the prefill is over (admit.go)
		case model.EventDone:
			fl[k] = fl[len(fl)-1]
			s.flights[r] = fl[:len(fl)-1]
			if err := s.complete(u, ev.Result, ev.At); err != nil {
				return err
			}
		}
	}
	clear(s.evs) // drop the results
	s.reschedule(g)
	return s.admitStep()
}

// complete ends the user's request with the replica's answer: release the
// load and feed placement memory (as the router does when the answer's
// last chunk passes), record the row, and schedule the user's next turn.
func (s *sim) complete(u int32, res *model.Result, at time.Duration) error {
	us := &s.users[u]
	ttft := us.ttft
	if res.PredictedN == 0 {
		ttft = at - us.sent
	}
	fb := s.tableOf(us).Release(&us.ticket, state.Outcome{
		OK: true, Known: true, CacheN: res.CacheN, PromptN: res.PromptN, PredictedN: res.PredictedN,
		PromptTime: res.PromptTime(), PredictedTime: res.Done - res.PromptDone, TTFT: ttft, Latency: at - us.sent,
	}, int64(at))
	if fb.CacheLost {
		s.cacheLost++
	}
	s.admAnswered(us, res, at) // admission learns the answer's counts, as the router's does (admit.go)
	s.res.Completed++
	s.count(us, 200)
	if res.PredictedN == 0 {
		us.ttft = at - us.sent // no content at all: the first token is the end (as the live runner records it)
	}
	s.cached += int64(res.CacheN)
	s.prompted += int64(res.PromptN)
	s.predicted += int64(res.PredictedN)
	if err := s.writeRow(us, 200, "", res, at); err != nil {
		return err
	}
	// The answer joins the conversation, as the client sends it back.
	us.toks = model.AppendAssistantTokens(us.toks, &res.Output)
	us.acc.Add("assistant", res.Output.Text)
	us.prevTotal = res.PromptTokens + res.PredictedN
	us.turn++
	c := &us.conv
	if us.turn < len(c.Turns) && traffic.Fits(s.prof, c, us.turn, us.prevTotal) {
		s.q.push(s.arrive(at+seconds(c.Turns[us.turn].ThinkS)), evSend, u, 0)
		return nil
	}
	s.startConversation(u, us.convIdx+s.prof.Concurrency, at)
	return nil
}

// sample records what each replica on the ring reports about itself (its
// model's load, as llama.cpp's /metrics says it), and schedules the next
// sample: the simulated scraper, on the router's signals interval, so that
// policies see signals exactly as stale as live ones.
func (s *sim) sample() {
	if s.set != nil {
		s.samplePools()
		s.q.push(s.now+s.sampleEvery, evSample, 0, 0)
		return
	}
	rs := s.reports[:0] // in the table's order (snapIdx)
	for _, r := range s.snapIdx {
		ref := &s.reps[r]
		if ref.loadAt != s.changes[ref.group] {
			ref.load, ref.loadAt = s.groups[ref.group].Server(int(ref.member)).Load(), s.changes[ref.group]
		}
		l := &ref.load
		rs = append(rs, policy.Reported{
			Running: float64(l.Processing), Waiting: float64(l.Deferred), KVUse: l.KVUsage,
			HasQueue: true, HasKV: true, At: int64(s.now),
		})
	}
	s.reports = rs
	for _, t := range s.tables { // every instance scrapes the replicas itself
		t.SetReportedRows(rs)
	}
	s.q.push(s.now+s.sampleEvery, evSample, 0, 0)
}
