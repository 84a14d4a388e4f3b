package state

import "github.com/llm-ring/llm-ring/internal/replicaset"

// Candidates returns the policy's failover order after a pick: up to n
// replicas, each the one the policy picks for in with the ticket's replica,
// exclude and the earlier candidates excluded, exactly as a failover would
// route it (Route with exclude) at this moment. Nothing is charged, learnt
// or announced, and the round-robin sequence does not advance: the endpoint
// picker hands the list to the gateway as the request's fallbacks, and
// charges only the replica that serves it. With adapter affinity each
// candidate is of the best adapter tier among those left. dst is reused.
func (t *Table) Candidates(dst []replicaset.Replica, in Input, tk *Ticket, now int64, n int, exclude ...string) []replicaset.Replica {
	dst = dst[:0]
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.snap
	if n <= 0 || len(s.names) < 2 {
		return dst
	}
	req, _, v := t.lookup(in, t.readsMatch, now)
	defer t.match.clear()
	left := t.exclude(v, exclude...)
	left -= t.exclude1(v, tk.Replica.Name)
	adapter := t.cfg.AdapterAffinity && in.Adapter != ""
	for len(dst) < n && left > 0 {
		if adapter { // the best adapter tier among those left
			t.restrictAdapter(v, in.Adapter, now)
		}
		t.pol.Pick(req, v, &t.dec) // the pick's own decision was copied out by Route
		v.Exclude = t.excl
		r := t.dec.Replica
		dst = append(dst, s.replicas[r])
		left -= t.exclude1(v, s.names[r])
	}
	return dst
}
