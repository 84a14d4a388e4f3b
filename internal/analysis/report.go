package analysis

import (
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// File names written by Write.
const (
	SummaryMD          = "summary.md"
	PerRunCSV          = "per_run.csv"
	SummaryPNG         = "summary.png"
	HitRateOverTimePNG = "hit_rate_over_time.png"
)

// tableRow is one metric row of the summary table.
type tableRow struct {
	name string
	cell func(*PolicySummary) string
}

func tableRows(o Options) []tableRow {
	return []tableRow{
		{"Runs", func(p *PolicySummary) string { return strconv.Itoa(p.Runs) }},
		{"Requests", func(p *PolicySummary) string { return strconv.Itoa(p.Requests) }},
		{"**Errors** (check first)", func(p *PolicySummary) string {
			if p.Errors == 0 {
				return "0"
			}
			return fmt.Sprintf("**%d** (%.1f%%)", p.Errors, 100*float64(p.Errors)/float64(p.Requests))
		}},
		{"Follow-up turns", func(p *PolicySummary) string { return strconv.Itoa(p.FollowUps) }},
		{"Cache hit rate (follow-up turns)", func(p *PolicySummary) string { return percent(p.HitRate) }},
		{"Cache miss rate", func(p *PolicySummary) string { return percent(p.MissRate) }},
		{"Avoidable misses (history cached on another replica)", func(p *PolicySummary) string {
			return strconv.Itoa(p.AvoidableMisses)
		}},
		{"Avoidable share of misses", func(p *PolicySummary) string { return percent(p.AvoidableShare) }},
		{"Redirects away from the cache", func(p *PolicySummary) string { return strconv.Itoa(p.Redirects) }},
		{"Scale-up: replica ready at (s)", func(p *PolicySummary) string { return seconds(p.ScaleReadyS) }},
		{fmt.Sprintf("Scale-up: hit rate in the next %s s", trimFloat(o.WindowS)), func(p *PolicySummary) string {
			return percent(p.ScaleHitRate)
		}},
		{"Scale-up: conversations moved", func(p *PolicySummary) string { return percent(p.MovedShare) }},
		{"p50 latency (s)", func(p *PolicySummary) string { return seconds(p.LatencyP50S) }},
		{"p95 latency (s)", func(p *PolicySummary) string { return seconds(p.LatencyP95S) }},
		{"p50 time to first token (s)", func(p *PolicySummary) string { return seconds(p.TTFTP50S) }},
		{"Work imbalance (busiest / mean)", func(p *PolicySummary) string { return fixed(p.Imbalance, 3, "") }},
		{"Cached share of prompt tokens", func(p *PolicySummary) string { return percent(p.CachedShare) }},
	}
}

// WriteTable writes the summary table in markdown: metrics as rows, policies
// as columns, cells "mean ± 95 % CI half-width (n runs)".
func WriteTable(w io.Writer, s Summary) error {
	var b strings.Builder
	b.WriteString("| Metric |")
	for _, p := range s.Policies {
		fmt.Fprintf(&b, " %s |", p.Policy)
	}
	b.WriteString("\n|---|")
	for range s.Policies {
		b.WriteString("---:|")
	}
	b.WriteString("\n")
	for _, r := range tableRows(s.Options) {
		fmt.Fprintf(&b, "| %s |", r.name)
		for i := range s.Policies {
			fmt.Fprintf(&b, " %s |", r.cell(&s.Policies[i]))
		}
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteMarkdown writes summary.md: a title, what was combined, the table,
// the definitions in short and links to the charts.
func WriteMarkdown(w io.Writer, s Summary) error {
	var b strings.Builder
	b.WriteString("# llm-ring: policy comparison\n\n")
	total := 0
	var parts []string
	for _, p := range s.Policies {
		total += p.Runs
		parts = append(parts, fmt.Sprintf("%s %s (seeds %s; %s)", p.Policy, plural(p.Runs, "run"),
			joinInts(p.Seeds), strings.Join(p.Modes, ", ")))
	}
	fmt.Fprintf(&b, "Combined %s: %s.\n", plural(total, "run"), strings.Join(parts, "; "))
	b.WriteString("Each cell is the mean over runs ± the half-width of its 95 % confidence interval (Student t), " +
		"with the number of runs where the metric is defined; counts are summed over runs; n/a: undefined " +
		"(no follow-up turns, no scale-up). **Check the errors row first.**\n\n")
	if err := WriteTable(&b, s); err != nil {
		return err
	}
	fmt.Fprintf(&b, "\nA follow-up turn is a successful request (status 200, no error) whose previous turn in the same "+
		"conversation succeeded; it is a **hit** when its cache_n ≥ %s × the previous turn's prompt (cache_n + prompt_n), "+
		"else a miss, **avoidable** when the previous turn was served by another replica (a **redirect**). "+
		"Scale-up metrics use the follow-up turns starting in the %s s after the extra replica became ready, and the "+
		"conversations whose first turn after that moment went to another replica than their last turn before. "+
		"Latency percentiles interpolate linearly between order statistics; imbalance = busiest replica's processed tokens "+
		"(prompt_n + predicted_n) / mean over the run's replicas. Full definitions: docs/design.md.\n\n",
		trimFloat(s.Options.HitFraction), trimFloat(s.Options.WindowS))
	fmt.Fprintf(&b, "![Hit rate, p95 latency and work imbalance per policy](%s)\n\n", SummaryPNG)
	fmt.Fprintf(&b, "![Follow-up hit rate over time, per policy, in %s s bins](%s)\n", trimFloat(s.Options.BinS), HitRateOverTimePNG)
	_, err := io.WriteString(w, b.String())
	return err
}

// PerRunHeader returns the header of per_run.csv.
func PerRunHeader() []string {
	return []string{
		"run_id", "policy", "seed", "mode", "order", "replicas",
		"requests", "errors", "follow_ups", "hits", "misses", "hit_rate", "miss_rate",
		"avoidable_misses", "avoidable_share", "redirects",
		"scale_ready_s", "scale_follow_ups", "scale_hits", "scale_hit_rate",
		"moved_eligible", "moved", "moved_share",
		"latency_p50_s", "latency_p95_s", "ttft_p50_s", "imbalance", "cached_share",
	}
}

// WritePerRunCSV writes per_run.csv: one row per run with every metric.
// Undefined values (NaN) are empty cells; rates and shares are fractions.
func WritePerRunCSV(w io.Writer, s Summary) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(PerRunHeader()); err != nil {
		return err
	}
	num := func(v float64) string {
		if math.IsNaN(v) {
			return ""
		}
		return strconv.FormatFloat(v, 'f', 4, 64)
	}
	itoa := strconv.Itoa
	for _, m := range s.Runs {
		row := []string{
			m.RunID, m.Policy, strconv.FormatInt(m.Seed, 10), m.Mode, itoa(m.Order), itoa(m.ReplicaCount),
			itoa(m.Requests), itoa(m.Errors), itoa(m.FollowUps), itoa(m.Hits), itoa(m.Misses),
			num(m.HitRate), num(m.MissRate),
			itoa(m.AvoidableMisses), num(m.AvoidableShare), itoa(m.Redirects),
			num(m.ScaleReadyS), itoa(m.ScaleFollowUps), itoa(m.ScaleHits), num(m.ScaleHitRate),
			itoa(m.MovedEligible), itoa(m.Moved), num(m.MovedShare),
			num(m.LatencyP50S), num(m.LatencyP95S), num(m.TTFTP50S), num(m.Imbalance), num(m.CachedShare),
		}
		if err := cw.Write(row); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// percent formats a fraction estimate as "88.5% ± 1.2% (2 runs)".
func percent(e Estimate) string {
	e.Mean *= 100
	e.HalfWidth *= 100
	return fixed(e, 1, "%")
}

// seconds formats a duration estimate with about three significant digits.
func seconds(e Estimate) string { return fixed(e, secondsPrec(e.Mean), "") }

// secondsPrec is the number of decimals that shows about three significant
// digits of a duration in seconds (1 decimal from 100 s up).
func secondsPrec(v float64) int {
	switch a := math.Abs(v); {
	case a >= 100:
		return 1
	case a >= 1:
		return 2
	}
	return 3
}

// fixed formats an estimate with prec decimals and a unit suffix.
func fixed(e Estimate, prec int, unit string) string {
	if e.N == 0 || math.IsNaN(e.Mean) {
		return "n/a"
	}
	v := strconv.FormatFloat(e.Mean, 'f', prec, 64) + unit
	if e.N < 2 || math.IsNaN(e.HalfWidth) {
		return v + " (1 run)"
	}
	return fmt.Sprintf("%s ± %s%s (%d runs)", v, strconv.FormatFloat(e.HalfWidth, 'f', prec, 64), unit, e.N)
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

func joinInts(xs []int64) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.FormatInt(x, 10)
	}
	return strings.Join(s, ", ")
}

func trimFloat(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
