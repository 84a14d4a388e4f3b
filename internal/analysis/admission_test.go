package analysis

import (
	"math"
	"testing"

	"github.com/llm-ring/llm-ring/internal/admission"
	"github.com/llm-ring/llm-ring/internal/record"
)

func TestMaxMinFair(t *testing.T) {
	// 10 good requests over demands 2, 10, 10: 2 for the small one, 4 each.
	got := MaxMinFair(10, func(y func(float64)) { y(10); y(2); y(10) })
	if got[0] != 4 || got[1] != 2 || got[2] != 4 {
		t.Fatalf("fair shares %v, want [4 2 4]", got)
	}
}

// TestAdmissionRows: stage 0 of one run, flows a (3 requests, 1 shed) and
// b (1 request), bands 0 and 10; SLO 100 ms.
func TestAdmissionRows(t *testing.T) {
	row := func(flow string, band int, status int, ttft, wait float64) record.Request {
		return record.Request{Conversation: admission.RowTag{Priority: band, Flow: flow, WaitMS: wait}.Append("stage0@4/1.0"),
			Status: status, TTFTMS: ttft, LatencyMS: ttft, PredictedN: 1}
	}
	rs := []record.Request{row("a", 0, 200, 50, 0), row("a", 0, 200, 150, 20), row("a", 0, 429, 0, 0), row("b", 10, 200, 10, 0)}
	f := FieldOf(rs, 1000, SLO{TTFTMS: 100, TPOTMS: 100})
	if f.ShedShare != 0.25 || f.GoodShare != 0.5 {
		t.Errorf("shed %v good %v, want 0.25 and 0.5", f.ShedShare, f.GoodShare)
	}
	got := AdmissionRows([]Run{{Info: record.Run{RunID: "r", Policy: "p"}, Requests: rs}}, SLO{TTFTMS: 100, TPOTMS: 100})
	want := map[string][4]float64{ // requests, good, fair share, shed
		"band/0": {3, 1, math.NaN(), 1.0 / 3}, "band/10": {1, 1, math.NaN(), 0},
		"flow/a": {3, 1, 1, 1.0 / 3}, "flow/b": {1, 1, 1, 0},
		// Within each band a flow alone: its fair share is the band's good.
		"band-flow/0/a": {3, 1, 1, 1.0 / 3}, "band-flow/10/b": {1, 1, 1, 0},
	}
	if len(got) != len(want) {
		t.Fatalf("%d rows, want %d: %+v", len(got), len(want), got)
	}
	for _, r := range got {
		w := want[r.Kind+"/"+r.Class]
		if float64(r.Requests) != w[0] || float64(r.Good) != w[1] || math.Abs(r.Shed-w[3]) > 1e-12 ||
			(r.Kind != "band" && r.FairShare != w[2]) || (r.Kind == "band" && !math.IsNaN(r.FairShare)) {
			t.Errorf("%s %s: %+v, want %v", r.Kind, r.Class, r, w)
		}
	}
}
