package policy

// ModN hashes the conversation key onto the replicas sorted by name:
//
//	replica = hash(key) mod N
//
// Affinity is perfect while N is fixed; when N changes, most keys move
// (about 3/4 from 3 to 4 replicas), losing their caches.
type ModN struct{}

var _ Policy = ModN{}

// Name implements Policy.
func (ModN) Name() string { return "mod-n" }

// Pick implements Policy.
func (ModN) Pick(req *Request, v *View) Decision {
	r := v.firstAllowed(int(req.Hash % uint64(len(v.Names))))
	d := Decision{Replica: r, Reason: Hash, Charge: wholeCost(req)}
	d.Trace.begin("mod-n", req, v)
	return d
}
