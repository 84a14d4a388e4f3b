package policy

// RoundRobin rotates through the replicas sorted by name:
//
//	replica = Seq mod N
//
// (on failover, the next replica by name that has not failed).
// Consecutive turns of a conversation land on different replicas, so its
// cache is almost never reused: the baseline.
type RoundRobin struct{}

var _ Policy = RoundRobin{}

// Name implements Policy.
func (RoundRobin) Name() string { return "round-robin" }

// Pick implements Policy.
func (RoundRobin) Pick(req *Request, v *View) Decision {
	n := len(v.Names)
	r := v.firstAllowed(int(req.Seq % uint64(n)))
	d := Decision{Replica: r, Reason: Rotate, Charge: wholeCost(req)}
	d.Trace.begin("round-robin", req, v)
	d.Trace.Seq = req.Seq
	return d
}

// wholeCost is a request's token cost without any cache: prompt + output.
func wholeCost(req *Request) int64 { return int64(req.PromptTokens) + int64(req.OutputTokens) }
