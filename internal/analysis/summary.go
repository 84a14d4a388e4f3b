package analysis

import (
	"cmp"
	"math"
	"slices"
)

// Estimate is a per-policy mean of a per-run metric over the runs where it is
// defined, with the half-width of its 95 % confidence interval.
type Estimate struct {
	Mean float64 // NaN when N == 0
	// HalfWidth = t(0.975, N-1) · sd / √N (Student t, sample sd); NaN when
	// N < 2.
	HalfWidth float64
	N         int // runs where the metric is defined
}

// Bin is one bin of the hit rate over time.
type Bin struct {
	StartS, EndS    float64 // [StartS, EndS): start times of the turns, seconds
	FollowUps, Hits int
	HitRate         float64 // Hits / FollowUps
}

// PolicySummary combines the runs of one policy.
type PolicySummary struct {
	Policy string
	Runs   int
	Seeds  []int64  // distinct seeds, ascending
	Modes  []string // distinct run modes (live, external, sim), ascending

	// Counts summed over the runs.
	Requests, Errors, FollowUps, Hits, Misses, AvoidableMisses, Redirects int
	ScaleRuns                                                             int // runs with a scale-up

	// Per-run metrics combined: mean ± 95 % CI half-width.
	HitRate, MissRate, AvoidableShare     Estimate
	ScaleReadyS, ScaleHitRate, MovedShare Estimate
	LatencyP50S, LatencyP95S, TTFTP50S    Estimate
	Imbalance, CachedShare                Estimate

	// OverTime is the follow-up hit rate per bin of start time, pooled over
	// the policy's runs; bins without follow-up turns are left out.
	OverTime []Bin
}

// Summary is the whole analysis of a results folder.
type Summary struct {
	Options  Options         // with defaults applied
	Policies []PolicySummary // canonical policy order (see SortPolicies)
	Runs     []Metrics       // policy order, then seed, order, run_id
	// ScaleReadyS is the mean scale-up ready time over all runs with a
	// scale-up, seconds (NaN if none): the marker of the hit-rate chart.
	ScaleReadyS float64
}

// policyRank places the canonical policies first, in this order.
func policyRank(p string) int {
	switch p {
	case "round-robin":
		return 0
	case "mod-n":
		return 1
	case "consistent":
		return 2
	case "bounded":
		return 3
	case "llm-aware":
		return 4
	}
	return 5
}

// ComparePolicies orders policy names: round-robin, mod-n, consistent,
// bounded, llm-aware, then any other name alphabetically.
func ComparePolicies(a, b string) int {
	if c := cmp.Compare(policyRank(a), policyRank(b)); c != 0 {
		return c
	}
	return cmp.Compare(a, b)
}

// SortPolicies sorts policy names in place with ComparePolicies.
func SortPolicies(names []string) { slices.SortFunc(names, ComparePolicies) }

// Summarize computes every run's metrics and combines the runs of each
// policy. Options with zero (or invalid) fields take their defaults; use
// Options.Validate to reject bad values first.
func Summarize(runs []Run, opts Options) Summary {
	opts = opts.WithDefaults()
	s := Summary{Options: opts, ScaleReadyS: math.NaN()}
	idx := summaryOrder(runs)
	for start := 0; start < len(idx); {
		policy := runs[idx[start]].Info.Policy
		end := start
		for end < len(idx) && runs[idx[end]].Info.Policy == policy {
			end++
		}
		ps, ms := summarizePolicy(runs, idx[start:end], opts)
		s.Policies = append(s.Policies, ps)
		s.Runs = append(s.Runs, ms...)
		start = end
	}
	var readySum float64
	var readyN int
	for i := range s.Runs {
		if m := &s.Runs[i]; m.ScaleUp {
			readySum += m.ScaleReadyS
			readyN++
		}
	}
	if readyN > 0 {
		s.ScaleReadyS = readySum / float64(readyN)
	}
	return s
}

// summaryOrder returns the indexes of runs in the summary's order: by
// policy (ComparePolicies), seed, order, run id.
func summaryOrder(runs []Run) []int {
	idx := make([]int, len(runs))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		ra, rb := &runs[a].Info, &runs[b].Info
		return cmp.Or(
			ComparePolicies(ra.Policy, rb.Policy),
			cmp.Compare(ra.Seed, rb.Seed),
			cmp.Compare(ra.Order, rb.Order),
			cmp.Compare(ra.RunID, rb.RunID),
		)
	})
	return idx
}

