package policy

import (
	"fmt"

	"github.com/llm-ring/llm-ring/internal/ring"
)

// PrefixHash is KubeAI's PrefixHash load-balancing strategy: consistent
// hashing with bounded loads (CHWBL) on a key made of the start of the first
// user message, so that requests sharing that start (a system prompt, a
// document, one conversation's turns) go to the same replica until it is
// loaded beyond the bound.
//
//	key       = the first prefix_char_length characters (runes) of the first user message
//	threshold = (Σ requests in flight + 1) / N × mean_load_percentage / 100
//	walk the ring clockwise from hash(key): the first replica with
//	    requests in flight ≤ threshold takes the request (nothing in flight
//	    anywhere: the first replica fits)
//	none fits: the first replica walked (the key's ring home)
//
// Source: substratusai/kubeai, internal/loadbalancer/balance_chwbl.go
// (chwblGetAddr, chwblLoadOK) and group.go at commit 2f32ef498da6 (after
// helm chart 0.21.0); defaults from api/k8s/v1/model_types.go (PrefixHash:
// meanLoadFactor 125, replication 256, prefixCharLength 100) and
// internal/apiutils (the prefix is the first user message's first N runes;
// for a completion, the prompt's).
//
// Deviations. KubeAI places each endpoint on its own ring with 256 virtual
// nodes hashed from "name" + index; a Pick may not allocate or keep state, so
// this policy walks the view's ring: the router's virtual_nodes (160 by
// default) with labels "index:name". Only the spread of ownership differs
// (shares vary by about 1/√vnodes: 7.9 % against 6.3 %); set virtual_nodes:
// 256 to match KubeAI's count. KubeAI prefixes the key with the LoRA adapter
// name; llm-ring serves no adapters. N counts every replica in the view,
// excluded ones included, as KubeAI's endpoint count does.
//
// Its settings (config key policies.prefix-hash) are the struct itself.
type PrefixHash struct {
	// MeanLoadPercentage: a replica may take the request while its load is
	// within this percentage of the mean (with this request). Default 125,
	// at least 100 (KubeAI's meanLoadFactor).
	MeanLoadPercentage int `json:"mean_load_percentage"`
	// PrefixCharLength: characters of the first user message that make the
	// key. Default 100 (KubeAI's prefixCharLength).
	PrefixCharLength int `json:"prefix_char_length"`
}

var _ Policy = (*PrefixHash)(nil)

// Reason codes of prefix-hash.
const (
	// PrefixHome: the key's ring home was within the load bound.
	PrefixHome Reason = "prefix-home"
	// PrefixNext: the home was over the bound; the next replica clockwise
	// within it took the request.
	PrefixNext Reason = "prefix-next"
	// PrefixDefault: every replica was over the bound; the home took it
	// (KubeAI's "default endpoint").
	PrefixDefault Reason = "prefix-default"
)

// Name implements Policy.
func (*PrefixHash) Name() string { return "prefix-hash" }

// Validate implements Settings.
func (p *PrefixHash) Validate() error {
	if p.MeanLoadPercentage < 100 || p.MeanLoadPercentage > 10000 {
		return fmt.Errorf("mean_load_percentage: must be ≥ 100 and ≤ 10000, got %d", p.MeanLoadPercentage)
	}
	if p.PrefixCharLength < 1 || p.PrefixCharLength > 1<<20 {
		return fmt.Errorf("prefix_char_length: must be ≥ 1 and ≤ 1048576, got %d", p.PrefixCharLength)
	}
	return nil
}

// prefixKey returns the first n runes of s (a substring: no copy) and how
// many runes it has.
func prefixKey(s string, n int) (string, int) {
	runes := 0
	for i := range s {
		if runes == n {
			return s[:i], runes
		}
		runes++
	}
	return s, runes
}

// Slots of a prefix-hash trace.
const (
	phRunes IntSlot = iota // characters of the first user message hashed
	phTotal                // requests in flight, everywhere
	phPct                  // mean_load_percentage
)

// phThreshold is the slot of the load a replica may carry.
const phThreshold ValSlot = 0

