package admission

import "github.com/llm-ring/llm-ring/internal/policy"

// ReplicaScore is how saturated one replica is: 1 means at a threshold.
//
//	score = max(waiting / QueueThreshold, KVUse / KVThreshold, tokens / TokenCapacity,
//	            work / WorkLimitNs)
//
// waiting is the larger of what the replica reported and what the router
// knows it has sent beyond the reported running batch (load.Requests −
// running): between two scrapes the router's own count is the fresher one,
// so a burst dispatched after a quiet report is seen at once. A replica
// whose last report is older than StaleAfterNs scores 1 (saturated), as in
// GIE's utilization detector; one that has never reported its queue or KV
// use (Ollama publishes no metrics) is scored on what the router knows:
// in-flight requests beyond one per replica, and the token capacity if set.
//
// pending is a share of requests the driver has let go but not yet routed
// (the live router dispatches from the queue before the request's own
// goroutine charges the table): counted as in flight, so that one dispatch
// round does not empty the queue onto replicas that look idle.
//
// work is the in-flight tokens priced at the replica's learned prefill rate
// (work.go); ReplicaScore has only the row's own rate, PoolScore falls back
// to the pool's mean for a replica that has none.
func ReplicaScore(row *policy.Row, now int64, s *Settings, pending float64) float64 {
	score := replicaScore(row, now, s, pending)
	if s.WorkLimitNs > 0 && s.workCharges() && !stale(row, now, s) {
		score = max(score, workTerm(row.Load.Tokens, row.Speed.Prefill, 0, s.WorkLimitNs))
	}
	return score
}

// replicaScore is a replica's score on every term but the work term.
func replicaScore(row *policy.Row, now int64, s *Settings, pending float64) float64 {
	if stale(row, now, s) {
		return 1
	}
	queue, memory := replicaTerms(row, s, pending)
	return max(queue, memory)
}

// replicaTerms are a fresh replica's queue term and its memory terms (KV
// use, in-flight tokens against TokenCapacity), 0 where off.
func replicaTerms(row *policy.Row, s *Settings, pending float64) (queue, memory float64) {
	rep := &row.Reported
	inFlight := float64(row.Load.Requests) + pending
	waiting := inFlight - 1 // what an unreporting replica surely queues
	if rep.HasQueue {
		waiting = max(rep.Waiting, inFlight-rep.Running)
	}
	if waiting > 0 {
		queue = waiting / s.QueueThreshold
	}
	if rep.HasKV {
		memory = rep.KVUse / s.KVThreshold
	}
	if s.TokenCapacity > 0 {
		memory = max(memory, float64(row.Load.Tokens)/float64(s.TokenCapacity))
	}
	return queue, memory
}

// stale reports whether row's last report is too old: it scores 1.
func stale(row *policy.Row, now int64, s *Settings) bool {
	rep := &row.Reported
	return (rep.HasQueue || rep.HasKV) && now-rep.At > s.StaleAfterNs
}

// PoolScore is the mean replica score over the replicas that may be picked
// (excluded ones — unhealthy, or failed for this request — do not count),
// with pending requests (dispatched, not yet routed) spread evenly over
// them. With no replica it is 0: there is nothing to protect, and routing
// answers 503 on its own. The work term is the charges' (work.go); a
// Controller's Score takes it from its ledger when the work model is one
// of the ledger's (ledger.go).
func PoolScore(v *policy.View, s *Settings, pending int) float64 {
	return poolScore(v, s, pending, nil, 1, nil)
}

// Score is the pool's saturation score (PoolScore) with the work term of
// the controller's work model: the charges' at the learned per-request
// rate, or the ledger's (WorkInflight, WorkBacklog).
//
// With a work target (Settings.WorkTarget) every replica's score but a
// stale one's is divided by the ledger's headroom (ledger_headroom.go):
// the thresholds loosen while the pool's first tokens come within the
// target.
//
// With a decode share (Settings.DecodeShare) the score is the larger of
// that mean and the mean of the replicas' decode terms (ledger_decode.go).
func (c *Controller) Score(v *policy.View, pending int) float64 {
	head := c.ledger.Headroom()
	if c.s.workCharges() {
		return poolScore(v, &c.s, pending, nil, head, c.ledger)
	}
	return poolScore(v, &c.s, pending, c.ledger, head, c.ledger)
}

// poolScore is the mean replica score, or the mean decode term when
// larger: led is the work term's ledger (nil: the charges'), dec the
// decode term's (nil: off; ledger_decode.go). The decode term is a mean
// of its own, not a term in each replica's max: it is above 0 on every
// replica that decodes, and inside the max it raised the mean whenever
// another replica's work term was high (measured on the llama.cpp model
// at capacity: band 0's answers −30 % while the predicted TPOTs were
// 10–24 ms against a 100 ms SLO).
func poolScore(v *policy.View, s *Settings, pending int, led *Ledger, head float64, dec *Ledger) float64 {
	n := 0
	for r := range v.Rows {
		if !v.Excluded(r) {
			n++
		}
	}
	if n == 0 {
		return 0
	}
	mean := 0.0
	switch {
	case s.WorkLimitNs <= 0:
	case led != nil:
		mean = led.meanRateOf(v)
	default:
		mean = meanPrefill(v)
	}
	sum, dsum := 0.0, 0.0
	for r := range v.Rows {
		if v.Excluded(r) {
			continue
		}
		row := &v.Rows[r]
		if stale(row, v.Now, s) { // a stale replica scores 1, whatever its work
			sum++
			continue
		}
		share := float64(pending) / float64(n)
		queue, memory := replicaTerms(row, s, share)
		work := 0.0
		switch {
		case s.WorkLimitNs <= 0:
		case led != nil:
			if ns, ok := led.Work(v.Names[r], s.WorkModel, v.Now, mean); ok {
				work = ns / float64(s.WorkLimitNs)
			}
		default:
			work = workTerm(row.Load.Tokens, row.Speed.Prefill, mean, s.WorkLimitNs)
		}
		if head > 1 { // the headroom: every threshold loosened (ledger_headroom.go)
			queue, memory, work = queue/head, memory/head, work/head
		}
		sum += max(queue, memory, work)
		dsum += decodeTerm(dec, s, v.Names[r], share) // the decode term: a mean of its own, not loosened
	}
	return max(sum, dsum) / float64(n)
}

// Saturated reports whether the pool's score reached the limit.
func Saturated(v *policy.View, s *Settings, pending int) bool {
	return PoolScore(v, s, pending) >= s.Limit
}
