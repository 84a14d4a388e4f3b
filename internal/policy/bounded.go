package policy

import (
	"fmt"
	"math"
	"math/bits"
)

// Bounded is consistent hashing with bounded loads (Mirrokni, Thorup,
// Zadimoghaddam 2016), checked against live in-flight load at pick time:
//
//	cost  = 1 (requests mode) or prompt + output tokens (tokens mode), the same on every replica
//	total = Σ load + cost           (in-flight load including this request)
//	cap   = ⌈(1+ε) · total / N⌉     (requests mode, as in the paper)
//	cap   =  (1+ε) · total / N      (tokens mode)
//
// (llm-aware's costs differ between replicas; each candidate r is checked
// against the cap computed with its own cost, total = Σ load + cost(r).)
//
// Walk the ring clockwise from the key's home; take the first replica with
// load + cost ≤ cap. A replica with nothing in flight always fits, so a lone
// request is never redirected. If none fits, the least loaded replica takes
// the request (reason least-loaded).
//
// Its settings (config key policies.bounded) are the struct itself.
type Bounded struct {
	// Epsilon: cap = (1+ε) × average load. Default 0.25.
	Epsilon float64 `json:"epsilon"`
	// Unit: what a request costs, requests (1 each) or tokens (prompt +
	// output). Default requests, as in the paper.
	Unit Unit `json:"load_unit"`
}

var _ Policy = (*Bounded)(nil)

// Reason codes of the bounded walk (Home is consistent's).
const (
	// Overflow: the preferred replica was over the cap; the next replica
	// clockwise on the ring within the cap took the request.
	Overflow Reason = "overflow"
	// LeastLoaded: no replica was within the cap; the least loaded one took it.
	LeastLoaded Reason = "least-loaded"
)

// Name implements Policy.
func (*Bounded) Name() string { return "bounded" }

// Validate implements Settings.
func (b *Bounded) Validate() error { return validEpsilon(b.Epsilon) }

func validEpsilon(eps float64) error {
	if !(eps > 0 && eps <= 100) {
		return fmt.Errorf("epsilon: must be > 0 and ≤ 100, got %g", eps)
	}
	return nil
}

// Pick implements Policy.
func (b *Bounded) Pick(req *Request, v *View, d *Decision) {
	cost := int64(1)
	if b.Unit == Tokens {
		cost = wholeCost(req)
	}
	home := v.ringHome(req.Hash)
	*d = Decision{}
	d.Trace.begin("bounded", req, v)
	d.Trace.Head = "bounded (request mode)"
	if b.Unit == Tokens {
		d.Trace.Head = "bounded (token mode)"
	}
	d.Trace.Explain = explainBounded
	boundedPick(req, v, &boundSpec{
		unit: b.Unit, eps: b.Epsilon, home: home, preferred: home,
		cacheAt: -1, cost: cost,
	}, d)
	d.Charge = wholeCost(req)
}

// boundSpec is one bounded-loads decision: the shared core of bounded and
// llm-aware.
type boundSpec struct {
	unit      Unit
	eps       float64
	home      int   // ring home of the key
	preferred int   // checked first: home, or where the cache is (llm-aware)
	cacheAt   int   // replica whose cost is cacheCost (-1: none)
	cacheCost int64 // cost on cacheAt
	cost      int64 // cost anywhere else
	// long, when set, lets the preferred replica take the request up to
	// longFactor × average load.
	long       bool
	longFactor float64
}

func (s *boundSpec) costAt(r int) int64 {
	if r == s.cacheAt {
		return s.cacheCost
	}
	return s.cost
}

func (s *boundSpec) load(v *View, r int) int64 {
	if s.unit == Tokens {
		return v.Rows[r].Load.Tokens
	}
	return v.Rows[r].Load.Requests
}

func explainBounded(d *Decision, b []byte) []byte { return d.Trace.writeBounded(b, d, false) }

// walkBeforeScan is how many ring candidates are checked before one pass
// over all replicas decides whether any of them can fit at all.
const walkBeforeScan = 8

// boundedPick fills d with the bounded-loads decision described by s.
//
// Cost: O(1) when one of the first candidates fits. Otherwise one O(N) pass
// finds the replica with the least load + cost; if even that one is over its
// cap (and none is idle), it takes the request (least-loaded) without
// walking the whole ring.
func boundedPick(req *Request, v *View, s *boundSpec, d *Decision) {
	n := len(v.Names)
	t := &d.Trace
	t.Unit, t.Bounded, t.Home, t.Preferred, t.Epsilon = s.unit, true, s.home, s.preferred, s.eps
	t.Cost, t.CacheCost, t.CacheAt = s.cost, s.cacheCost, s.cacheAt
	sum := v.Total.Requests
	if s.unit == Tokens {
		sum = v.Total.Tokens
	}
	for r := range min(n, MaxTraceLoads) {
		t.Loads[r] = s.load(v, r)
	}
	t.Sum = sum
	t.Total = sum + s.costAt(s.preferred)
	t.Avg = float64(t.Total) / float64(n)
	t.Cap = s.capFor(sum, s.costAt(s.preferred), n)

	// 1. The preferred replica, within the cap.
	prefOK := !v.Excluded(s.preferred)
	if prefOK && s.fits(v, t, s.preferred, t.Cap, false) {
		d.Replica, d.Reason = s.preferred, pick(s.preferred == s.home, Home, Sticky)
		return
	}
	// 2. The preferred replica, within the long-conversation cap.
	if prefOK && s.long {
		t.Long = true
		t.LongCap = s.longFactor * t.Avg
		if s.fits(v, t, s.preferred, t.LongCap, true) {
			d.Replica, d.Reason = s.preferred, pick(s.preferred == s.home, HomeLong, StickyLong)
			return
		}
	}
	// 3. Clockwise from the home, the first other replica within the cap.
	best, found := s.walk(req, v, t, d, sum)
	if found {
		return
	}
	// 4. Nobody within the cap: the least loaded, counting this request's cost there.
	if best < 0 {
		best, _ = s.scan(v, sum, n)
	}
	if p := s.preferred; prefOK && s.load(v, p)+s.costAt(p) <= s.load(v, best)+s.costAt(best) {
		best = p
	}
	d.Replica, d.Reason = best, LeastLoaded
	t.LeastLoad = s.load(v, best) + s.costAt(best)
}

