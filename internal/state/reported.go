package state

import (
	"fmt"

	"github.com/llm-ring/llm-ring/internal/policy"
)

// SetReportedRows records what every replica of the snapshot reported about
// itself, in one lock: rs[i] is the report of the i-th replica of Rows'
// order (by name), recorded as SetReported(name, rs[i]) records it. The
// simulator's sampler calls it once per signals interval rather than
// SetReported once per replica (a thousand replicas: issue 21). It panics
// when rs is not as long as the snapshot (the caller's list of replicas is
// not the table's).
func (t *Table) SetReportedRows(rs []policy.Reported) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ids := t.snap.ids
	if len(rs) != len(ids) {
		panic(fmt.Sprintf("state: SetReportedRows: %d reports for %d replicas", len(rs), len(ids)))
	}
	for i, id := range ids {
		t.rep[id] = rs[i]
		t.rows[i].Reported = rs[i]
	}
}
