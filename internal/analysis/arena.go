package analysis

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// The arena: every policy on every scenario (traffic profile), one results
// folder per scenario, side by side. An Arena holds, per metric, a matrix of
// estimates (rows: policies, columns: scenarios), each the mean over the
// runs (seeds) of a per-run metric ± the half-width of its 95 % confidence
// interval, computed from Summary.Runs exactly as the per-policy estimates
// of summary.md are.

// Better says which direction of a metric is better.
type Better int

const (
	HigherIsBetter Better = iota + 1
	LowerIsBetter
)

// ArenaMetric is one metric of the arena: one table, one heat map.
type ArenaMetric struct {
	Slug   string  // names the heat map: arena-<Slug>.png
	Title  string  // "Follow-up hit rate"
	Unit   string  // shown in headings: "%", "s", "" (a ratio or a count)
	Scale  float64 // multiplies values for display (100 for a share)
	Better Better
	// Paired: part of the paired comparison of the focus policy.
	Paired bool
	// Run is the metric of one run; NaN where undefined.
	Run func(*Metrics) float64
	// prec is the number of decimals shown for a display value (scaled).
	prec func(v float64) int
}

// Format writes a display value (already scaled) with the metric's decimals.
func (m *ArenaMetric) Format(v float64) string {
	if math.IsNaN(v) {
		return "n/a"
	}
	return strconv.FormatFloat(v, 'f', m.prec(v), 64)
}

// Heading is the metric's title with its unit and direction, as used in
// arena.md and on the heat maps: "p95 latency (s), lower is better".
func (m *ArenaMetric) Heading() string {
	h := m.Title
	if m.Unit != "" {
		h += " (" + m.Unit + ")"
	}
	if m.Better == HigherIsBetter {
		return h + ", higher is better"
	}
	return h + ", lower is better"
}

// ArenaMetrics returns the arena's metrics, in the order of arena.md.
func ArenaMetrics() []ArenaMetric {
	one := func(float64) int { return 1 }
	three := func(float64) int { return 3 }
	return []ArenaMetric{
		{Slug: "hit-rate", Title: "Follow-up hit rate", Unit: "%", Scale: 100, Better: HigherIsBetter, Paired: true,
			Run: func(m *Metrics) float64 { return m.HitRate }, prec: one},
		{Slug: "cached-share", Title: "Cached share of prompt tokens", Unit: "%", Scale: 100, Better: HigherIsBetter,
			Run: func(m *Metrics) float64 { return m.CachedShare }, prec: one},
		{Slug: "p50", Title: "p50 latency", Unit: "s", Scale: 1, Better: LowerIsBetter, Paired: true,
			Run: func(m *Metrics) float64 { return m.LatencyP50S }, prec: secondsPrec},
		{Slug: "p95", Title: "p95 latency", Unit: "s", Scale: 1, Better: LowerIsBetter, Paired: true,
			Run: func(m *Metrics) float64 { return m.LatencyP95S }, prec: secondsPrec},
		{Slug: "ttft-p50", Title: "p50 time to first token", Unit: "s", Scale: 1, Better: LowerIsBetter, Paired: true,
			Run: func(m *Metrics) float64 { return m.TTFTP50S }, prec: secondsPrec},
		{Slug: "imbalance", Title: "Work imbalance (busiest / mean)", Scale: 1, Better: LowerIsBetter,
			Run: func(m *Metrics) float64 { return m.Imbalance }, prec: three},
		{Slug: "errors", Title: "Errors per run", Scale: 1, Better: LowerIsBetter,
			Run: func(m *Metrics) float64 { return float64(m.Errors) }, prec: one},
		{Slug: "redirects", Title: "Redirects away from the cache per run", Scale: 1, Better: LowerIsBetter,
			Run: func(m *Metrics) float64 { return float64(m.Redirects) }, prec: one},
	}
}

// ArenaScenario is the analysis of one scenario's folder.
type ArenaScenario struct {
	Name    string // the profile's name, also its folder
	Summary Summary
}

// Arena is every metric of every policy on every scenario.
type Arena struct {
	Scenarios []string // column order, as given
	Policies  []string // every policy of any scenario, in canonical order (SortPolicies)
	Metrics   []ArenaMetric
	// Cells[m][p][s] is metric m of policy p on scenario s (N == 0 when the
	// policy did not run there or the metric is undefined in all its runs).
	Cells [][][]Estimate
	Runs  int     // runs over all scenarios
	Seeds []int64 // distinct seeds of all runs, ascending

	// perSeed[m][p][s] maps a seed to the mean of metric m over the runs of
	// policy p with that seed on scenario s (for paired differences).
	perSeed [][][]map[int64]float64
}

