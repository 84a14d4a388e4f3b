package policy

// ModN sends a conversation to replica hash(key) mod N. A conversation stays
// on one replica while the set is stable, but adding or removing a replica
// moves almost every conversation (about N/(N+1) of the keys).
type ModN struct{}

var _ Policy = ModN{}

// Hash: mod-n's hash(key) mod N.
const Hash Reason = "hash"

// Name implements Policy.
func (ModN) Name() string { return "mod-n" }

// Pick implements Policy.
func (ModN) Pick(req *Request, v *View, d *Decision) {
	r := v.firstAllowed(int(req.Hash % uint64(len(v.Names))))
	*d = Decision{Replica: r, Reason: Hash, Charge: wholeCost(req)}
	d.Trace.begin("mod-n", req, v)
	d.Trace.Explain = explainModN
}

func explainModN(d *Decision, b []byte) []byte {
	t := &d.Trace
	return text(b).s("\n  hash=").hex16(t.Hash).s(": mod ").i(t.N).s(" = ").i(d.Replica).s(" → ").name(t, d.Replica)
}
