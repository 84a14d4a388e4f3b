package sim

import (
	"errors"
	"fmt"
	"time"

	"github.com/llm-ring/llm-ring/internal/admission"
	"github.com/llm-ring/llm-ring/internal/model"
	"github.com/llm-ring/llm-ring/internal/policy"
)

// Admission runs a simulated router with admission control in front of
// routing (internal/admission), driven as the live router drives it
// (internal/router/admit.go): Offer on arrival, with the pool's saturation
// read from the table's LoadView at that virtual time (no pending
// dispatches: the simulator routes a dispatched request at once); Dispatch
// until it says no after every answer, every replica report and every
// membership change; Expire when the controller's NextExpiry falls due. A
// shed request ends with status 429 (or ShedStatus 503) and never reaches
// a replica.
//
// The traffic's classes are drawn per conversation from the seed: a share
// of them in the top band, and a flow (tenant) each, one of which floods.
type Admission struct {
	Settings admission.Settings // Enabled must be true
	// SLOTTFT gives every request a deadline: arrival + SLOTTFT (0: none;
	// then a request waits at most Settings.MaxWaitNs).
	SLOTTFT time.Duration
	// SLOTPOT is the TPOT SLO the headroom's decode guard holds answers to
	// (Controller.SetTPOT; 0: none).
	SLOTPOT time.Duration
	// HighShare of the conversations are in band HighPriority; the others
	// in band 0.
	HighShare    float64
	HighPriority int
	// Tenants is the number of flows (t0 … tN-1; 0 or 1: one flow, "t0").
	// FloodShare of the conversations are t0's, the flooder; the others are
	// spread evenly over all N.
	Tenants    int
	FloodShare float64
	// Bands and Flows, when set, give conversation i band Bands[i mod len]
	// and flow Flows[i mod len] instead of the drawn ones (hand-made
	// traffic, tests).
	Bands []int
	Flows []string
	// ShedStatus is the status of a shed request's row: 429 (0, the
	// default) or 503, as the router's admission.shed_status.
	ShedStatus int
}

// status is the shed rows' status.
func (a *Admission) status() int {
	if a.ShedStatus == 0 {
		return 429
	}
	return a.ShedStatus
}

// Validate names the first bad setting.
func (a *Admission) Validate() error {
	var errs []error
	if !a.Settings.Enabled {
		errs = append(errs, errors.New("admission: settings must be enabled"))
	}
	if err := a.Settings.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("admission: %w", err))
	}
	if a.SLOTTFT < 0 {
		errs = append(errs, fmt.Errorf("admission slo-ttft: must not be negative, got %v", a.SLOTTFT))
	}
	if a.SLOTPOT < 0 {
		errs = append(errs, fmt.Errorf("admission slo-tpot: must not be negative, got %v", a.SLOTPOT))
	}
	if !(a.HighShare >= 0 && a.HighShare <= 1) {
		errs = append(errs, fmt.Errorf("admission high-share: must be in [0, 1], got %v", a.HighShare))
	}
	if !(a.FloodShare >= 0 && a.FloodShare <= 1) {
		errs = append(errs, fmt.Errorf("admission flood-share: must be in [0, 1], got %v", a.FloodShare))
	}
	if st := a.status(); st != 429 && st != 503 {
		errs = append(errs, fmt.Errorf("admission shed_status: must be 429 or 503, got %d", st))
	}
	if a.Tenants < 0 || a.Tenants > 1000 {
		errs = append(errs, fmt.Errorf("admission tenants: must be between 0 and 1000, got %d", a.Tenants))
	}
	return errors.Join(errs...)
}

