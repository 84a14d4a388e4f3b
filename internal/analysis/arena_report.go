package analysis

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
)

// The arena's report: a markdown table per metric, the paired table of the
// focus policy, and arena.md around them (the charts are arena_charts.go).

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
