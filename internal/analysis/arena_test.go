package analysis

import (
	"bytes"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
)

// TestParetoFrontier: hit rate (x) up, p95 (y) down, on hand-made points.
func TestParetoFrontier(t *testing.T) {
	nan := math.NaN()
	for _, tc := range []struct {
		name   string
		xs, ys []float64
		want   []int
	}{
		{"one point is its own frontier", []float64{50}, []float64{10}, []int{0}},
		{"a point better on both axes dominates", []float64{90, 80}, []float64{10, 20}, []int{0}},
		{"a trade-off: both on the frontier, by x ascending", []float64{95, 80}, []float64{30, 10}, []int{1, 0}},
		{"equal hit rate, lower latency wins (one strict axis is enough)", []float64{90, 90}, []float64{12, 10}, []int{1}},
		{"equal latency, higher hit rate wins", []float64{85, 90}, []float64{10, 10}, []int{1}},
		{"identical points do not dominate each other", []float64{90, 90, 70}, []float64{10, 10, 20}, []int{0, 1}},
		{"a staircase of five, two dominated",
			// 0: (40, 5)  frontier: nothing has x ≥ 40 and y ≤ 5
			// 1: (60, 20) dominated by 2 (70, 15)
			// 2: (70, 15) frontier
			// 3: (90, 30) frontier
			// 4: (85, 40) dominated by 3
			[]float64{40, 60, 70, 90, 85}, []float64{5, 20, 15, 30, 40}, []int{0, 2, 3}},
		{"points without a value are left out, and dominate nothing", []float64{nan, 80, 99}, []float64{1, 10, nan}, []int{1}},
		{"no points", nil, nil, nil},
	} {
		if got := ParetoFrontier(tc.xs, tc.ys); !slices.Equal(got, tc.want) {
			t.Errorf("%s: ParetoFrontier(%v, %v) = %v, want %v", tc.name, tc.xs, tc.ys, got, tc.want)
		}
	}
}

// TestNormalizeColumn: 1 is the column's best, 0 its worst, whatever the
// scale or direction.
func TestNormalizeColumn(t *testing.T) {
	nan := math.NaN()
	for _, tc := range []struct {
		name string
		vals []float64
		b    Better
		want []float64
	}{
		{"latencies: the lowest is best", []float64{10, 20, 30}, LowerIsBetter, []float64{1, 0.5, 0}},
		{"hit rates: the highest is best", []float64{0.5, 1, 0.75}, HigherIsBetter, []float64{0, 1, 0.5}},
		{"scale does not matter: seconds and hours compare", []float64{3600, 7200, 10800}, LowerIsBetter, []float64{1, 0.5, 0}},
		{"a missing value stays missing, the others span 0..1", []float64{nan, 4, 2}, LowerIsBetter, []float64{nan, 0, 1}},
		{"all equal: all best", []float64{7, 7}, LowerIsBetter, []float64{1, 1}},
		{"all missing", []float64{nan, nan}, HigherIsBetter, []float64{nan, nan}},
	} {
		got := NormalizeColumn(tc.vals, tc.b)
		same := len(got) == len(tc.want)
		for i := 0; same && i < len(got); i++ {
			same = math.IsNaN(got[i]) && math.IsNaN(tc.want[i]) || math.Abs(got[i]-tc.want[i]) < 1e-12
		}
		if !same {
			t.Errorf("%s: NormalizeColumn(%v) = %v, want %v", tc.name, tc.vals, got, tc.want)
		}
	}
	if c := HeatColor(1); c != heatBest {
		t.Errorf("HeatColor(1) = %v, want the best colour %v", c, heatBest)
	}
	if c := HeatColor(0); c != heatWorst {
		t.Errorf("HeatColor(0) = %v, want the worst colour %v", c, heatWorst)
	}
	if c := HeatColor(math.NaN()); c != heatNaN {
		t.Errorf("HeatColor(NaN) = %v, want grey", c)
	}
}

// run is a hand-made run's metrics: hit rate, p95 latency, errors; the other
// metrics are undefined.
func run(policy string, seed int64, hit, p95 float64, errs int) Metrics {
	nan := math.NaN()
	return Metrics{Policy: policy, Seed: seed, HitRate: hit, LatencyP95S: p95, Errors: errs,
		CachedShare: nan, LatencyP50S: nan, TTFTP50S: nan, Imbalance: nan}
}

