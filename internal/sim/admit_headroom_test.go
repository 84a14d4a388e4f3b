package sim

import (
	"math"
	"testing"
	"time"

	"github.com/llm-ring/llm-ring/internal/admission"
)

// TestAdmissionHeadroomArrival: the simulator tells the work ledger when a
// request arrived (Ledger.Arrived), so that the headroom's time to first
// token (work_target) includes its wait in the queue. The two requests of
// TestAdmissionFirstToken: c0 goes at once, c1 waits for c0's first token.
// With the target between the larger of c0's TTFT and c1's time from
// dispatch, and c1's TTFT from arrival, c0 is within it and c1 over it:
// the multiplier is max(1, e^(0.05/9) · e^(−0.05)) = 1. Timed from the
// dispatch (the driver not telling the arrival) both would be within:
// e^(0.1/9).
func TestAdmissionHeadroomArrival(t *testing.T) {
	run := func(slo time.Duration, target float64) (map[string]float64, float64) {
		t.Helper()
		st := admSettings(4)
		st.QueueThreshold, st.WorkModel, st.WorkLimitNs, st.WorkTarget = 100, admission.WorkPrefill, int64(time.Microsecond), target
		sp, _ := burstSpec(2, &Admission{Settings: st, SLOTTFT: slo})
		s, got := runBurst(t, &sp, true) // 10,000 tok/s, as in TestAdmissionFirstToken
		l := s.adm.c.Ledger()
		if got["c0"].Status != 200 || got["c1"].Status != 200 {
			t.Fatalf("statuses %d %d", got["c0"].Status, got["c1"].Status)
		}
		return map[string]float64{"c0": got["c0"].TTFTMS, "c1": got["c1"].TTFTMS, "c1wait": wait(t, got["c1"])}, l.Headroom()
	}
	ms, head := run(0, 0) // no SLO, no target: the times only
	if head != 1 || !(ms["c1wait"] > 0) {
		t.Fatalf("no target: headroom %v, c1 waited %v ms", head, ms["c1wait"])
	}
	service1 := ms["c1"] - ms["c1wait"]
	lo, hi := math.Max(ms["c0"], service1), ms["c1"]
	if !(hi > lo) {
		t.Fatalf("no room for the target: c0 %v ms, c1 from dispatch %v ms, from arrival %v ms", ms["c0"], service1, hi)
	}
	slo := 10 * time.Second // deadlines far away: nothing is shed
	target := (lo + hi) / 2 / float64(slo.Milliseconds())
	ms2, head := run(slo, target)
	if ms2["c0"] != ms["c0"] || ms2["c1"] != ms["c1"] {
		t.Fatalf("the target changed the run: %v, want %v", ms2, ms)
	}
	if head != 1 {
		t.Errorf("headroom %v, want 1 (c1's %v ms from arrival is over the target %v ms; timed from dispatch, %v ms, it would be e^(0.1/9))",
			head, hi, target*float64(slo.Milliseconds()), service1)
	}
}

// TestAdmissionDecodeGuard: the simulator tells the ledger each answer's
// time per output token (Ledger.Decoded) against the run's TPOT SLO. Two
// requests of 32 output tokens, both first tokens well within a 5 s
// target: m = e^(0.1/9); with a TPOT SLO of 1 ns both answers are over it
// and take m back to 1; without one, m stays.
func TestAdmissionDecodeGuard(t *testing.T) {
	for _, tpot := range []time.Duration{0, time.Nanosecond} {
		st := admSettings(4)
		st.QueueThreshold, st.WorkModel, st.WorkLimitNs, st.WorkTarget = 100, admission.WorkPrefill, int64(time.Second), 0.5
		sp, _ := burstSpec(2, &Admission{Settings: st, SLOTTFT: 10 * time.Second, SLOTPOT: tpot})
		longAnswers(&sp)
		s, _ := runBurst(t, &sp, false)
		want := math.Exp(0.1 / 9)
		if tpot > 0 {
			want = 1
		}
		if got := s.adm.c.Ledger().Headroom(); math.Abs(got-want) > 1e-12 {
			t.Errorf("TPOT SLO %v: headroom %v, want %v", tpot, got, want)
		}
	}
}

// TestAdmissionDecodeLine: the simulator pairs each answer's TPOT with its
// requests in flight (Ledger.Answered, then Ledger.Decoded), so the decode
// term's line learns one point per answer of more than one token: a burst
// of 10 answers of 32 tokens on one replica teaches 10 and predicts a
// time per output token; 7 teach too few (LedgerMinAnswers) and predict
// none. The rows are the same with and without the term below its limit
// (decode_share 4: nothing held).
func TestAdmissionDecodeLine(t *testing.T) {
	for _, n := range []int{7, 10} {
		var rows [2]map[string]float64
		for k, share := range []float64{0, 4} {
			st := admSettings(n)
			st.QueueThreshold, st.DecodeShare = 100, share
			sp, convs := burstSpec(n, &Admission{Settings: st, SLOTTFT: 10 * time.Second, SLOTPOT: time.Second})
			sp.Model.AnswerMin, sp.Model.AnswerMax = 32, 32
			for i := range convs {
				convs[i].Turns[0].MaxTokens = 32
			}
			s, got := runBurst(t, &sp, false)
			l := s.adm.c.Ledger()
			if l.DecodeAnswers() != n {
				t.Fatalf("%d answers: the line learned %d", n, l.DecodeAnswers())
			}
			_, ok := l.DecodeTPOT("llm-0", 0)
			if ok != (n >= admission.LedgerMinAnswers) {
				t.Fatalf("%d answers: predicted %v", n, ok)
			}
			rows[k] = map[string]float64{}
			for c, r := range got {
				rows[k][c] = r.LatencyMS
			}
		}
		for c, lat := range rows[0] {
			if rows[1][c] != lat {
				t.Fatalf("%d answers: %s's latency %v ms with the term, %v without", n, c, rows[1][c], lat)
			}
		}
	}
}
