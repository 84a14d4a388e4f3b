package policy

// RoundRobin sends request k to replica k mod N (replicas sorted by name).
// It ignores conversations, so a conversation's turns land on different
// replicas and rarely find their cache: the study's lower bound.
type RoundRobin struct{}

var _ Policy = RoundRobin{}

// Rotate: round-robin's turn.
const Rotate Reason = "rotate"

// Name implements Policy.
func (RoundRobin) Name() string { return "round-robin" }

// Pick implements Policy.
func (RoundRobin) Pick(req *Request, v *View, d *Decision) {
	n := len(v.Names)
	r := v.firstAllowed(int(req.Seq % uint64(n)))
	*d = Decision{Replica: r, Reason: Rotate, Charge: wholeCost(req)}
	d.Trace.begin("round-robin", req, v)
	d.Trace.Explain = explainRoundRobin
}

func explainRoundRobin(d *Decision, b []byte) []byte {
	t := &d.Trace
	return text(b).s("\n  request #").u(t.Seq).s(": ").u(t.Seq).s(" mod ").i(t.N).s(" = ").i(d.Replica).
		s(" → ").name(t, d.Replica)
}