// handArena: three policies on two scenarios, three seeds. On "chat",
// llm-aware's p95 is consistent's minus 1 s and its hit rate consistent's
// minus 20 points on every seed (paired differences with zero spread, so
// their CIs exclude 0); on "docs" its hit rate is below consistent's by 10,
// 20 and 30 points (a spread wide enough that 3 seeds show no difference).
func handArena(t *testing.T) Arena {
	t.Helper()
	chat := Summary{Runs: []Metrics{
		run("consistent", 1, 0.9, 10, 0), run("consistent", 2, 0.8, 20, 0), run("consistent", 3, 0.7, 30, 0),
		run("llm-aware", 1, 0.7, 9, 0), run("llm-aware", 2, 0.6, 19, 0), run("llm-aware", 3, 0.5, 29, 0),
		run("round-robin", 1, 0.3, 40, 0), run("round-robin", 2, 0.3, 40, 0), run("round-robin", 3, 0.3, 40, 0),
	}}
	docs := Summary{Runs: []Metrics{
		run("consistent", 1, 0.9, 50, 0), run("consistent", 2, 0.9, 50, 0), run("consistent", 3, 0.9, 50, 3),
		run("llm-aware", 1, 0.8, 50, 0), run("llm-aware", 2, 0.7, 51, 0), run("llm-aware", 3, 0.6, 49, 0),
		run("round-robin", 1, 0.95, 60, 0), run("round-robin", 2, 0.5, 60, 0), run("round-robin", 3, 0.5, 60, 0),
	}}
	a, err := NewArena([]ArenaScenario{{"chat", chat}, {"docs", docs}})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestArenaCellsAndBest(t *testing.T) {
	a := handArena(t)
	if !slices.Equal(a.Policies, []string{"round-robin", "consistent", "llm-aware"}) {
		t.Fatalf("policies %v, want the canonical order", a.Policies)
	}
	hit, p95, errs := a.MetricIndex("hit-rate"), a.MetricIndex("p95"), a.MetricIndex("errors")
	// consistent's hit rate on chat: mean of 0.9, 0.8, 0.7.
	if e := a.Cells[hit][1][0]; math.Abs(e.Mean-0.8) > 1e-12 || e.N != 3 {
		t.Errorf("consistent on chat: %+v, want mean 0.8 over 3 runs", e)
	}
	for _, tc := range []struct {
		name       string
		metric, sc int
		want       []int
	}{
		{"hit rate, chat: consistent (0.8) is the highest", hit, 0, []int{1}},
		{"hit rate, docs: consistent (0.9) beats round-robin's mean (0.65)", hit, 1, []int{1}},
		{"p95, chat: llm-aware (19) is the lowest", p95, 0, []int{2}},
		{"p95, docs: consistent and llm-aware tie at 50", p95, 1, []int{1, 2}},
		{"errors, chat: all zero, nothing to bold", errs, 0, nil},
		{"errors, docs: consistent's 1 per run loses, the two zeros tie", errs, 1, []int{0, 2}},
	} {
		if got := a.Best(tc.metric, tc.sc); !slices.Equal(got, tc.want) {
			t.Errorf("%s: Best = %v, want %v", tc.name, got, tc.want)
		}
	}
	// The undefined metrics are n/a, never bold.
	if got := a.Best(a.MetricIndex("p50"), 0); got != nil {
		t.Errorf("p50 (undefined everywhere): Best = %v, want none", got)
	}
	var b bytes.Buffer
	if err := WriteArenaTable(&b, &a, p95); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| policy | chat | docs |", "| llm-aware | **19.00 ± 24.84** | **50.00 ± 2.48** |", "| round-robin | 40.00 ± 0.00 | 60.00 ± 0.00 |"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("p95 table lacks %q:\n%s", want, b.String())
		}
	}
}

