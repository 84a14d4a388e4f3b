package state

import "github.com/llm-ring/llm-ring/internal/policy"

// LoadView calls fn with a view of the replicas as a pick would see them —
// their in-flight loads, what they report about themselves, their learned
// speeds, the unhealthy ones excluded — but without a request (no Match, no
// placement), under the table's lock, and returns what fn returns. fn must
// not keep the view or call back into the table. Admission control reads
// the pool's saturation through it (internal/admission).
func (t *Table) LoadView(now int64, fn func(v *policy.View) float64) float64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.snap
	v := &policy.View{Names: s.names, Ring: s.ring, Rows: t.rows, Total: t.total, Now: now}
	if t.nDown > 0 {
		v.Exclude = t.downBits
	}
	return fn(v)
}
