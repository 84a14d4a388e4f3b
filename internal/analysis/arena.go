package analysis

import (
	"cmp"
	"fmt"
	"io"
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

// cell formats an estimate of metric met as "88.5 ± 1.2" (scaled, the
// half-width with the mean's decimals), "88.5" for one run, "n/a" for none.
func (met *ArenaMetric) cell(e Estimate) string {
	if e.N == 0 || math.IsNaN(e.Mean) {
		return "n/a"
	}
	mean := e.Mean * met.Scale
	prec := met.prec(mean)
	s := strconv.FormatFloat(mean, 'f', prec, 64)
	if e.N >= 2 && !math.IsNaN(e.HalfWidth) {
		s += " ± " + strconv.FormatFloat(e.HalfWidth*met.Scale, 'f', prec, 64)
	}
	return s
}

// WriteArenaTable writes metric mi as a markdown table: a row per policy, a
// column per scenario, the best mean of each column in bold (see Best).
func WriteArenaTable(w io.Writer, a *Arena, mi int) error {
	met := &a.Metrics[mi]
	var b strings.Builder
	b.WriteString("| policy |")
	for _, sc := range a.Scenarios {
		fmt.Fprintf(&b, " %s |", sc)
	}
	b.WriteString("\n|---|" + strings.Repeat("---:|", len(a.Scenarios)) + "\n")
	best := make([][]int, len(a.Scenarios))
	for si := range a.Scenarios {
		best[si] = a.Best(mi, si)
	}
	for pi, pol := range a.Policies {
		fmt.Fprintf(&b, "| %s |", pol)
		for si := range a.Scenarios {
			c := met.cell(a.Cells[mi][pi][si])
			if slices.Contains(best[si], pi) {
				c = "**" + c + "**"
			}
			fmt.Fprintf(&b, " %s |", c)
		}
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WritePairedTable writes the paired comparison of focus (see Arena.Paired)
// as a markdown table: a row per scenario, a column per paired metric, each
// cell "focus − best other (95 % CI), the other's name: verdict".
func WritePairedTable(w io.Writer, a *Arena, focus string) error {
	ps, err := a.Paired(focus)
	if err != nil {
		return err
	}
	var mets []*ArenaMetric
	for mi := range a.Metrics {
		if a.Metrics[mi].Paired {
			mets = append(mets, &a.Metrics[mi])
		}
	}
	var b strings.Builder
	b.WriteString("| scenario |")
	for _, met := range mets {
		unit := met.Unit
		if unit == "%" {
			unit = "points"
		}
		fmt.Fprintf(&b, " %s (%s) |", met.Title, unit)
	}
	b.WriteString("\n|---|" + strings.Repeat("---|", len(mets)) + "\n")
	k := 0
	for _, sc := range a.Scenarios {
		fmt.Fprintf(&b, "| %s |", sc)
		for _, met := range mets {
			p := ps[k]
			k++
			if p.Against == "" {
				b.WriteString(" n/a |")
				continue
			}
			d := "n/a"
			if p.Diff.N > 0 {
				mean := p.Diff.Mean * met.Scale
				prec := met.prec(math.Max(math.Abs(mean), math.Abs(p.Diff.HalfWidth*met.Scale)))
				d = signed(mean, prec)
				if p.Diff.N >= 2 {
					d += " ± " + strconv.FormatFloat(p.Diff.HalfWidth*met.Scale, 'f', prec, 64)
				}
			}
			v := string(p.Verdict)
			if p.Verdict == VerdictWorse {
				v = "**worse**"
			}
			fmt.Fprintf(&b, " %s vs %s: %s |", d, p.Against, v)
		}
		b.WriteString("\n")
	}
	_, err = io.WriteString(w, b.String())
	return err
}

// PairedCounts counts the verdicts of focus's paired comparisons.
func PairedCounts(ps []Paired) map[Verdict]int {
	n := map[Verdict]int{}
	for _, p := range ps {
		n[p.Verdict]++
	}
	return n
}

// signed formats v with an explicit sign ("+1.2", "−0.3", "0.0").
func signed(v float64, prec int) string {
	s := strconv.FormatFloat(math.Abs(v), 'f', prec, 64)
	if strconv.FormatFloat(0, 'f', prec, 64) == s {
		return s
	}
	if v < 0 {
		return "−" + s
	}
	return "+" + s
}

// ArenaOptions describe an arena for its report.
type ArenaOptions struct {
	// Setup is a sentence on how the runs were made (simulator, replicas,
	// CPU), printed under the title.
	Setup string
	// Focus is the policy of the paired table ("": no paired table).
	Focus string
}

// File names of the arena, written by WriteArena into the arena's folder.
const ArenaMD = "arena.md"

// HeatMapPNG returns the file name of metric slug's heat map.
func HeatMapPNG(slug string) string { return "arena-" + slug + ".png" }

// ParetoPNG returns the file name of scenario's Pareto chart.
func ParetoPNG(scenario string) string { return "pareto-" + scenario + ".png" }

// WriteArenaMarkdown writes arena.md: what was run, a table and a heat map
// per metric, the paired comparison of the focus policy, the Pareto
// frontiers and their charts.
func WriteArenaMarkdown(w io.Writer, a *Arena, opts ArenaOptions) error {
	var b strings.Builder
	b.WriteString("# llm-ring: the arena\n\n")
	fmt.Fprintf(&b, "%d policies × %d scenarios (%s) × seeds %s: %d runs. %s\n\n",
		len(a.Policies), len(a.Scenarios), strings.Join(a.Scenarios, ", "), seedRanges(a.Seeds), a.Runs, opts.Setup)
	b.WriteString("Each cell is the mean over the seeds ± the half-width of its 95 % confidence interval (Student t), " +
		"per scenario as in the scenario's own `summary.md` (each scenario's folder holds its runs and full analysis); " +
		"n/a: undefined. **Bold**: the best mean of the column, judged before rounding (ties all bold; none when the column is all equal). " +
		"The heat maps colour each column from its worst value to its best, so that scenarios of different scales " +
		"compare. Fewest redirects is bold because each throws a cached history away; a policy may redirect on " +
		"purpose to shorten queues, which the latency tables show.\n\n")
	b.WriteString("Contents: ")
	for mi := range a.Metrics {
		if mi > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "[%s](#%s)", a.Metrics[mi].Title, anchor(a.Metrics[mi].Heading()))
	}
	if opts.Focus != "" {
		fmt.Fprintf(&b, ", [paired: %s against the best other](#paired-%s-against-the-best-other-policy)", opts.Focus, anchor(opts.Focus))
	}
	b.WriteString(", [Pareto frontiers](#pareto-frontiers-hit-rate-against-p95-latency).\n\n")
	for mi := range a.Metrics {
		met := &a.Metrics[mi]
		fmt.Fprintf(&b, "## %s\n\n", met.Heading())
		if err := WriteArenaTable(&b, a, mi); err != nil {
			return err
		}
		fmt.Fprintf(&b, "\n![%s: policies × scenarios, each column coloured from worst to best](%s)\n\n", met.Title, HeatMapPNG(met.Slug))
	}
	if opts.Focus != "" {
		ps, err := a.Paired(opts.Focus)
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "## Paired: %s against the best other policy\n\n", opts.Focus)
		fmt.Fprintf(&b, "Per scenario and metric, the other policy with the best mean, and the mean over seeds of "+
			"(%s − that policy) on the same seed (same traffic) ± the half-width of its 95 %% CI (Student t): "+
			"**better** or **worse** when the whole interval lies on one side of 0, **same** when it contains 0 "+
			"(no difference shown by %d seeds). Hit rate differences are in percentage points.\n\n", opts.Focus, len(a.Seeds))
		if err := WritePairedTable(&b, a, opts.Focus); err != nil {
			return err
		}
		n := PairedCounts(ps)
		fmt.Fprintf(&b, "\n%s against the best other policy, over %d comparisons: %d better, %d same, %d worse, %d n/a.\n\n",
			opts.Focus, len(ps), n[VerdictBetter], n[VerdictSame], n[VerdictWorse], n[VerdictNone])
	}
	b.WriteString("## Pareto frontiers: hit rate against p95 latency\n\n")
	b.WriteString("A policy is on a scenario's frontier when no other has both a higher-or-equal follow-up hit rate " +
		"and a lower-or-equal p95 latency (one of them strictly), judged on the means.\n\n")
	b.WriteString("| scenario | on the frontier (hit rate %, p95 s) | chart |\n|---|---|---|\n")
	hit, p95 := a.MetricIndex("hit-rate"), a.MetricIndex("p95")
	for si, sc := range a.Scenarios {
		var on []string
		for _, pi := range a.Pareto(si) {
			on = append(on, fmt.Sprintf("%s (%s, %s)", a.Policies[pi],
				a.Metrics[hit].Format(a.Cells[hit][pi][si].Mean*a.Metrics[hit].Scale), a.Metrics[p95].Format(a.Cells[p95][pi][si].Mean)))
		}
		if len(on) == 0 {
			on = []string{"n/a"}
		}
		fmt.Fprintf(&b, "| %s | %s | [%s](%s) |\n", sc, strings.Join(on, "; "), ParetoPNG(sc), ParetoPNG(sc))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// anchor is GitHub's heading anchor: lower case, spaces to hyphens, other
// punctuation dropped.
func anchor(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
			b.WriteRune(r)
		}
	}
	return b.String()
}

// seedRanges writes sorted seeds compactly: "1-10", "1-3, 7".
func seedRanges(seeds []int64) string {
	var parts []string
	for i := 0; i < len(seeds); {
		j := i
		for j+1 < len(seeds) && seeds[j+1] == seeds[j]+1 {
			j++
		}
		if j == i {
			parts = append(parts, strconv.FormatInt(seeds[i], 10))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", seeds[i], seeds[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ", ")
}