// walk checks the replicas clockwise from the request's ring home, skipping
// the preferred and the excluded ones; the first within its cap takes the
// request (found). After walkBeforeScan candidates one pass finds the least
// loaded replica (best), and the walk stops when even it cannot fit.
func (s *boundSpec) walk(req *Request, v *View, t *Trace, d *Decision, sum int64) (best int, found bool) {
	n := len(v.Names)
	var small [4]uint64
	words := (n + 63) / 64
	visited := small[:]
	if words > len(small) {
		visited = v.Visited
		if len(visited) < words {
			visited = make([]uint64, words) // the caller gave no scratch
		}
	}
	visited = visited[:words]
	clear(visited)
	copy(visited, v.Exclude)
	visited[s.preferred/64] |= 1 << (s.preferred % 64)
	seen := 0
	for _, w := range visited {
		seen += bits.OnesCount64(w)
	}
	capOther := s.capFor(sum, s.cost, n)
	ringLen := v.Ring.Len()
	pos := v.Ring.Search(req.Hash)
	checked := 0
	best = -1
	for steps := 0; seen < n && steps < ringLen; steps++ {
		r := v.Ring.Replica(pos)
		if pos++; pos == ringLen {
			pos = 0
		}
		if w, b := r/64, uint64(1)<<(r%64); visited[w]&b != 0 {
			continue
		} else {
			visited[w] |= b
		}
		seen++
		limit := capOther
		if r == s.cacheAt {
			limit = s.capFor(sum, s.cacheCost, n)
		}
		if s.fits(v, t, r, limit, false) {
			d.Replica, d.Reason = r, pick(r == s.home, Home, Overflow)
			return best, true
		}
		if checked++; checked == walkBeforeScan {
			var possible bool
			if best, possible = s.scan(v, sum, n); !possible {
				break
			}
		}
	}
	return best, false
}

// scan returns the replica with the least load + cost among those not
// excluded and not the preferred one (the preferred one if it is the only
// candidate), and whether any of those could take the request within its cap.
func (s *boundSpec) scan(v *View, sum int64, n int) (best int, possible bool) {
	best, bestLoad := -1, int64(math.MaxInt64)
	for r := range v.Rows {
		if r == s.preferred || v.Excluded(r) {
			continue
		}
		l := v.Rows[r].Load
		possible = possible || l.Requests == 0
		x := l.Requests
		if s.unit == Tokens {
			x = l.Tokens
		}
		if x += s.costAt(r); x < bestLoad {
			best, bestLoad = r, x
		}
	}
	if best < 0 {
		return s.preferred, false
	}
	possible = possible || float64(bestLoad) <= s.capFor(sum, s.costAt(best), n)
	if c := s.cacheAt; c >= 0 && c != best && c != s.preferred && !v.Excluded(c) {
		possible = possible || float64(s.load(v, c)+s.cacheCost) <= s.capFor(sum, s.cacheCost, n)
	}
	return best, possible
}

// capFor is the cap when the request, costing cost, is placed: (1+ε) times
// the average load including it, rounded up in requests mode.
func (s *boundSpec) capFor(sum, cost int64, n int) float64 {
	c := (1 + s.eps) * float64(sum+cost) / float64(n)
	if s.unit == Requests {
		c = math.Ceil(c - 1e-9)
	}
	return c
}

// fits checks replica r against limit and records the check in the trace.
// A replica with nothing in flight always fits.
func (s *boundSpec) fits(v *View, t *Trace, r int, limit float64, long bool) bool {
	l, c := s.load(v, r), s.costAt(r)
	idle := v.Rows[r].Load.Requests == 0
	ok := idle || float64(l+c) <= limit
	t.addCheck(Check{Replica: int32(r), Load: l, Cost: c, Limit: limit, Idle: idle, Fit: ok, Long: long})
	return ok
}

func pick(cond bool, a, b Reason) Reason {
	if cond {
		return a
	}
	return b
}

// Unit is the unit of load of the bounded policies.
type Unit uint8

// Load units.
const (
	Requests Unit = iota // each request costs 1
	Tokens               // each request costs its tokens of work
)

func (u Unit) String() string {
	if u == Tokens {
		return "tokens"
	}
	return "requests"
}

// ParseUnit parses "requests" or "tokens".
func ParseUnit(s string) (Unit, error) {
	switch s {
	case "requests":
		return Requests, nil
	case "tokens":
		return Tokens, nil
	}
	return 0, fmt.Errorf("unknown load unit %q (want requests or tokens)", s)
}

// MarshalText writes the unit's name (settings are JSON).
func (u Unit) MarshalText() ([]byte, error) { return []byte(u.String()), nil }

// UnmarshalText parses a unit's name.
func (u *Unit) UnmarshalText(b []byte) error {
	v, err := ParseUnit(string(b))
	if err != nil {
		return err
	}
	*u = v
	return nil
}