// Class returns the band and flow of conversation idx of the run of seed.
func (a *Admission) Class(seed int64, idx int) (priority int, flow string) {
	h := splitmix(uint64(seed)*0x9e3779b97f4a7c15 ^ uint64(idx))
	u1 := float64(h>>11) / (1 << 53)
	h2 := splitmix(h)
	u2 := float64(h2>>11) / (1 << 53)
	if len(a.Bands) > 0 || len(a.Flows) > 0 {
		return a.fixedClass(idx)
	}
	if u1 < a.HighShare {
		priority = a.HighPriority
	}
	n := max(a.Tenants, 1)
	t := 0
	if u2 >= a.FloodShare { // spread evenly over all n
		t = int((u2 - a.FloodShare) / (1 - a.FloodShare) * float64(n))
		t = min(t, n-1)
	}
	return priority, fmt.Sprintf("t%d", t)
}

func (a *Admission) fixedClass(idx int) (priority int, flow string) {
	flow = "t0"
	if len(a.Bands) > 0 {
		priority = a.Bands[idx%len(a.Bands)]
	}
	if len(a.Flows) > 0 {
		flow = a.Flows[idx%len(a.Flows)]
	}
	return priority, flow
}

func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// admState is a run's admission: the controller and its counts.
type admState struct {
	spec     *Admission
	c        *admission.Controller
	model    *policy.Predictive // the service-time model (policy.ServiceTime); nil until first used
	cached   admission.CachedShare
	expireAt time.Duration // the armed expiry timer (0: none)
	admitted int64         // at once
	waited   int64         // after waiting
	shed     map[admission.Reason]int64
}

func newAdmState(a *Admission, m model.Config) *admState {
	c := admission.New(a.Settings)
	c.SetKVTokens(admKVTokens(m))
	c.SetSLO(int64(a.SLOTTFT))
	c.SetTPOT(int64(a.SLOTPOT))
	return &admState{spec: a, c: c, shed: map[admission.Reason]int64{}}
}

// admKVTokens is the KV pool the live router would learn of a replica of
// model m (router/facts.go): a paged engine's pool (vLLM num_gpu_blocks ×
// block_size, SGLang max_total_num_tokens: the model's Facts().CacheTokens);
// 0 for the llama.cpp model, whose CacheTokens is its prompt cache (every
// slot's context plus the RAM cache), not a pool that bounds its batch,
// and whose live server reports no pool size.
func admKVTokens(m model.Config) float64 {
	if !m.Paged() {
		return 0
	}
	return m.Facts().CacheTokens
}

// service predicts a request of prompt tokens' time from dispatch to first
// token on router 0's best replica now, as the live router does: the model
// is predictive's with the run's policies.predictive settings (read once),
// whatever policy routes.
func (s *sim) service(prompt int) (int64, error) {
	a := s.adm
	if a.model == nil {
		ps, err := s.spec.Router.PolicySettings("predictive")
		if err != nil {
			return 0, fmt.Errorf("admission: the service-time model: %w", err)
		}
		m, ok := ps.(*policy.Predictive)
		if !ok {
			return 0, fmt.Errorf("admission: the service-time model: policies.predictive decodes to %T", ps)
		}
		a.model = m
	}
	if a.c.LedgerService() { // the work ledger's backlog and rates (admission.Ledger.Service)
		l := a.c.Ledger()
		return int64(s.tables[0].LoadView(int64(s.now), func(v *policy.View) float64 { return float64(l.Service(v, prompt)) })), nil
	}
	prompt = a.cached.New(prompt) // the view has no matches: the pool's recent cached share
	return int64(s.tables[0].LoadView(int64(s.now), func(v *policy.View) float64 {
		return float64(policy.ServiceTime(a.model, v, prompt))
	})), nil
}

// admRouted records user u's request, just submitted to its replica, in the
// work ledger, as the router's admitter does once the table charged it:
// its estimated prompt less what the pick expected cached there.
func (s *sim) admRouted(u int32) {
	if s.adm == nil {
		return
	}
	us := &s.users[u]
	tk := &us.ticket
	l := s.adm.c.Ledger()
	expect := s.adm.c.Expected(tk.ExpectCached, tk.Match()) // placement memory's, or the prefix index's (work_cached)
	l.Dispatched(ledgerID(us), tk.Replica.Name, l.Uncached(tk.Replica.Name, tk.EstPrompt, expect), expect, int64(s.now))
	l.Arrived(ledgerID(us), int64(us.sent))      // its time to first token includes its wait in the queue (work_target)
	s.adm.c.Flow(ledgerID(us), us.prio, us.flow) // its flow's count in flight (the flow gate)
}

