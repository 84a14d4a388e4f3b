package state

import (
	"github.com/llm-ring/llm-ring/internal/policy"
	"github.com/llm-ring/llm-ring/internal/replicaset"
)

// Status is a copy of the table's state for /replicas and metrics.
type Status struct {
	Policy   string
	Replicas []ReplicaStatus
	Memory   int // conversations in placement memory
}

// ReplicaStatus is one replica's state.
type ReplicaStatus struct {
	replicaset.Replica
	Load      policy.Load
	Reported  policy.Reported
	Speed     policy.Speed
	RingShare float64 // share of the hash space it is home for
	Healthy   bool    // false while its health checks fail (SetHealthy)
}

// Healthy counts the replicas that may take requests.
func (s *Status) Healthy() int {
	n := 0
	for _, r := range s.Replicas {
		if r.Healthy {
			n++
		}
	}
	return n
}

// Status returns a consistent copy of the current state.
func (t *Table) Status() Status {
	t.mu.Lock()
	defer t.mu.Unlock()
	st := Status{Policy: t.pol.Name(), Memory: t.mem.len(), Replicas: make([]ReplicaStatus, len(t.snap.names))}
	for i, r := range t.snap.replicas {
		st.Replicas[i] = ReplicaStatus{Replica: r, Load: t.rows[i].Load, Reported: t.rows[i].Reported, Speed: t.rows[i].Speed,
			RingShare: t.snap.share[i], Healthy: t.health.healthy(t.snap.ids[i])}
	}
	return st
}
