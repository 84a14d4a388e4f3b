package traffic

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/llm-ring/llm-ring/internal/model"
)

// Issue #11: agents share one system prompt of at least 2,000 tokens, send
// tool-style later turns, and no conversation header.
func TestAgentsShareALongSystemPrompt(t *testing.T) {
	p := mustLoad(t, "agents")
	if p.Headers() {
		t.Error("agents: Headers() is true, want false (conversation_header: false)")
	}
	for seed := int64(1); seed <= 3; seed++ {
		cs := mustGenerate(t, p, seed)
		sys := cs[0].System
		if n := model.Count(sys); n < 2000 {
			t.Fatalf("seed %d: system prompt of %d tokens, want ≥ 2000", seed, n)
		}
		if len(sys) > longPromptChars(p.SystemPromptTokens) {
			t.Fatalf("seed %d: system prompt of %d bytes passes the bound Validate uses (%d)", seed, len(sys), longPromptChars(p.SystemPromptTokens))
		}
		for i := range cs {
			if cs[i].System != sys {
				t.Fatalf("seed %d: %s has another system prompt", seed, cs[i].ID)
			}
			for ti, turn := range cs[i].Turns[1:] {
				if !strings.HasPrefix(turn.User, "Tool result: {") {
					t.Fatalf("seed %d: %s turn %d is not a tool result: %q", seed, cs[i].ID, ti+2, turn.User)
				}
			}
		}
	}
}

// Issue #11: rag's documents are each pasted, at the start of the first
// turn, by many conversations.
func TestRagDocumentsAreReused(t *testing.T) {
	p := mustLoad(t, "rag")
	g, err := NewGenerator(p, 1)
	if err != nil {
		t.Fatal(err)
	}
	docs := g.SharedDocuments()
	if len(docs) != 6 {
		t.Fatalf("%d shared documents, want 6", len(docs))
	}
	for i, d := range docs {
		if n := model.Count(d); n < 1200 || n > 1800 {
			t.Errorf("document %d: %d tokens, want about 1,500", i, n)
		}
	}
	uses := make([]int, len(docs))
	cs := mustGenerate(t, p, 1)
	for i := range cs {
		c := &cs[i]
		if c.Doc != (c.SharedDoc > 0) {
			t.Fatalf("%s: doc %v but shared_doc %d", c.ID, c.Doc, c.SharedDoc)
		}
		if c.SharedDoc == 0 {
			continue
		}
		uses[c.SharedDoc-1]++
		if !strings.HasPrefix(c.Turns[0].User, docs[c.SharedDoc-1]+"\n\n") {
			t.Fatalf("%s: the first turn does not start with shared document %d", c.ID, c.SharedDoc-1)
		}
	}
	for i, n := range uses {
		// 100 conversations × 0.6 / 6 documents: about 10 each.
		if n < 3 {
			t.Errorf("document %d pasted by %d conversations, want many (uses %v)", i, n, uses)
		}
	}
}

// Issue #11: a quarter of hot's traffic (requests, not only conversations)
// carries the hot prefix.
func TestHotShare(t *testing.T) {
	p := mustLoad(t, "hot")
	p.Conversations = 2000 // conversation i is the same as in a run of 100: a larger sample of the same seed
	g, err := NewGenerator(p, 1)
	if err != nil {
		t.Fatal(err)
	}
	if n := model.Count(g.HotPrompt()); n < p.Hot.Tokens {
		t.Fatalf("hot prompt of %d tokens, want ≥ %d", n, p.Hot.Tokens)
	}
	hot, all := 0, 0
	cs := mustGenerate(t, p, 1)
	for i := range cs {
		all += len(cs[i].Turns)
		if cs[i].Hot != (cs[i].System == g.HotPrompt()) {
			t.Fatalf("%s: Hot %v disagrees with its system prompt", cs[i].ID, cs[i].Hot)
		}
		if cs[i].Hot {
			hot += len(cs[i].Turns)
		}
	}
	// ~13,000 requests in conversations of 4-8 turns: the share's standard
	// deviation is about 0.011; 0.21..0.29 is more than 3.5 of them.
	if share := float64(hot) / float64(all); share < 0.21 || share > 0.29 {
		t.Errorf("hot share of requests %.3f over %d, want about 0.25", share, all)
	}
}