// admFirst tells admission that user u's request had its first token at
// at (the model's first-token event, its virtual time): its prefill
// leaves the ledger's prefilling work, as the router's observer says at
// the answer's first byte. The wake that brought the event runs
// admitStep after it, so a waiting request may go at that time.
func (s *sim) admFirst(u int32, at time.Duration) {
	if s.adm != nil {
		s.adm.c.FirstToken(ledgerID(&s.users[u]), int64(at))
	}
}

// admEnded ends user u's ledger entry, if any (its request failed).
func (s *sim) admEnded(u int32) {
	if s.adm != nil {
		s.adm.c.Ledger().Ended(ledgerID(&s.users[u]), int64(s.now))
	}
}

// ledgerID is the ledger's id of a user's request in flight: its
// conversation and turn (a user slot serves many conversations).
func ledgerID(us *user) uint64 { return uint64(us.convIdx)<<24 | uint64(us.turn)&(1<<24-1) }

// admAnswered tells admission an answer's counts, as the router's admitter
// learns them: the flow's budget is corrected, the pool's cached share
// learns, the work ledger ends the request's entry and learns its
// replica's prefill throughput (dispatch: sent + the wait in the queue;
// first token: sent + its TTFT, the answer's end when it had no token).
func (s *sim) admAnswered(us *user, res *model.Result, at time.Duration) {
	if s.adm == nil {
		return
	}
	s.adm.c.Budgets().Charge(us.flow, int64(res.CacheN+res.PromptN+res.PredictedN)-us.tokens, int64(at))
	s.adm.cached.Learn(res.CacheN, res.PromptN)
	first := us.sent + us.ttft
	if us.ttft <= 0 {
		first = at
	}
	l := s.adm.c.Ledger()
	l.Answered(ledgerID(us), us.ticket.Replica.Name, int64(us.sent+us.wait), int64(first), res.CacheN, res.PromptN, int64(at))
	if us.ttft > 0 && res.PredictedN > 1 { // its time per output token (the headroom's decode guard)
		l.Decoded(int64(at-first) / int64(res.PredictedN-1))
	}
	if us.ttft > 0 { // from dispatch: less the wait in the queue
		s.adm.c.ObserveService(int64(us.ttft-us.wait), int64(at))
	}
}

// score reads the pool's saturation score from router 0's table at now.
func (s *sim) score() float64 {
	c := s.adm.c
	return s.tables[0].LoadView(int64(s.now), func(v *policy.View) float64 { return c.Score(v, 0) })
}

// offer puts user u's request, ready to route, to admission.
func (s *sim) offer(u int32) error {
	us := &s.users[u]
	a := s.adm
	now := int64(s.now)
	turn := &us.conv.Turns[us.turn]
	us.prio, us.flow = a.spec.Class(s.spec.Seed, us.convIdx)
	it := admission.Item{ID: uint64(u), Priority: us.prio, Flow: us.flow, Arrived: now,
		Bytes: int64(us.in.Chars), Tokens: int64(us.in.Chars/4 + turn.MaxTokens)}
	if a.spec.SLOTTFT > 0 {
		it.Deadline = now + int64(a.spec.SLOTTFT)
		var err error
		if it.Service, err = s.service(us.in.Chars / 4); err != nil {
			return err
		}
	}
	us.tokens = it.Tokens
	v, out, displaced := a.c.OfferScore(it, now, s.score())
	if displaced {
		if err := s.shed(int32(out.ID), admission.Displaced); err != nil {
			return err
		}
	}
	switch v.Outcome {
	case admission.Admitted:
		a.admitted++
		return s.route(u)
	case admission.Shed:
		return s.shed(u, v.Reason)
	}
	us.queued = true
	s.armExpiry()
	return nil
}