func TestArenaPaired(t *testing.T) {
	a := handArena(t)
	ps, err := a.Paired("llm-aware")
	if err != nil {
		t.Fatal(err)
	}
	get := func(sc, metric string) Paired {
		for _, p := range ps {
			if p.Scenario == sc && p.Metric == metric {
				return p
			}
		}
		t.Fatalf("no paired comparison for %s %s", sc, metric)
		return Paired{}
	}
	for _, tc := range []struct {
		name, sc, metric string
		against          string
		mean, hw         float64
		verdict          Verdict
	}{
		// 1 s lower on every seed: zero spread, so the CI is [−1, −1].
		{"chat p95: 1 s better than consistent on each seed", "chat", "p95", "consistent", -1, 0, VerdictBetter},
		// Differences 0.7−0.9, 0.6−0.8, 0.5−0.7: −0.2 each.
		{"chat hit rate: 20 points worse on each seed", "chat", "hit-rate", "consistent", -0.2, 0, VerdictWorse},
		// The best other on docs is consistent (0.9), not round-robin (mean 0.65
		// despite its 0.95 on seed 1); differences −0.1, −0.2, −0.3: mean −0.2,
		// sd 0.1, half-width t(0.975, 2) · 0.1 / √3 = 0.248: the CI contains 0.
		{"docs hit rate: 20 points lower, within the noise", "docs", "hit-rate", "consistent", -0.2, 4.3027 * 0.1 / math.Sqrt(3), VerdictSame},
		// consistent (50, 50, 50) vs llm-aware (50, 51, 49): differences 0, +1, −1, the CI contains 0.
		{"docs p95: same", "docs", "p95", "consistent", 0, 4.3027 * 1 / math.Sqrt(3), VerdictSame},
		// p50 is undefined everywhere: no one to compare with.
		{"docs p50: n/a", "docs", "p50", "", math.NaN(), math.NaN(), VerdictNone},
	} {
		p := get(tc.sc, tc.metric)
		close := func(x, y float64) bool { return math.IsNaN(x) && math.IsNaN(y) || math.Abs(x-y) < 1e-9 }
		if p.Against != tc.against || !close(p.Diff.Mean, tc.mean) || !close(p.Diff.HalfWidth, tc.hw) || p.Verdict != tc.verdict {
			t.Errorf("%s: %+v, want against %q, diff %v ± %v, %s", tc.name, p, tc.against, tc.mean, tc.hw, tc.verdict)
		}
	}
	if _, err := a.Paired("predictive"); err == nil || !strings.Contains(err.Error(), "did not run") {
		t.Errorf("Paired of a policy that did not run: %v", err)
	}
	var b bytes.Buffer
	if err := WritePairedTable(&b, &a, "llm-aware"); err != nil {
		t.Fatal(err)
	}
	if want := "| chat | −20.0 ± 0.0 vs consistent: **worse** | n/a | −1.00 ± 0.00 vs consistent: better | n/a |"; !strings.Contains(b.String(), want) {
		t.Errorf("paired table lacks %q:\n%s", want, b.String())
	}
}

func TestNewArenaErrors(t *testing.T) {
	if _, err := NewArena(nil); !errors.Is(err, ErrNoRuns) {
		t.Errorf("no scenarios: %v, want ErrNoRuns", err)
	}
	s := Summary{Runs: []Metrics{run("consistent", 1, 0.9, 10, 0)}}
	if _, err := NewArena([]ArenaScenario{{"chat", s}, {"chat", s}}); err == nil || !strings.Contains(err.Error(), `"chat" given twice`) {
		t.Errorf("a scenario twice: %v", err)
	}
}

// TestRoundTicks: tick labels carry the decimals of their step and no
// floating-point residue.
func TestRoundTicks(t *testing.T) {
	for _, tc := range []struct {
		lo, hi float64
		want   []string
	}{
		{9.9, 10.9, []string{"10.0", "10.2", "10.4", "10.6", "10.8"}}, // a step of 0.2
		{0, 300, []string{"0", "50", "100", "150", "200", "250", "300"}},
	} {
		var got []string
		for _, tk := range (roundTicks{}).Ticks(tc.lo, tc.hi) {
			if tk.Label != "" {
				got = append(got, tk.Label)
			}
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("Ticks(%v, %v) labels %q, want %q", tc.lo, tc.hi, got, tc.want)
		}
	}
}
