package policy

// Least sends each request to the replica with the fewest requests in
// flight, as KubeAI's default LeastLoad strategy does. Ties go to the
// replica met first walking the ring clockwise from the conversation's home,
// so that a lone conversation stays home (keeping its cache) and router
// instances with the same view agree. It is the worked example of adding a
// policy (docs/architecture.md, "Adding a policy"): this file and one registry row.
//
// Source: substratusai/kubeai, internal/loadbalancer/balance_least_load.go
// (commit 2f32ef498da6): the endpoint with the fewest in-flight requests,
// keeping the first one met on a tie — but it ranges over a Go map, whose
// order the runtime randomises, so KubeAI's ties are effectively random.
// The ring-order rule is the deterministic stand-in (a tie lands on a
// different replica for different conversations, as a random pick would,
// but the same one for the same conversation).
type Least struct{}

var _ Policy = Least{}

// Fewest: the replica had the fewest requests in flight.
const Fewest Reason = "fewest"

// Name implements Policy.
func (Least) Name() string { return "least-loaded" }

// Pick implements Policy.
func (Least) Pick(req *Request, v *View, d *Decision) {
	*d = Decision{}
	d.Trace.begin("least-loaded", req, v)
	d.Trace.Explain = explainLeast
	home := v.ringHome(req.Hash)
	d.Trace.Home = home
	// The minimum first (O(N)), then the ring walk stops at the first
	// replica that has it: usually within a few steps of the home.
	fewest := v.Rows[v.leastRequests()].Load.Requests
	best := home
	if v.Rows[home].Load.Requests != fewest {
		pos := v.Ring.Search(req.Hash)
		for i := 0; i < v.Ring.Len(); i++ {
			if r := v.Ring.Replica(pos + i); !v.Excluded(r) && v.Rows[r].Load.Requests == fewest {
				best = r
				break
			}
		}
		if v.Rows[best].Load.Requests != fewest { // not on the ring walk (cannot happen with a full ring)
			best = v.leastRequests()
		}
	}
	for r := range min(len(v.Names), MaxTraceLoads) {
		d.Trace.Loads[r] = v.Rows[r].Load.Requests
	}
	d.Replica, d.Reason, d.Charge = best, Fewest, wholeCost(req)
}

func explainLeast(d *Decision, b []byte) []byte {
	t := &d.Trace
	w := t.writeLoads(text(b).s("\n  in flight (requests)"))
	if d.Replica == t.Home {
		return w.s("\n  ring home ").name(t, t.Home).s(" has the fewest → ").name(t, d.Replica)
	}
	return w.s("\n  ring home ").name(t, t.Home).s(" is busier; first replica with the fewest clockwise from it → ").
		name(t, d.Replica)
}
