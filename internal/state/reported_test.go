package state

import (
	"reflect"
	"testing"

	"github.com/llm-ring/llm-ring/internal/policy"
)

// reportedRows is what a pick would see of each row's report.
func reportedRows(tb *Table) []policy.Reported {
	var out []policy.Reported
	tb.LoadView(0, func(v *policy.View) float64 {
		for _, r := range v.Rows {
			out = append(out, r.Reported)
		}
		return 0
	})
	return out
}

// TestSetReportedRowsIsSetReportedPerName: the simulator's batch records
// exactly what one SetReported per replica would, in the rows and for a
// replica that leaves and comes back.
func TestSetReportedRowsIsSetReportedPerName(t *testing.T) {
	one, batch := newTable(t, "least-loaded"), newTable(t, "least-loaded")
	names := []string{"c", "a", "b"} // the snapshot sorts them: a, b, c
	for _, tb := range []*Table{one, batch} {
		tb.SetReplicas(replicas(names...))
	}
	rep := func(n int) policy.Reported {
		return policy.Reported{Running: float64(n), Waiting: float64(2 * n), KVUse: 0.1 * float64(n), HasQueue: true, HasKV: true, At: int64(n)}
	}
	for i, n := range []string{"a", "b", "c"} {
		one.SetReported(n, rep(i+1))
	}
	batch.SetReportedRows([]policy.Reported{rep(1), rep(2), rep(3)})
	if a, b := reportedRows(one), reportedRows(batch); !reflect.DeepEqual(a, b) || !reflect.DeepEqual(a[1], rep(2)) {
		t.Fatalf("per name %+v, batch %+v", a, b)
	}
	for _, tb := range []*Table{one, batch} {
		tb.SetReplicas(replicas("a", "c"))
		tb.SetReplicas(replicas(names...)) // b is back: its last report with it
	}
	if a, b := reportedRows(one), reportedRows(batch); !reflect.DeepEqual(a, b) || !reflect.DeepEqual(b[1], rep(2)) {
		t.Fatalf("after b came back: per name %+v, batch %+v", a, b)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("SetReportedRows with 2 reports for 3 replicas did not panic")
		}
	}()
	batch.SetReportedRows(make([]policy.Reported, 2))
}
