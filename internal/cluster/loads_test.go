package cluster

import (
	"testing"
	"time"
)

var t0 = time.Unix(1_760_000_000, 0)

func push(peer string, gen, seq uint64, es ...LoadEntry) loadMsg {
	return loadMsg{Origin: peer, Gen: gen, Seq: seq, Entries: es}
}

func snap(peer string, gen, seq uint64, es ...LoadEntry) loadMsg {
	return loadMsg{Origin: peer, Gen: gen, Seq: seq, Full: true, Entries: es}
}

func on(r string, req, tok int64) LoadEntry {
	return LoadEntry{Replica: r, Load: Load{Requests: req, Tokens: tok}}
}

// The load book keeps each alive peer's latest load whatever order, loss or
// repetition the network produces; a step's want is the sum on llm-0.
func TestLoadBookOrdering(t *testing.T) {
	type step struct {
		join, leave string   // membership events
		msg         *loadMsg // else a message
		want        Load     // sum on llm-0 after the step
	}
	m := func(l loadMsg) *loadMsg { return &l }
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"pushes apply in order", []step{
			{join: "a"},
			{msg: m(push("a", 1, 1, on("llm-0", 5, 500))), want: Load{5, 500}},
			{msg: m(push("a", 1, 2, on("llm-0", 0, 0))), want: Load{}},
		}},
		{"a late push cannot resurrect a released load", []step{
			{join: "a"},
			{msg: m(push("a", 1, 2, on("llm-0", 0, 0))), want: Load{}},
			{msg: m(push("a", 1, 1, on("llm-0", 5, 500))), want: Load{}},
		}},
		{"a duplicate push changes nothing", []step{
			{join: "a"},
			{msg: m(push("a", 1, 1, on("llm-0", 2, 20))), want: Load{2, 20}},
			{msg: m(push("a", 1, 1, on("llm-0", 2, 20))), want: Load{2, 20}},
		}},
		{"two peers sum", []step{
			{join: "a"}, {join: "b"},
			{msg: m(push("a", 1, 1, on("llm-0", 2, 20))), want: Load{2, 20}},
			{msg: m(push("b", 7, 1, on("llm-0", 3, 30))), want: Load{5, 50}},
			{msg: m(push("b", 7, 2, on("llm-0", 0, 0))), want: Load{2, 20}},
		}},
		{"a snapshot removes what it omits (lost release repaired)", []step{
			{join: "a"},
			{msg: m(push("a", 1, 1, on("llm-0", 5, 500))), want: Load{5, 500}},
			// push 2 (release) lost
			{msg: m(snap("a", 1, 3)), want: Load{}},
		}},
		{"a push older than the last snapshot is ignored", []step{
			{join: "a"},
			{msg: m(snap("a", 1, 5)), want: Load{}},
			{msg: m(push("a", 1, 4, on("llm-0", 5, 500))), want: Load{}},
		}},
		{"a newer push survives an older snapshot arriving after it", []step{
			{join: "a"},
			{msg: m(push("a", 1, 6, on("llm-0", 1, 10))), want: Load{1, 10}},
			{msg: m(snap("a", 1, 5, on("llm-0", 4, 40))), want: Load{1, 10}},
		}},
		{"a late snapshot is ignored", []step{
			{join: "a"},
			{msg: m(snap("a", 1, 5)), want: Load{}},
			{msg: m(snap("a", 1, 4, on("llm-0", 4, 40))), want: Load{}},
		}},
		{"a restarted peer starts afresh; its old incarnation is ignored", []step{
			{join: "a"},
			{msg: m(push("a", 1, 9, on("llm-0", 5, 500))), want: Load{5, 500}},
			{msg: m(push("a", 2, 1, on("llm-1", 1, 1))), want: Load{}},
			{msg: m(push("a", 1, 10, on("llm-0", 7, 700))), want: Load{}},
		}},
		{"leave drops a peer's loads at once; its stragglers stay out", []step{
			{join: "a"}, {join: "b"},
			{msg: m(push("a", 1, 1, on("llm-0", 5, 500))), want: Load{5, 500}},
			{msg: m(push("b", 1, 1, on("llm-0", 1, 100))), want: Load{6, 600}},
			{leave: "a", want: Load{1, 100}},
			{msg: m(push("a", 1, 2, on("llm-0", 5, 500))), want: Load{1, 100}},
		}},
		{"a peer not known alive is not trusted", []step{
			{msg: m(push("x", 1, 1, on("llm-0", 5, 500))), want: Load{}},
		}},
		{"after leave and rejoin, a straggler older than what was seen is ignored", []step{
			{join: "a"},
			{msg: m(push("a", 1, 5, on("llm-0", 0, 0))), want: Load{}},
			{leave: "a"}, {join: "a"},
			{msg: m(push("a", 1, 3, on("llm-0", 5, 500))), want: Load{}},
			{msg: m(push("a", 1, 6, on("llm-0", 1, 100))), want: Load{1, 100}},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newLoadBook()
			for i, s := range tc.steps {
				switch {
				case s.join != "":
					b.join(s.join)
				case s.leave != "":
					b.leave(s.leave, t0)
				default:
					b.apply(*s.msg, t0)
				}
				if s.join != "" {
					continue // membership alone does not change sums
				}
				if got := b.sum["llm-0"]; got != s.want {
					t.Fatalf("step %d: sum = %+v, want %+v", i, got, s.want)
				}
				for r, l := range b.sum {
					if l.Requests < 0 || l.Tokens < 0 {
						t.Fatalf("step %d: negative sum on %s: %+v", i, r, l)
					}
				}
			}
		})
	}
}

// The local side sends absolute, never-negative values, and forgets
// replicas that went back to zero once that zero has been pushed.
func TestLocalLoads(t *testing.T) {
	l := newLocalLoads()
	if !l.add("llm-0", 1, 100) {
		t.Fatal("first change must kick the push loop")
	}
	if l.add("llm-1", 1, 50) {
		t.Fatal("second change before a push must not kick again")
	}
	seq, es := l.takeDirty()
	if seq != 1 || len(es) != 2 || es[0] != on("llm-0", 1, 100) || es[1] != on("llm-1", 1, 50) {
		t.Fatalf("push 1 = %d %+v", seq, es)
	}
	l.add("llm-0", -1, -100)
	l.add("llm-1", -2, -100) // an unbalanced release
	seq, es = l.takeDirty()
	if seq != 2 || es[0] != on("llm-0", 0, 0) || es[1] != on("llm-1", 0, 0) {
		t.Fatalf("push 2 = %d %+v (want zeros, never negative)", seq, es)
	}
	if _, ok := l.cur["llm-0"]; ok {
		t.Fatal("llm-0 back at zero should be forgotten")
	}
	seq, es = l.snapshot()
	if seq != 3 || len(es) != 0 {
		t.Fatalf("snapshot = %d %+v, want seq 3 and no entries", seq, es)
	}
}
