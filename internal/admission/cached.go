package admission

// CachedShare is a pool's recent share of prompt tokens found cached at the
// replicas (the answers' counts: cached ÷ (cached + processed)), a moving
// mean of weight CachedWeight per answer. Admission predicts a request's
// service time from a view without the request's own cache matches, so it
// takes this share of its prompt as cached: the prompt's expected new
// tokens are New(prompt). 0 before any answer (the whole prompt is new).
type CachedShare struct {
	share float64
	seen  bool
}

// CachedWeight is the weight of one answer in CachedShare.
const CachedWeight = 0.1

// Learn adds one answer's counts (answers without prompt counts are
// skipped).
func (c *CachedShare) Learn(cached, processed int) {
	if cached < 0 || processed < 0 || cached+processed == 0 {
		return
	}
	x := float64(cached) / float64(cached+processed)
	if !c.seen {
		c.share, c.seen = x, true
		return
	}
	c.share += CachedWeight * (x - c.share)
}

// Share is the current share, in [0, 1].
func (c *CachedShare) Share() float64 { return c.share }

// New is the expected tokens of a prompt of prompt tokens that are not
// cached: at least one.
func (c *CachedShare) New(prompt int) int {
	return max(1, int(float64(prompt)*(1-c.share)+0.5))
}
