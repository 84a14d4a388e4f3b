package policy

// Consistent sends each conversation to its ring home: the replica owning
// the first virtual node clockwise from hash(key). Adding a replica moves
// only about 1/N of the keys, but the policy is blind to load. On failover
// the next replica clockwise takes the request.
type Consistent struct{}

var _ Policy = Consistent{}

// Home: the key's ring home (consistent), or the home was within the cap
// (bounded, llm-aware).
const Home Reason = "home"

// Name implements Policy.
func (Consistent) Name() string { return "consistent" }

// Pick implements Policy.
func (Consistent) Pick(req *Request, v *View, d *Decision) {
	home := v.ringHome(req.Hash)
	*d = Decision{Replica: home, Reason: Home, Charge: wholeCost(req)}
	d.Trace.begin("consistent", req, v)
	d.Trace.Home = home
	d.Trace.Explain = explainConsistent
}

func explainConsistent(d *Decision, b []byte) []byte {
	t := &d.Trace
	return text(b).s("\n  hash=").hex16(t.Hash).s(" → ring home ").name(t, t.Home)
}
