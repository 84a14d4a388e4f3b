package sim

import (
	"errors"
	"fmt"
	"time"

	"github.com/llm-ring/llm-ring/internal/admission"
	"github.com/llm-ring/llm-ring/internal/policy"
)

// Admission runs a simulated router with admission control in front of
// routing (internal/admission), driven as the live router drives it
// (internal/router/admit.go): Offer on arrival, with the pool's saturation
// read from the table's LoadView at that virtual time (no pending
// dispatches: the simulator routes a dispatched request at once); Dispatch
// until it says no after every answer, every replica report and every
// membership change; Expire when the controller's NextExpiry falls due. A
// shed request ends with status 429 and never reaches a replica.
//
// The traffic's classes are drawn per conversation from the seed: a share
// of them in the top band, and a flow (tenant) each, one of which floods.
type Admission struct {
	Settings admission.Settings // Enabled must be true
	// SLOTTFT gives every request a deadline: arrival + SLOTTFT (0: none;
	// then a request waits at most Settings.MaxWaitNs).
	SLOTTFT time.Duration
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
	if !(a.HighShare >= 0 && a.HighShare <= 1) {
		errs = append(errs, fmt.Errorf("admission high-share: must be in [0, 1], got %v", a.HighShare))
	}
	if !(a.FloodShare >= 0 && a.FloodShare <= 1) {
		errs = append(errs, fmt.Errorf("admission flood-share: must be in [0, 1], got %v", a.FloodShare))
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
	expireAt time.Duration // the armed expiry timer (0: none)
	admitted int64         // at once
	waited   int64         // after waiting
	shed     map[admission.Reason]int64
}

func newAdmState(a *Admission) *admState {
	return &admState{spec: a, c: admission.New(a.Settings), shed: map[admission.Reason]int64{}}
}

// saturated reads the pool's saturation from router 0's table at now.
func (s *sim) saturated() bool {
	st := s.adm.c.Settings()
	score := s.tables[0].LoadView(int64(s.now), func(v *policy.View) float64 { return admission.PoolScore(v, st, 0) })
	return score >= st.Limit
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
	}
	us.tokens = it.Tokens
	v, out, displaced := a.c.Offer(it, now, s.saturated())
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

// ShedText is the message of a request shed for reason (status 429).
func ShedText(r admission.Reason) string { return "request shed by admission control: " + r.String() }

// shed ends user u's request as refused by admission.
func (s *sim) shed(u int32, r admission.Reason) error {
	us := &s.users[u]
	us.queued = false
	us.replica, us.reason, us.ticket = -1, "", ticketNone
	s.adm.shed[r]++
	return s.fail(u, 429, ShedText(r))
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
		it, ok := a.c.Dispatch(now, s.saturated())
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
		"order":         st.Order, "slo_ttft": a.SLOTTFT.String(), "high_share": a.HighShare, "high_priority": a.HighPriority,
		"tenants": a.Tenants, "flood_share": a.FloodShare,
	}
}
