package experiment

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/llm-ring/llm-ring/internal/traffic"
)

// Issue #11: the live runner follows a profile's replica events, per-replica
// speeds, on/off arrivals and its choice of sending no conversation header.
// The checks are on the order of events (a request sent after a replica
// left the set never reaches it), not on timing: whether a turn waited for
// its "on" period is a matter of milliseconds on a loaded machine, so the
// arrival gate's arithmetic is tested in traffic (TestArrivalWait) and here
// only run through.
func TestScenarioProfileLive(t *testing.T) {
	p := tinyProfile()
	p.Conversations, p.Concurrency = 12, 4
	no := false
	p.ConversationHeader = &no
	p.Arrivals = &traffic.Arrivals{OnS: 3, OffS: 2}
	p.Replicas = 3
	p.ReplicaSpeeds = []float64{1, 1, 0.5}
	p.ReplicaEvents = []traffic.ReplicaEvent{
		{AtS: 2, Action: traffic.ActionFail, Replica: 1},
		{AtS: 3, Action: traffic.ActionAdd, Replica: 3},
		{AtS: 6, Action: traffic.ActionReturn, Replica: 1},
		{AtS: 8, Action: traffic.ActionRemove, Replica: 3},
	}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	spec := embeddedSpec(t, "consistent")
	spec.Profile = p
	spec.SharedCPU = false
	spec.LoadDelay = 500 * time.Millisecond
	results, err := Run(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	f, rows := readRun(t, results[0])
	if h, _ := f.Config["headers"].(bool); h {
		t.Error("run config says headers were sent; the profile says conversation_header: false")
	}
	if len(f.ReplicaEvents) != 4 {
		t.Fatalf("%d replica events applied, want 4: %+v", len(f.ReplicaEvents), f.ReplicaEvents)
	}
	for _, a := range f.ReplicaEvents {
		if a.Error != "" || a.DoneMS < a.StartMS || a.StartMS < a.AtS*1000 {
			t.Errorf("event %+v: not applied at its time", a)
		}
	}
	failed, added, returned, removed := f.ReplicaEvents[0], f.ReplicaEvents[1], f.ReplicaEvents[2], f.ReplicaEvents[3]
	used := map[string]int{}
	for _, r := range rows {
		used[r.Replica]++
		switch {
		case r.Error != "" || r.Status != 200:
			// Only requests in flight on the crashed replica may fail.
			if r.StartMS > failed.DoneMS || r.EndMS < failed.StartMS {
				t.Errorf("%s turn %d failed outside the crash: %s", r.Conversation, r.Turn, r.Error)
			}
		case r.Replica == "llm-1" && r.StartMS > failed.DoneMS && r.EndMS < returned.StartMS:
			t.Errorf("%s turn %d served by llm-1 while it was down", r.Conversation, r.Turn)
		case r.Replica == "llm-3" && (r.StartMS < added.StartMS || r.StartMS > removed.DoneMS):
			t.Errorf("%s turn %d sent at %.0f ms to llm-3, which was in the set from %.0f to %.0f ms",
				r.Conversation, r.Turn, r.StartMS, added.DoneMS, removed.DoneMS)
		}
	}
	t.Logf("rows by replica %v, errors %d, events %+v", used, f.Errors, f.ReplicaEvents)
	if len(rows) == 0 || used["llm-0"] == 0 {
		t.Fatalf("rows by replica: %v", used)
	}
	// The failed replica's metrics went with it; the returned one reports.
	if _, ok := f.ReplicaMetrics["llm-1"]; !ok {
		t.Errorf("no metrics from the returned llm-1: %v", f.ReplicaMetrics)
	}
}

func TestSpecScenarioValidation(t *testing.T) {
	hetero, err := traffic.LoadProfile(os.DirFS("."), "hetero")
	if err != nil {
		t.Fatal(err)
	}
	churn, err := traffic.LoadProfile(os.DirFS("."), "churn")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		edit   func(s *Spec)
		errHas string
	}{
		{"hetero on its own CPUs", func(s *Spec) { s.Profile = hetero; s.SharedCPU = false }, ""},
		{"hetero on a shared CPU", func(s *Spec) { s.Profile = hetero }, "need a CPU per replica"},
		{"hetero on 4 replicas", func(s *Spec) { s.Profile = hetero; s.SharedCPU = false; s.Replicas = 4 }, "written for 3 replicas"},
		{"churn and a scale-up", func(s *Spec) { s.Profile = churn; s.SharedCPU = false; s.ScaleAt = time.Second }, "not both"},
		{"churn on an external router", func(s *Spec) {
			s.Profile, s.SharedCPU, s.RouterURL = churn, false, "http://127.0.0.1:1"
		}, "only embedded replicas can follow"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := embeddedSpec(t, "consistent")
			tt.edit(&s)
			err := s.Validate()
			switch {
			case tt.errHas == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tt.errHas != "" && (err == nil || !strings.Contains(err.Error(), tt.errHas)):
				t.Fatalf("error %v, want one containing %q", err, tt.errHas)
			}
		})
	}
}
