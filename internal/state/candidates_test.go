package state

import (
	"github.com/llm-ring/llm-ring/internal/replicaset"
	"slices"
	"testing"
)

func names(rs []replicaset.Replica) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.Name
	}
	return out
}

// TestCandidatesAreTheFailoverOrder: each candidate is what Route picks with
// the earlier ones excluded; computing them charges nothing and does not
// advance round-robin's sequence.
func TestCandidatesAreTheFailoverOrder(t *testing.T) {
	for _, pol := range []string{"consistent", "bounded", "llm-aware", "round-robin"} {
		t.Run(pol, func(t *testing.T) {
			tb := newTable(t, pol)
			tb.SetReplicas(replicas("a", "b", "c", "d"))
			tb.SetHealthy("d", false)
			r := in("conv-1", 400, 20)
			tk, _, err := tb.Route(r, 1)
			if err != nil {
				t.Fatal(err)
			}
			before := tb.Status()
			got := names(tb.Candidates(nil, r, &tk, 1, 5))
			if after := tb.Status(); !slices.EqualFunc(before.Replicas, after.Replicas, func(x, y ReplicaStatus) bool { return x.Load == y.Load }) {
				t.Fatalf("Candidates charged load: %+v → %+v", before.Replicas, after.Replicas)
			}
			// The unhealthy replica and the pick itself are never candidates.
			if len(got) != 2 || slices.Contains(got, "d") || slices.Contains(got, tk.Replica.Name) {
				t.Fatalf("candidates = %v (pick %s, d down), want the 2 others", got, tk.Replica.Name)
			}
			// The same as routing with the earlier ones excluded (then
			// returning that load, which Candidates never took).
			exclude := []string{tk.Replica.Name}
			for i, want := range got {
				if pol == "round-robin" {
					break // its sequence advances with each Route below
				}
				tk2, _, err := tb.Route(r, 1, exclude...)
				if err != nil {
					t.Fatal(err)
				}
				tb.Release(&tk2, Outcome{}, 1)
				if tk2.Replica.Name != want {
					t.Fatalf("candidate %d = %s, failover Route picks %s", i, want, tk2.Replica.Name)
				}
				exclude = append(exclude, want)
			}
			if n := names(tb.Candidates(nil, r, &tk, 1, 1)); len(n) != 1 || n[0] != got[0] {
				t.Fatalf("n=1: %v, want [%s]", n, got[0])
			}
			if n := tb.Candidates(nil, r, &tk, 1, 5, got[0]); len(n) != 1 || n[0].Name != got[1] {
				t.Fatalf("with %s excluded: %v, want [%s]", got[0], names(n), got[1])
			}
		})
	}
}

// TestCandidatesKeepRoundRobinSequence: a proxy and an EPP on the same
// traffic make the same round-robin picks although the EPP asks for
// candidates after each pick.
func TestCandidatesKeepRoundRobinSequence(t *testing.T) {
	a, b := newTable(t, "round-robin"), newTable(t, "round-robin")
	a.SetReplicas(replicas("x", "y", "z"))
	b.SetReplicas(replicas("x", "y", "z"))
	for i := range 6 {
		r := in("c", 10, 1)
		ta, _, _ := a.Route(r, int64(i))
		tb, _, _ := b.Route(r, int64(i))
		b.Candidates(nil, r, &tb, int64(i), 2)
		if ta.Replica.Name != tb.Replica.Name {
			t.Fatalf("request %d: %s without candidates, %s with", i, ta.Replica.Name, tb.Replica.Name)
		}
		a.Release(&ta, Outcome{}, int64(i))
		b.Release(&tb, Outcome{}, int64(i))
	}
}
