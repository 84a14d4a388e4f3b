package traffic

import (
	"math"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/llm-ring/llm-ring/profiles"
)

func TestEmbeddedWorkloadsParse(t *testing.T) {
	names := profiles.WorkloadNames()
	if strings.Join(names, ",") != "lora,low-sharing,multi-model,multi-round,shared-prefix" {
		t.Fatalf("workloads %v", names)
	}
	for _, n := range names {
		if _, err := LoadWorkload(fstest.MapFS{}, n); err != nil {
			t.Errorf("%s: %v", n, err)
		}
	}
	if _, err := LoadWorkload(fstest.MapFS{}, "nope"); err == nil || !strings.Contains(err.Error(), "embedded: lora, low-sharing") {
		t.Errorf("unknown workload: %v", err)
	}
	_, err := ParseWorkload([]byte(`{"name":"x","kind":"shared-prefix","output_tokens":5,"groups":0}`))
	if err == nil || !strings.Contains(err.Error(), "groups") || !strings.Contains(err.Error(), "system_tokens") {
		t.Errorf("bad shared-prefix: %v", err)
	}
	if _, err := ParseWorkload([]byte(`{"name":"x","kind":"zipf","output_tokens":5}`)); err == nil || !strings.Contains(err.Error(), "kind") {
		t.Errorf("bad kind: %v", err)
	}
}

func TestOpenArrivalsStages(t *testing.T) {
	st := Stages{Rates: []float64{1, 4}, StageS: 10, WarmupS: 2}
	a := OpenArrivals(st, 1)
	count := map[int]int{}
	for i, x := range a {
		count[x.Stage]++
		if i > 0 && x.AtS < a[i-1].AtS {
			t.Fatal("arrivals out of order")
		}
	}
	// constant gaps: 2 s at 1/s, then 10 at 1/s, then 40 at 4/s
	if count[-1] != 2 || count[0] != 10 || count[1] != 40 {
		t.Fatalf("constant arrivals per stage %v, want warm-up 2, 10, 40", count)
	}
	st.Poisson = true
	p1, p2, p3 := OpenArrivals(st, 1), OpenArrivals(st, 1), OpenArrivals(st, 2)
	if len(p1) != len(p2) || p1[5] != p2[5] {
		t.Fatal("Poisson arrivals are not deterministic")
	}
	if len(p1) == len(p3) && p1[5] == p3[5] {
		t.Fatal("Poisson arrivals do not depend on the seed")
	}
	if err := (Stages{Rates: []float64{0}, StageS: 1}).Validate(); err == nil {
		t.Error("rate 0 accepted")
	}
}

func TestStageConversationRoundTrip(t *testing.T) {
	k, r, warm, ok := ParseStage(StageConversation(Arrival{Stage: 3, Rate: 2.5}, 7, 1))
	if k != 3 || r != 2.5 || warm || !ok {
		t.Fatalf("got %d %g %v %v", k, r, warm, ok)
	}
	if _, _, warm, ok := ParseStage(StageConversation(Arrival{Stage: -1}, 1, 0)); !warm || !ok {
		t.Fatal("warm-up not recognised")
	}
	if _, _, _, ok := ParseStage("c0001"); ok {
		t.Fatal("a closed-loop conversation parsed as a stage")
	}
}

func TestWorkloadRequestsShareWhatTheyShould(t *testing.T) {
	arr := OpenArrivals(Stages{Rates: []float64{10}, StageS: 10}, 1)
	sp := Workload{Name: "s", Kind: KindSharedPrefix, Groups: 2, PromptsPerGroup: 3, SystemTokens: 1000, QuestionTokens: 100, OutputTokens: 8}
	reqs := sp.Requests(arr, 1)
	for _, r := range reqs {
		if r.InputLength != 1124 || len(r.HashIDs) != 3 || r.HashIDs[1] != r.HashIDs[0]+1 {
			t.Fatalf("shared-prefix request %+v", r.TraceRequest)
		}
	}
	mr := Workload{Name: "m", Kind: KindMultiRound, SystemTokens: 512, QuestionTokens: 256, AnswerTokens: 256, Rounds: 3, RoundGapS: 1, OutputTokens: 8}
	reqs = mr.Requests(arr[:6], 1) // 6 arrivals: 2 users of 3 rounds
	if len(reqs) != 6 {
		t.Fatalf("%d multi-round requests, want 2 users × 3 rounds", len(reqs))
	}
	// a user's round 2 repeats round 1's blocks and adds to them
	var r0, r1 *WorkloadRequest
	for i := range reqs {
		if strings.HasSuffix(reqs[i].Conversation, "/0.0") {
			r0 = &reqs[i]
		}
		if strings.HasSuffix(reqs[i].Conversation, "/0.1") {
			r1 = &reqs[i]
		}
	}
	if r0.InputLength != 768 || r1.InputLength != 1280 || r1.HashIDs[1] != r0.HashIDs[1] || len(r1.HashIDs) != 3 {
		t.Fatalf("rounds %+v and %+v", r0.TraceRequest, r1.TraceRequest)
	}
}

func TestIdealCachedShareByHand(t *testing.T) {
	reqs := []TraceRequest{
		{InputLength: 1024, HashIDs: []int64{1, 2}},    // nothing seen: 0
		{InputLength: 1200, HashIDs: []int64{1, 2, 3}}, // 1024 of 1200
		{InputLength: 700, HashIDs: []int64{1, 9}},     // 512 of 700
		{InputLength: 1300, HashIDs: []int64{1, 2, 3}}, // 1024 + 176 (block 3 seen 176 long) of 1300
		{InputLength: 300, HashIDs: []int64{1}},        // 300 of 300
		{InputLength: 512, HashIDs: []int64{2}},        // a 2 not after 1: 0
	}
	want := float64(1024+512+1200+300) / float64(1024+1200+700+1300+300+512)
	if got := IdealCachedShare(reqs); math.Abs(got-want) > 1e-12 {
		t.Fatalf("ideal %v, want %v", got, want)
	}
}