// NewArena combines the scenarios' summaries. Scenario names must be
// distinct.
func NewArena(scenarios []ArenaScenario) (Arena, error) {
	a := Arena{Metrics: ArenaMetrics()}
	for _, sc := range scenarios {
		if slices.Contains(a.Scenarios, sc.Name) {
			return Arena{}, fmt.Errorf("arena: scenario %q given twice", sc.Name)
		}
		a.Scenarios = append(a.Scenarios, sc.Name)
		for _, m := range sc.Summary.Runs {
			if !slices.Contains(a.Policies, m.Policy) {
				a.Policies = append(a.Policies, m.Policy)
			}
			if !slices.Contains(a.Seeds, m.Seed) {
				a.Seeds = append(a.Seeds, m.Seed)
			}
			a.Runs++
		}
	}
	if a.Runs == 0 {
		return Arena{}, ErrNoRuns
	}
	SortPolicies(a.Policies)
	slices.Sort(a.Seeds)
	a.Cells = make([][][]Estimate, len(a.Metrics))
	a.perSeed = make([][][]map[int64]float64, len(a.Metrics))
	for mi := range a.Metrics {
		met := &a.Metrics[mi]
		a.Cells[mi] = make([][]Estimate, len(a.Policies))
		a.perSeed[mi] = make([][]map[int64]float64, len(a.Policies))
		for pi, pol := range a.Policies {
			a.Cells[mi][pi] = make([]Estimate, len(scenarios))
			a.perSeed[mi][pi] = make([]map[int64]float64, len(scenarios))
			for si := range scenarios {
				var xs []float64
				sums := map[int64]float64{}
				counts := map[int64]int{}
				for ri := range scenarios[si].Summary.Runs {
					r := &scenarios[si].Summary.Runs[ri]
					if r.Policy != pol {
						continue
					}
					v := met.Run(r)
					xs = append(xs, v)
					if !math.IsNaN(v) {
						sums[r.Seed] += v
						counts[r.Seed]++
					}
				}
				a.Cells[mi][pi][si] = Combine(xs)
				for seed, n := range counts {
					sums[seed] /= float64(n)
				}
				a.perSeed[mi][pi][si] = sums
			}
		}
	}
	return a, nil
}

// MetricIndex returns the index of the metric with the slug, or -1.
func (a *Arena) MetricIndex(slug string) int {
	return slices.IndexFunc(a.Metrics, func(m ArenaMetric) bool { return m.Slug == slug })
}

// better reports whether mean x beats mean y under b.
func better(b Better, x, y float64) bool {
	if b == HigherIsBetter {
		return x > y
	}
	return x < y
}

// Best returns, for metric mi on scenario si, the policies (indices) whose
// mean is the best of the column. Ties are all returned; nothing is
// returned when fewer than two policies have a value or all values are
// equal (there is nothing to tell apart).
func (a *Arena) Best(mi, si int) []int {
	met := &a.Metrics[mi]
	var best []int
	finite, equal := 0, true
	first := math.NaN()
	for pi := range a.Policies {
		v := a.Cells[mi][pi][si].Mean
		if a.Cells[mi][pi][si].N == 0 || math.IsNaN(v) {
			continue
		}
		finite++
		if finite == 1 {
			first = v
		} else if v != first {
			equal = false
		}
		switch {
		case len(best) == 0 || better(met.Better, v, a.Cells[mi][best[0]][si].Mean):
			best = append(best[:0], pi)
		case v == a.Cells[mi][best[0]][si].Mean:
			best = append(best, pi)
		}
	}
	if finite < 2 || equal {
		return nil
	}
	return best
}

// NormalizeColumn maps a column of values to [0, 1] with 1 the best and 0
// the worst of the column (min-max scaling, oriented by b), so that
// scenarios of different scales share one colour scale. NaN stays NaN; a
// column whose finite values are all equal maps them to 1.
func NormalizeColumn(vals []float64, b Better) []float64 {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, v := range vals {
		if !math.IsNaN(v) {
			lo, hi = math.Min(lo, v), math.Max(hi, v)
		}
	}
	out := make([]float64, len(vals))
	for i, v := range vals {
		switch {
		case math.IsNaN(v):
			out[i] = math.NaN()
		case hi == lo:
			out[i] = 1
		case b == HigherIsBetter:
			out[i] = (v - lo) / (hi - lo)
		default:
			out[i] = (hi - v) / (hi - lo)
		}
	}
	return out
}

