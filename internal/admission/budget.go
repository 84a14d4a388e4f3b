package admission

// Budgets are tokens-per-minute buckets, one per flow (fairness id), as
// Envoy AI Gateway's per-user token rate limits are (field-notes §4): a
// bucket holds at most one minute's budget, refills continuously, is charged
// the request's estimated tokens (prompt + expected output) when it is
// admitted and corrected when its answer reports the real counts. A request
// passes while its flow's bucket is above zero, so one request larger than
// the whole budget still runs (and leaves the flow in debt for a while)
// instead of never running at all.
type Budgets struct {
	perMinute func(flow string) int64
	buckets   map[string]*bucket
}

type bucket struct {
	level float64 // tokens left; negative: debt
	at    int64   // when level was last brought up to date
	limit float64 // tokens per minute
}

const minute = 60e9

// NewBudgets returns the budgets of s (none when no flow has a budget).
func NewBudgets(s *Settings) *Budgets {
	def, per := s.TokensPerMinute, s.FlowTokensPerMinute
	return &Budgets{
		perMinute: func(flow string) int64 {
			if v, ok := per[flow]; ok {
				return v
			}
			return def
		},
		buckets: map[string]*bucket{},
	}
}

func (b *Budgets) get(flow string, now int64) *bucket {
	limit := b.perMinute(flow)
	if limit <= 0 {
		return nil
	}
	k := b.buckets[flow]
	if k == nil {
		k = &bucket{level: float64(limit), at: now, limit: float64(limit)}
		b.buckets[flow] = k
	}
	if now > k.at {
		k.level = min(k.limit, k.level+k.limit*float64(now-k.at)/minute)
		k.at = now
	}
	return k
}

// Allowed reports whether flow may send a request now and, if not, how long
// (ns) until it may.
func (b *Budgets) Allowed(flow string, now int64) (bool, int64) {
	k := b.get(flow, now)
	if k == nil || k.level > 0 {
		return true, 0
	}
	return false, int64((-k.level+1)*minute/k.limit) + 1
}

// Charge takes tokens from flow's bucket (negative tokens give back: the
// correction once the answer's counts are known).
func (b *Budgets) Charge(flow string, tokens int64, now int64) {
	if k := b.get(flow, now); k != nil {
		k.level = min(k.limit, k.level-float64(tokens))
	}
}

// Level returns flow's tokens left (for tests and /replicas); ok is false
// when the flow has no budget.
func (b *Budgets) Level(flow string, now int64) (float64, bool) {
	k := b.get(flow, now)
	if k == nil {
		return 0, false
	}
	return k.level, true
}