func TestArrivalWait(t *testing.T) {
	p := Profile{Arrivals: &Arrivals{OnS: 20, OffS: 40}}
	tests := []struct {
		t, want float64
	}{
		{0, 0},      // the run starts "on"
		{19.5, 0},   // still on
		{20, 40},    // off starts: wait for 60
		{35, 25},    // in the middle of "off"
		{59.9, 0.1}, // just before the next "on"
		{60, 0},     // on again
		{145, 35},   // third period: off from 140 to 180
		{-1, 0},     // before the start: no wait
	}
	for _, tt := range tests {
		if got := p.ArrivalWait(tt.t); got < tt.want-1e-9 || got > tt.want+1e-9 {
			t.Errorf("ArrivalWait(%g) = %g, want %g", tt.t, got, tt.want)
		}
	}
	var none Profile
	if w := none.ArrivalWait(25); w != 0 {
		t.Errorf("without arrivals: wait %g, want 0", w)
	}
	alwaysOn := Profile{Arrivals: &Arrivals{OnS: 5, OffS: 0}}
	if w := alwaysOn.ArrivalWait(7); w != 0 {
		t.Errorf("off_s 0: wait %g, want 0", w)
	}
}

func TestReplicaSpeed(t *testing.T) {
	p := mustLoad(t, "hetero")
	for i, want := range []float64{1, 1, 0.5, 1} { // replica 3 is beyond the list
		if got := p.ReplicaSpeed(i); got != want {
			t.Errorf("ReplicaSpeed(%d) = %g, want %g", i, got, want)
		}
	}
}

func TestReplicaEventsValidation(t *testing.T) {
	ev := func(at float64, action string, replica int) ReplicaEvent {
		return ReplicaEvent{AtS: at, Action: action, Replica: replica}
	}
	tests := []struct {
		name   string
		n      int
		events []ReplicaEvent
		errHas string // "" for valid
	}{
		{"churn's shape", 3, []ReplicaEvent{ev(60, "fail", 1), ev(100, "add", 3), ev(150, "return", 1), ev(250, "remove", 3)}, ""},
		{"remove an initial replica", 2, []ReplicaEvent{ev(5, "remove", 0)}, ""},
		{"unknown action", 3, []ReplicaEvent{ev(5, "crash", 1)}, `replica_events[0].action: must be fail, return, add or remove, got "crash"`},
		{"index out of range", 3, []ReplicaEvent{ev(5, "fail", 3)}, "replica_events[0].replica: fail of replica 3: out of range, replicas 0 to 2"},
		{"negative index", 3, []ReplicaEvent{ev(5, "remove", -1)}, "replica_events[0].replica: remove of replica -1: out of range"},
		{"remove before add", 3, []ReplicaEvent{ev(5, "remove", 3), ev(9, "add", 3)}, "replica_events[0].replica: remove of replica 3: out of range"},
		{"add skips an index", 3, []ReplicaEvent{ev(5, "add", 4)}, "replica_events[0].replica: an add creates the next replica, 3, got 4"},
		{"return without a failure", 3, []ReplicaEvent{ev(5, "return", 1)}, "replica_events[0].replica: return of replica 1, which has not failed"},
		{"fail twice", 3, []ReplicaEvent{ev(5, "fail", 1), ev(6, "fail", 1)}, "replica_events[1].replica: fail of replica 1, which has failed"},
		{"remove a failed replica", 3, []ReplicaEvent{ev(5, "fail", 1), ev(6, "remove", 1)}, "replica_events[1].replica: remove of replica 1, which has failed"},
		{"return a removed replica", 3, []ReplicaEvent{ev(5, "remove", 1), ev(6, "return", 1)}, "replica_events[1].replica: return of replica 1, which has not failed"},
		{"out of time order", 3, []ReplicaEvent{ev(50, "fail", 1), ev(40, "return", 1)}, "replica_events[1].at_s: 40 is before the previous event's 50"},
		{"negative time", 3, []ReplicaEvent{ev(-1, "fail", 1)}, "replica_events[0].at_s: must be between 0 and 86400"},
		{"no replica left up", 2, []ReplicaEvent{ev(5, "fail", 0), ev(6, "remove", 1)}, "replica_events[1].replica: remove of replica 1 would leave no replica up"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateReplicaEvents(tt.n, tt.events)
			switch {
			case tt.errHas == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tt.errHas != "" && (err == nil || !strings.Contains(err.Error(), tt.errHas)):
				t.Fatalf("error %v, want one containing %q", err, tt.errHas)
			}
		})
	}
}