// summarizePolicy summarizes one policy's runs (runs[i] for i in idx):
// the counts summed, every rate estimated over the runs, the hit rate over
// time from all their follow-ups; and returns each run's metrics.
func summarizePolicy(runs []Run, idx []int, opts Options) (PolicySummary, []Metrics) {
	ps := PolicySummary{Policy: runs[idx[0]].Info.Policy, Runs: len(idx)}
	var ms []Metrics
	var fus []followUp
	for _, i := range idx {
		m := ComputeMetrics(&runs[i], opts)
		ms = append(ms, m)
		fus = append(fus, followUps(runs[i].Requests, opts.HitFraction)...)
		ps.count(&m)
	}
	slices.Sort(ps.Seeds)
	slices.Sort(ps.Modes)
	est := func(f func(*Metrics) float64) Estimate {
		xs := make([]float64, 0, len(ms))
		for i := range ms {
			xs = append(xs, f(&ms[i]))
		}
		return Combine(xs)
	}
	ps.HitRate = est(func(m *Metrics) float64 { return m.HitRate })
	ps.MissRate = est(func(m *Metrics) float64 { return m.MissRate })
	ps.AvoidableShare = est(func(m *Metrics) float64 { return m.AvoidableShare })
	ps.ScaleReadyS = est(func(m *Metrics) float64 { return m.ScaleReadyS })
	ps.ScaleHitRate = est(func(m *Metrics) float64 { return m.ScaleHitRate })
	ps.MovedShare = est(func(m *Metrics) float64 { return m.MovedShare })
	ps.LatencyP50S = est(func(m *Metrics) float64 { return m.LatencyP50S })
	ps.LatencyP95S = est(func(m *Metrics) float64 { return m.LatencyP95S })
	ps.TTFTP50S = est(func(m *Metrics) float64 { return m.TTFTP50S })
	ps.Imbalance = est(func(m *Metrics) float64 { return m.Imbalance })
	ps.CachedShare = est(func(m *Metrics) float64 { return m.CachedShare })
	ps.OverTime = bins(fus, opts.BinS)
	return ps, ms
}

// count adds one run's seed, mode and counts to the policy's.
func (ps *PolicySummary) count(m *Metrics) {
	if !slices.Contains(ps.Seeds, m.Seed) {
		ps.Seeds = append(ps.Seeds, m.Seed)
	}
	if !slices.Contains(ps.Modes, m.Mode) {
		ps.Modes = append(ps.Modes, m.Mode)
	}
	ps.Requests += m.Requests
	ps.Errors += m.Errors
	ps.FollowUps += m.FollowUps
	ps.Hits += m.Hits
	ps.Misses += m.Misses
	ps.AvoidableMisses += m.AvoidableMisses
	ps.Redirects += m.Redirects
	if m.ScaleUp {
		ps.ScaleRuns++
	}
}

// bins pools follow-up turns into bins of binS seconds of start time.
func bins(fus []followUp, binS float64) []Bin {
	count := map[int]*Bin{}
	var keys []int
	for _, f := range fus {
		k := int(math.Floor(f.startMS / 1000 / binS))
		b := count[k]
		if b == nil {
			b = &Bin{StartS: float64(k) * binS, EndS: float64(k+1) * binS}
			count[k] = b
			keys = append(keys, k)
		}
		b.FollowUps++
		if f.hit {
			b.Hits++
		}
	}
	slices.Sort(keys)
	out := make([]Bin, 0, len(keys))
	for _, k := range keys {
		b := count[k]
		b.HitRate = ratio(b.Hits, b.FollowUps)
		out = append(out, *b)
	}
	return out
}

// Combine returns the mean of the finite values of xs (NaN values, i.e. runs
// where the metric is undefined, are left out) and, with at least two, the
// half-width of the 95 % confidence interval of the mean:
// t(0.975, n-1) · sd / √n, sd the sample standard deviation.
func Combine(xs []float64) Estimate {
	e := Estimate{Mean: math.NaN(), HalfWidth: math.NaN()}
	var sum float64
	for _, x := range xs {
		if !math.IsNaN(x) {
			sum += x
			e.N++
		}
	}
	if e.N == 0 {
		return e
	}
	e.Mean = sum / float64(e.N)
	if e.N < 2 {
		return e
	}
	var ss float64
	for _, x := range xs {
		if !math.IsNaN(x) {
			ss += (x - e.Mean) * (x - e.Mean)
		}
	}
	sd := math.Sqrt(ss / float64(e.N-1))
	e.HalfWidth = StudentT975(e.N-1) * sd / math.Sqrt(float64(e.N))
	return e
}

// StudentT975 returns the 0.975 quantile of Student's t distribution with df
// degrees of freedom (df >= 1): exact to 4 decimals for df <= 30, 40, 60 and
// 120, interpolated linearly in 1/df between them, 1.96 as df → ∞. It
// returns NaN for df < 1.
func StudentT975(df int) float64 {
	small := [...]float64{
		12.7062, 4.3027, 3.1824, 2.7764, 2.5706, 2.4469, 2.3646, 2.3060, 2.2622, 2.2281,
		2.2010, 2.1788, 2.1604, 2.1448, 2.1314, 2.1199, 2.1098, 2.1009, 2.0930, 2.0860,
		2.0796, 2.0739, 2.0687, 2.0639, 2.0595, 2.0555, 2.0518, 2.0484, 2.0452, 2.0423,
	}
	if df < 1 {
		return math.NaN()
	}
	if df <= len(small) {
		return small[df-1]
	}
	// Knots beyond the table, as (1/df, t); 1/df = 0 is the normal quantile.
	knots := [...][2]float64{{1.0 / 30, 2.0423}, {1.0 / 40, 2.0211}, {1.0 / 60, 2.0003}, {1.0 / 120, 1.9799}, {0, 1.9600}}
	x := 1 / float64(df)
	for i := 1; i < len(knots); i++ {
		hi, lo := knots[i-1], knots[i]
		if x >= lo[0] {
			return lo[1] + (x-lo[0])/(hi[0]-lo[0])*(hi[1]-lo[1])
		}
	}
	return knots[len(knots)-1][1]
}
