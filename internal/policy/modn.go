package policy

import (
	"fmt"
	"strings"
)

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

func explainModN(d *Decision, b *strings.Builder) {
	t := &d.Trace
	fmt.Fprintf(b, "\n  hash=%016x: mod %d = %d → %s", t.Hash, t.N, d.Replica, t.name(d.Replica))
}