// TestParseScenarioKeys: the optional keys are validated like the others,
// each error naming its key.
func TestParseScenarioKeys(t *testing.T) {
	tests := []struct {
		name   string
		edit   func(m map[string]any)
		errHas string
	}{
		{"all keys valid", func(m map[string]any) {
			m["replicas"] = 3
			m["replica_speeds"] = []float64{1, 0.5}
			m["replica_events"] = []any{map[string]any{"at_s": 5, "action": "add", "replica": 3}}
			m["arrivals"] = map[string]any{"on_s": 10, "off_s": 5}
			m["conversation_header"] = false
			m["turn_style"] = "tool"
			m["documents"] = 2
		}, ""},
		{"turn style unknown", func(m map[string]any) { m["turn_style"] = "agent" }, `turn_style: must be "chat" or "tool", got "agent"`},
		{"header not a bool", func(m map[string]any) { m["conversation_header"] = "no" }, "conversation_header: must be true or false"},
		{"speeds without replicas", func(m map[string]any) { m["replica_speeds"] = []float64{1, 0.5} }, "replicas: missing"},
		{"zero speed", func(m map[string]any) { m["replicas"] = 2; m["replica_speeds"] = []float64{1, 0} }, "replica_speeds[1]: must be above 0"},
		{"more speeds than replicas", func(m map[string]any) { m["replicas"] = 1; m["replica_speeds"] = []float64{1, 1} }, "replica_speeds: 2 speeds for 1 replicas"},
		{"event with an unknown key", func(m map[string]any) {
			m["replicas"] = 3
			m["replica_events"] = []any{map[string]any{"at_s": 5, "action": "add", "replica": 3, "name": "x"}}
		}, "replica_events[0].name: unknown key"},
		{"event without an action", func(m map[string]any) {
			m["replicas"] = 3
			m["replica_events"] = []any{map[string]any{"at_s": 5, "replica": 3}}
		}, "replica_events[0].action: missing"},
		{"bad event", func(m map[string]any) {
			m["replicas"] = 3
			m["replica_events"] = []any{map[string]any{"at_s": 5, "action": "return", "replica": 0}}
		}, "replica_events[0].replica: return of replica 0, which has not failed"},
		{"arrivals never on", func(m map[string]any) { m["arrivals"] = map[string]any{"on_s": 0, "off_s": 5} }, "arrivals.on_s: must be above 0"},
		{"arrivals missing off", func(m map[string]any) { m["arrivals"] = map[string]any{"on_s": 3} }, "arrivals.off_s: missing"},
		{"hot share of 0", func(m map[string]any) { m["hot"] = map[string]any{"share": 0, "tokens": 100} }, "hot.share: must be above 0"},
		{"hot of no tokens", func(m map[string]any) { m["hot"] = map[string]any{"share": 0.3, "tokens": 0} }, "hot.tokens: must be between 1"},
		{"hot prompt too long for the context", func(m map[string]any) { m["hot"] = map[string]any{"share": 0.3, "tokens": 3000} }, "max_context_tokens: 2000 is too small"},
		{"long system prompt too long for the context", func(m map[string]any) { m["system_prompt_tokens"] = 3000 }, "max_context_tokens: 2000 is too small"},
		{"documents without doc_share", func(m map[string]any) { m["documents"] = 3; m["doc_share"] = 0; m["doc_words"] = 0 }, "documents: shared documents need doc_share > 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := validProfile()
			tt.edit(m)
			data, err := json.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			_, err = ParseProfile(data)
			switch {
			case tt.errHas == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tt.errHas != "" && (err == nil || !strings.Contains(err.Error(), tt.errHas)):
				t.Fatalf("error %v, want one containing %q", err, tt.errHas)
			}
		})
	}
}

// BenchmarkScenarioGenerate is a full run of each scenario profile that
// draws more than the study's profiles: long prompts (agents, hot) and
// shared documents (rag) are built once per generator.
func BenchmarkScenarioGenerate(b *testing.B) {
	for _, name := range []string{"agents", "rag", "hot"} {
		p := mustLoad(b, name)
		b.Run("profile="+name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				cs, err := Generate(p, 1)
				if err != nil {
					b.Fatal(err)
				}
				sink += len(cs)
			}
		})
	}
}
