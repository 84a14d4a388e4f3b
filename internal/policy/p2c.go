package policy

// P2C is the power of two choices, as SGLang's model gateway (formerly
// sgl-router) implements its `power_of_two` policy: draw two distinct
// replicas, send the request to the less loaded one.
//
//	m      = replicas not excluded (in name order)
//	i₁     = h₁ mod m,  i₂ = (i₁ + 1 + h₂ mod (m−1)) mod m   (two distinct draws)
//	load   = KV-cache use, when both candidates report it (reported_load)
//	         requests in flight (router side), otherwise
//	pick   = candidate 1 if load₁ ≤ load₂, else candidate 2
//
// Source: sgl-project/sglang, sgl-model-gateway/src/policies/power_of_two.rs
// (commit 61c660a3c254): the second draw is offset from the first so that
// the two differ; the loads compared are the token loads the gateway's load
// monitor polls from each worker when both candidates have one, else both
// fall back to the gateway's own in-flight request counts; `load1 <= load2`
// keeps the first candidate on a tie.
//
// Deviations. SGLang draws with a thread RNG; here h₁ = mix(hash(key) ⊕
// mix(seq+1)) and h₂ = mix(h₁) derive the draws from the request (its
// conversation key and the driver's sequence number), so a decision can be
// replayed and router instances agree. The token load SGLang's monitor reads
// (tokens held on the worker, polled every worker_startup_check_interval,
// 30 s by default) is stood for by the replica-reported KV-cache use, sampled
// every 200 ms: on replicas with equal cache sizes the two order the same.
//
// Its settings (config key policies.p2c) are the struct itself.
type P2C struct {
	// ReportedLoad: compare the replicas' reported KV-cache use when both
	// candidates report it (SGLang's load-monitor path). Default true; false
	// always compares requests in flight.
	ReportedLoad bool `json:"reported_load"`
}

var _ Policy = (*P2C)(nil)

// Reason codes of p2c.
const (
	// P2CFewer: of the two drawn, the one with fewer requests in flight (or
	// the first drawn, on a tie).
	P2CFewer Reason = "p2c-fewer"
	// P2CLessKV: of the two drawn, the one reporting less KV-cache use (or
	// the first drawn, on a tie).
	P2CLessKV Reason = "p2c-less-kv"
	// P2COnly: only one replica was allowed.
	P2COnly Reason = "p2c-only"
)

// Name implements Policy.
func (*P2C) Name() string { return "p2c" }

// Validate implements Settings: p2c has no numeric settings.
func (*P2C) Validate() error { return nil }

// Slots of a p2c trace.
const (
	p2Allowed IntSlot = iota // replicas allowed
	p2First                  // the first draw, among the allowed
	p2Second                 // the second
)

// p2Load is a p2c candidate's one column: its KV use or requests in flight.
const p2Load Col = 0

// Pick implements Policy.
func (p *P2C) Pick(req *Request, v *View, d *Decision) {
	*d = Decision{}
	t := &d.Trace
	t.begin("p2c", req, v)
	t.Explain = explainP2C
	d.Charge = wholeCost(req)
	m := v.allowed()
	t.setInt(p2Allowed, int64(m))
	if m <= 1 {
		d.Replica, d.Reason = v.firstAllowed(0), P2COnly
		return
	}
	h1 := mix64(req.Hash ^ mix64(req.Seq+1))
	h2 := mix64(h1)
	i1 := int(h1 % uint64(m))
	i2 := (i1 + 1 + int(h2%uint64(m-1))) % m
	a, b := v.nthAllowed(i1), v.nthAllowed(i2)
	ra, rb := &v.Rows[a].Reported, &v.Rows[b].Reported
	var la, lb float64
	if p.ReportedLoad && ra.HasKV && rb.HasKV {
		la, lb, d.Reason = ra.KVUse, rb.KVUse, P2CLessKV
	} else {
		la, lb, d.Reason = float64(v.Rows[a].Load.Requests), float64(v.Rows[b].Load.Requests), P2CFewer
	}
	t.setInt(p2First, int64(i1))
	t.setInt(p2Second, int64(i2))
	t.addCand(a, la)
	t.addCand(b, lb)
	d.Replica = a
	if la > lb {
		d.Replica = b
	}
}

func explainP2C(d *Decision, b []byte) []byte {
	t := &d.Trace
	m := t.Int(p2Allowed)
	w := text(b)
	if d.Reason == P2COnly {
		return w.s("\n  ").d(m).s(" replica allowed → ").name(t, d.Replica)
	}
	a, c := t.Cands[0], t.Cands[1]
	w = w.s("\n  draw from hash=").hex16(t.Hash).s(" seq=").u(t.Seq).s(" over ").d(m).s(" allowed replicas: #").
		d(t.Int(p2First)).s("=").name(t, int(a.Replica)).s(", #").d(t.Int(p2Second)).s("=").name(t, int(c.Replica))
	if d.Reason == P2CLessKV {
		w = w.s("\n  reported KV-cache use: ").name(t, int(a.Replica)).s("=").f(a.At(p2Load), 3).s(" ").
			name(t, int(c.Replica)).s("=").f(c.At(p2Load), 3)
	} else {
		w = w.s("\n  in flight (requests): ").name(t, int(a.Replica)).s("=").f(a.At(p2Load), 0).s(" ").
			name(t, int(c.Replica)).s("=").f(c.At(p2Load), 0)
	}
	if a.At(p2Load) <= c.At(p2Load) {
		return w.s(" → ").name(t, d.Replica).s(" (first drawn, ≤)")
	}
	return w.s(" → ").name(t, d.Replica).s(" (second drawn, <)")
}