// ParetoFrontier returns the points not dominated by another, for x to be
// maximised and y minimised (hit rate against p95 latency): point i is
// dominated when some j has x_j ≥ x_i and y_j ≤ y_i, one of them strictly.
// Equal points do not dominate each other. Points with a NaN coordinate are
// left out. The result is sorted by x, then y, ascending (along the
// frontier, a higher hit rate costs a higher latency).
func ParetoFrontier(xs, ys []float64) []int {
	var front []int
	for i := range xs {
		if math.IsNaN(xs[i]) || math.IsNaN(ys[i]) {
			continue
		}
		dominated := false
		for j := range xs {
			if j == i || math.IsNaN(xs[j]) || math.IsNaN(ys[j]) {
				continue
			}
			if xs[j] >= xs[i] && ys[j] <= ys[i] && (xs[j] > xs[i] || ys[j] < ys[i]) {
				dominated = true
				break
			}
		}
		if !dominated {
			front = append(front, i)
		}
	}
	slices.SortStableFunc(front, func(i, j int) int { return cmp.Or(cmp.Compare(xs[i], xs[j]), cmp.Compare(ys[i], ys[j])) })
	return front
}

// Pareto returns the Pareto frontier of scenario si (follow-up hit rate up,
// p95 latency down) as indices into a.Policies.
func (a *Arena) Pareto(si int) []int {
	hit, p95 := a.MetricIndex("hit-rate"), a.MetricIndex("p95")
	xs := make([]float64, len(a.Policies))
	ys := make([]float64, len(a.Policies))
	for pi := range a.Policies {
		xs[pi], ys[pi] = a.Cells[hit][pi][si].Mean, a.Cells[p95][pi][si].Mean
	}
	return ParetoFrontier(xs, ys)
}

// Verdict reads a paired difference.
type Verdict string

const (
	VerdictBetter Verdict = "better" // the whole 95 % CI of the difference is on the better side
	VerdictWorse  Verdict = "worse"  // the whole CI is on the worse side
	VerdictSame   Verdict = "same"   // the CI contains 0: no difference shown
	VerdictNone   Verdict = "n/a"    // fewer than two paired seeds, or no other policy
)

// Paired is the focus policy against the best other policy on one scenario
// and metric.
type Paired struct {
	Scenario, Metric string // scenario name, metric slug
	// Against is the other policy with the best mean on the scenario.
	Against string
	// Diff combines, over the seeds both policies ran (metric defined in
	// both), focus − Against per seed: the mean difference ± the half-width
	// of its 95 % CI (Student t). Unscaled (a fraction for a hit rate).
	Diff    Estimate
	Verdict Verdict
}

// Paired compares focus with the best other policy, per scenario and per
// metric marked Paired, seed by seed. It fails if focus is not one of the
// arena's policies.
func (a *Arena) Paired(focus string) ([]Paired, error) {
	fi := slices.Index(a.Policies, focus)
	if fi < 0 {
		return nil, fmt.Errorf("arena: focus policy %q did not run (policies: %s)", focus, strings.Join(a.Policies, ", "))
	}
	var out []Paired
	for si, sc := range a.Scenarios {
		for mi := range a.Metrics {
			met := &a.Metrics[mi]
			if !met.Paired {
				continue
			}
			p := Paired{Scenario: sc, Metric: met.Slug, Diff: Combine(nil), Verdict: VerdictNone}
			oi := -1
			for pi := range a.Policies {
				e := a.Cells[mi][pi][si]
				if pi == fi || e.N == 0 || math.IsNaN(e.Mean) {
					continue
				}
				if oi < 0 || better(met.Better, e.Mean, a.Cells[mi][oi][si].Mean) {
					oi = pi
				}
			}
			if oi >= 0 {
				p.Against = a.Policies[oi]
				fv, ov := a.perSeed[mi][fi][si], a.perSeed[mi][oi][si]
				var diffs []float64
				for _, seed := range a.Seeds {
					x, ok1 := fv[seed]
					y, ok2 := ov[seed]
					if ok1 && ok2 {
						diffs = append(diffs, x-y)
					}
				}
				p.Diff = Combine(diffs)
				p.Verdict = verdict(met.Better, p.Diff)
			}
			out = append(out, p)
		}
	}
	return out, nil
}

func verdict(b Better, d Estimate) Verdict {
	if d.N < 2 || math.IsNaN(d.HalfWidth) {
		return VerdictNone
	}
	lo, hi := d.Mean-d.HalfWidth, d.Mean+d.HalfWidth
	switch {
	case lo > 0 && b == HigherIsBetter, hi < 0 && b == LowerIsBetter:
		return VerdictBetter
	case hi < 0 && b == HigherIsBetter, lo > 0 && b == LowerIsBetter:
		return VerdictWorse
	}
	return VerdictSame
}