// ShedText is the message of a request shed for reason.
func ShedText(r admission.Reason) string { return admission.ShedPrefix + r.String() }

// shed ends user u's request as refused by admission.
func (s *sim) shed(u int32, r admission.Reason) error {
	us := &s.users[u]
	us.queued = false
	us.replica, us.reason, us.ticket = -1, "", ticketNone
	s.adm.shed[r]++
	return s.fail(u, s.adm.spec.status(), ShedText(r))
}

// admitStep sheds what expired and dispatches while the pool has room,
// routing each dispatched request at once; then arms the expiry timer.
func (s *sim) admitStep() error {
	a := s.adm
	if a == nil {
		return nil
	}
	now := int64(s.now)
	var err error
	a.c.Expire(now, func(it admission.Item, r admission.Reason) {
		if err == nil {
			err = s.shed(int32(it.ID), r)
		}
	})
	if err != nil {
		return err
	}
	for a.c.Len() > 0 {
		it, ok := a.c.DispatchScore(now, s.score())
		if !ok {
			break
		}
		u := int32(it.ID)
		us := &s.users[u]
		us.queued, us.wait = false, s.now-us.sent
		a.waited++
		if err := s.route(u); err != nil {
			return err
		}
	}
	s.armExpiry()
	return nil
}

// armExpiry puts the controller's next expiry on the event queue, unless
// an earlier timer is already armed.
func (s *sim) armExpiry() {
	at := time.Duration(s.adm.c.NextExpiry())
	if at == 0 || (s.adm.expireAt != 0 && s.adm.expireAt <= at) {
		return
	}
	s.adm.expireAt = max(at, s.now)
	s.q.push(s.adm.expireAt, evExpire, 0, 0)
}

// expire handles the expiry timer at e.at (a timer overtaken by an earlier
// one is skipped).
func (s *sim) expire(at time.Duration) error {
	if s.adm == nil || at != s.adm.expireAt {
		return nil
	}
	s.adm.expireAt = 0
	return s.admitStep()
}

// admMetrics adds the admission counts to a run's metrics.
func (s *sim) admMetrics(m map[string]float64) {
	a := s.adm
	if a == nil {
		return
	}
	m[`llm_ring_admission_total{outcome="admitted"}`] = float64(a.admitted)
	m[`llm_ring_admission_total{outcome="admitted-after-wait"}`] = float64(a.waited)
	for _, r := range admission.Reasons() {
		m[fmt.Sprintf(`llm_ring_admission_total{outcome="shed-%s"}`, r)] = float64(a.shed[r])
	}
}

// admConfig is the run's admission configuration (its JSON).
func admConfig(a *Admission) map[string]any {
	st := a.Settings
	return map[string]any{
		"queue_capacity": st.QueueCapacity, "queue_threshold": st.QueueThreshold, "kv_threshold": st.KVThreshold,
		"token_capacity": st.TokenCapacity, "limit": st.Limit, "max_wait": time.Duration(st.MaxWaitNs).String(),
		"service_floor": time.Duration(st.ServiceFloorNs).String(),
		"order":         st.Order, "slo_ttft": a.SLOTTFT.String(), "slo_tpot": a.SLOTPOT.String(), "high_share": a.HighShare, "high_priority": a.HighPriority,
		"tenants": a.Tenants, "flood_share": a.FloodShare, "shed_status": a.status(),
		"min_share": st.MinShare, "band_limits": st.BandLimits, "flow_weights": st.FlowWeights, "tokens_per_minute": st.TokensPerMinute,
		"service_quantile": st.ServiceQuantile, "token_share": st.TokenShare,
		"work_share": st.WorkShare, "work_model": st.WorkModel, "work_limit": time.Duration(st.WorkLimitNs).String(),
		"flow_gate": st.FlowGate, "work_target": st.WorkTarget, "decode_share": st.DecodeShare, "decode_quantile": st.DecodeQuantile, "flow_share": st.FlowShareMode(), "flow_window": time.Duration(st.FlowWindow()).String(),
	}
}