// Pick implements Policy.
func (p *PrefixHash) Pick(req *Request, v *View, d *Decision) {
	*d = Decision{}
	t := &d.Trace
	t.begin("prefix-hash", req, v)
	t.Explain = explainPrefixHash
	d.Charge = wholeCost(req)
	key, runes := prefixKey(req.FirstUser, p.PrefixCharLength)
	h := ring.HashString(key)
	n := len(v.Names)
	total := v.Total.Requests
	thr := float64(total+1) / float64(n) * float64(p.MeanLoadPercentage) / 100
	t.Hash = h
	t.setInt(phRunes, int64(runes))
	t.setInt(phTotal, int64(total))
	t.setInt(phPct, int64(p.MeanLoadPercentage))
	t.setVal(phThreshold, thr)
	for r := range min(n, MaxTraceLoads) {
		t.Loads[r] = v.Rows[r].Load.Requests
	}
	fits := func(r int) bool { return total == 0 || float64(v.Rows[r].Load.Requests) <= thr }

	// Whether any allowed replica fits decides whether the walk can end
	// early: O(N) instead of a walk over the whole ring.
	any := false
	for r := range v.Rows {
		if !v.Excluded(r) && fits(r) {
			any = true
			break
		}
	}
	var small [4]uint64
	visited := small[:]
	if words := (n + 63) / 64; words > len(small) {
		if len(v.Visited) < words {
			v.Visited = make([]uint64, words) // the caller gave no scratch
		}
		visited = v.Visited[:words]
	} else {
		visited = visited[:words]
	}
	clear(visited)
	home := -1
	pos := v.Ring.Search(h)
	for i := 0; i < v.Ring.Len(); i++ {
		r := v.Ring.Replica(pos + i)
		w, bit := r/64, uint64(1)<<(r%64)
		if v.Excluded(r) || visited[w]&bit != 0 {
			continue
		}
		visited[w] |= bit
		if home < 0 {
			home = r
			t.Home = r
		}
		ok := any && fits(r)
		t.addCheck(Check{Replica: int32(r), Load: v.Rows[r].Load.Requests, Limit: thr, Fit: ok, Idle: total == 0})
		if ok {
			d.Replica, d.Reason = r, PrefixNext
			if r == home {
				d.Reason = PrefixHome
			}
			return
		}
		if !any {
			break
		}
	}
	if home < 0 { // not on the ring walk (cannot happen with a full ring)
		home = v.firstAllowed(0)
		t.Home = home
	}
	d.Replica, d.Reason = home, PrefixDefault
}

func explainPrefixHash(d *Decision, b []byte) []byte {
	t := &d.Trace
	runes, total, thr, pct := t.Int(phRunes), t.Int(phTotal), t.Val(phThreshold), t.Int(phPct)
	w := text(b).s("\n  key: first ").d(runes).s(" characters of the first user message → hash=").hex16(t.Hash).
		s(" → ring home ").name(t, t.Home)
	w = t.writeLoads(w.s("\n  in flight (requests)"))
	w = w.s("; threshold = (").d(total).s("+1)/").i(t.N).s(" × ").d(pct).s("% = ").f(thr, 2)
	checks := t.Checks[:min(t.NChecks, MaxTraceChecks)]
	for i, c := range checks {
		w = w.s("\n  ").name(t, int(c.Replica)).s(": ")
		switch {
		case c.Idle:
			w = w.s("nothing in flight anywhere → ").s(string(d.Reason))
		case c.Fit:
			w = w.d(c.Load).s(" ≤ ").f(c.Limit, 2).s(" → ").s(string(d.Reason))
		case d.Reason == PrefixDefault && i == 0:
			w = w.d(c.Load).s(" > ").f(c.Limit, 2).s(", and every replica is over the threshold → ").
				s(string(d.Reason)).s(" (the home)")
		default:
			w = w.d(c.Load).s(" > ").f(c.Limit, 2).s(" → next")
		}
	}
	if t.NChecks > MaxTraceChecks {
		w = w.s("\n  … ").i(t.NChecks - MaxTraceChecks).s(" more replicas checked")
	}
	return w
}
