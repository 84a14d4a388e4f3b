package analysis

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"math"
	"path/filepath"
	"slices"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Field report files, written by WriteField beside per_run.csv.
const (
	PerStageCSV    = "per_stage.csv"
	FieldPerRunCSV = "field_per_run.csv"
	FieldMD        = "field.md"
	FieldTTFTPNG   = "field_ttft_p90.png"
	FieldGoodPNG   = "field_goodput.png"
)

// StageMean is one policy at one rate: the mean over seeds of each metric.
type StageMean struct {
	Policy string
	Rate   float64
	Seeds  int
	Field
}

// MeanByPolicyRate averages stage rows over seeds, sorted by policy, rate.
func MeanByPolicyRate(rows []StageField) []StageMean {
	type key struct {
		p string
		r float64
	}
	by := map[key][]Field{}
	for _, r := range rows {
		by[key{r.Policy, r.Rate}] = append(by[key{r.Policy, r.Rate}], r.Field)
	}
	var out []StageMean
	for k, fs := range by {
		m := StageMean{Policy: k.p, Rate: k.r, Seeds: len(fs)}
		mean := func(get func(*Field) float64) float64 {
			s := 0.0
			for i := range fs {
				s += get(&fs[i])
			}
			return s / float64(len(fs))
		}
		m.Field = Field{
			TTFTP50: mean(func(f *Field) float64 { return f.TTFTP50 }), TTFTP90: mean(func(f *Field) float64 { return f.TTFTP90 }),
			TTFTP99: mean(func(f *Field) float64 { return f.TTFTP99 }), TPOTP50: mean(func(f *Field) float64 { return f.TPOTP50 }),
			TPOTP90: mean(func(f *Field) float64 { return f.TPOTP90 }), E2EP50: mean(func(f *Field) float64 { return f.E2EP50 }),
			E2EP95: mean(func(f *Field) float64 { return f.E2EP95 }), OutputTokS: mean(func(f *Field) float64 { return f.OutputTokS }),
			Success: mean(func(f *Field) float64 { return f.Success }), CachedShare: mean(func(f *Field) float64 { return f.CachedShare }),
			GoodShare: mean(func(f *Field) float64 { return f.GoodShare }), GoodTokS: mean(func(f *Field) float64 { return f.GoodTokS }),
			IdealCachedShare: mean(func(f *Field) float64 { return f.IdealCachedShare }),
			ShedShare:        mean(func(f *Field) float64 { return f.ShedShare }), QueueWaitP90: mean(func(f *Field) float64 { return f.QueueWaitP90 }),
			Requests: int(mean(func(f *Field) float64 { return float64(f.Requests) })),
		}
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b StageMean) int { return cmp.Or(cmp.Compare(a.Policy, b.Policy), cmp.Compare(a.Rate, b.Rate)) })
	return out
}

// CrossingRate is the rate at which a policy's TTFT p90 (seed mean)
// crosses sloMS, interpolated linearly in log(rate) between the last stage
// under it and the first above; +Inf when no stage crosses, 0 when the
// first already does.
func CrossingRate(means []StageMean, policy string, sloMS float64) float64 {
	var prev *StageMean
	for i := range means {
		m := &means[i]
		if m.Policy != policy {
			continue
		}
		if m.TTFTP90 > sloMS || math.IsNaN(m.TTFTP90) {
			if prev == nil {
				return 0
			}
			lo, hi := math.Log(prev.Rate), math.Log(m.Rate)
			f := (sloMS - prev.TTFTP90) / (m.TTFTP90 - prev.TTFTP90)
			if math.IsNaN(f) {
				f = 0
			}
			return math.Exp(lo + f*(hi-lo))
		}
		prev = m
	}
	return math.Inf(1)
}

// WriteFieldMD writes the per-policy, per-rate table and each policy's
// SLO-crossing rate.
func WriteFieldMD(w io.Writer, title string, means []StageMean, slo SLO) error {
	pr := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	pr("# %s\n\nSeed means per stage (warm-up left out). SLO: TTFT ≤ %g ms, TPOT ≤ %g ms.\n\n", title, slo.TTFTMS, slo.TPOTMS)
	pr("| policy | rate/s | TTFT p50 | p90 | p99 (ms) | TPOT p50 | p90 (ms) | E2E p50 | p95 (ms) | out tok/s | success | cached | ideal | goodput | good tok/s |\n")
	pr("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, m := range means {
		pr("| %s | %g | %.0f | %.0f | %.0f | %.1f | %.1f | %.0f | %.0f | %.0f | %.1f %% | %.1f %% | %.1f %% | %.1f %% | %.0f |\n",
			m.Policy, m.Rate, m.TTFTP50, m.TTFTP90, m.TTFTP99, m.TPOTP50, m.TPOTP90, m.E2EP50, m.E2EP95, m.OutputTokS,
			100*m.Success, 100*m.CachedShare, 100*m.IdealCachedShare, 100*m.GoodShare, m.GoodTokS)
	}
	pr("\n| policy | rate where TTFT p90 crosses %g ms |\n|---|---|\n", slo.TTFTMS)
	var pols []string
	for _, m := range means {
		if !slices.Contains(pols, m.Policy) {
			pols = append(pols, m.Policy)
		}
	}
	for _, p := range pols {
		switch c := CrossingRate(means, p, slo.TTFTMS); {
		case math.IsInf(c, 1):
			pr("| %s | above every rate run |\n", p)
		case c == 0:
			pr("| %s | below the first rate |\n", p)
		default:
			pr("| %s | %.2f /s |\n", p, c)
		}
	}
	_, err := fmt.Fprintln(w)
	return err
}

// WriteRunFieldMD writes field.md for runs without stages: each policy's
// seed means over its runs' whole length (warm-up left out).
func WriteRunFieldMD(w io.Writer, title string, means []StageMean, slo SLO) error {
	pr := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	pr("# %s\n\nSeed means per policy over each run (no stages; warm-up left out). SLO: TTFT ≤ %g ms, TPOT ≤ %g ms.\n\n", title, slo.TTFTMS, slo.TPOTMS)
	pr("| policy | TTFT p50 | p90 | p99 (ms) | TPOT p50 | p90 (ms) | E2E p50 | p95 (ms) | out tok/s | success | cached | goodput | good tok/s |\n")
	pr("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, m := range means {
		pr("| %s | %.0f | %.0f | %.0f | %.1f | %.1f | %.0f | %.0f | %.0f | %.1f %% | %.1f %% | %.1f %% | %.0f |\n",
			m.Policy, m.TTFTP50, m.TTFTP90, m.TTFTP99, m.TPOTP50, m.TPOTP90, m.E2EP50, m.E2EP95, m.OutputTokS,
			100*m.Success, 100*m.CachedShare, 100*m.GoodShare, m.GoodTokS)
	}
	_, err := fmt.Fprintln(w)
	return err
}

// WriteFieldChart draws one metric of every policy against the rate.
// A logY chart has a log-scale y axis (values must be positive).
func WriteFieldChart(w io.Writer, title, ylabel string, means []StageMean, logY bool, value func(*StageMean) float64) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "arrival rate (per second, log scale)"
	p.Y.Label.Text = ylabel
	p.X.Scale = plot.LogScale{}
	var ticks []plot.Tick
	for _, m := range means {
		if len(ticks) == 0 || m.Rate > ticks[len(ticks)-1].Value {
			ticks = append(ticks, plot.Tick{Value: m.Rate, Label: strconv.FormatFloat(m.Rate, 'g', -1, 64)})
		}
	}
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	if logY {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	p.Add(plotter.NewGrid())
	p.Legend.Top, p.Legend.Left = true, true
	var pols []string
	for _, m := range means {
		if !slices.Contains(pols, m.Policy) {
			pols = append(pols, m.Policy)
		}
	}
	for i, pol := range pols {
		var pts plotter.XYs
		for j := range means {
			if m := &means[j]; m.Policy == pol && !math.IsNaN(value(m)) && (!logY || value(m) > 0) {
				pts = append(pts, plotter.XY{X: m.Rate, Y: value(m)})
			}
		}
		if len(pts) == 0 {
			continue
		}
		line, points, err := plotter.NewLinePoints(pts)
		if err != nil {
			return err
		}
		line.Color, points.Color = PolicyColor(i), PolicyColor(i)
		line.Dashes = plotutil.Dashes(i)
		points.Shape = plotutil.Shape(i)
		p.Add(line, points)
		p.Legend.Add(pol, line, points)
	}
	c := vgimg.New(vg.Points(720), vg.Points(440))
	p.Draw(draw.New(c))
	_, err := vgimg.PngCanvas{Canvas: c}.WriteTo(w)
	return err
}

// WriteField loads the runs of resultsDir and writes per_stage.csv,
// field_per_run.csv, field.md and, when the runs have stages, the two
// charts against the rate into outDir. It returns the stage means.
func WriteField(resultsDir, outDir, title string, slo SLO) ([]StageMean, error) {
	runs, err := Load(resultsDir)
	if err != nil {
		return nil, err
	}
	stages := StageFields(runs, slo)
	means := MeanByPolicyRate(stages)
	perRun := RunFields(runs, slo)
	files := map[string]func(io.Writer) error{
		PerStageCSV:    func(w io.Writer) error { return WriteFieldCSV(w, stages) },
		FieldPerRunCSV: func(w io.Writer) error { return WriteFieldCSV(w, perRun) },
	}
	if len(means) > 0 {
		files[FieldMD] = func(w io.Writer) error { return WriteFieldMD(w, title, means, slo) }
		files[FieldTTFTPNG] = func(w io.Writer) error {
			return WriteFieldChart(w, title+": TTFT p90", "TTFT p90 (ms, seed mean, log scale)", means, true, func(m *StageMean) float64 { return m.TTFTP90 })
		}
		files[FieldGoodPNG] = func(w io.Writer) error {
			return WriteFieldChart(w, title+": goodput", "requests meeting the SLO (%, seed mean)", means, false, func(m *StageMean) float64 { return 100 * m.GoodShare })
		}
	} else {
		// No stages (closed-loop runs, a trace): each policy's runs over
		// their whole length, and no chart against the rate.
		whole := MeanByPolicyRate(perRun)
		files[FieldMD] = func(w io.Writer) error { return WriteRunFieldMD(w, title, whole, slo) }
	}
	if adm := AdmissionRows(runs, slo); len(adm) > 0 {
		files[AdmissionCSV] = func(w io.Writer) error { return WriteAdmissionCSV(w, adm) }
	}
	for _, name := range slices.Sorted(maps.Keys(files)) {
		if err := WriteFile(filepath.Join(outDir, name), files[name]); err != nil {
			return nil, err
		}
	}
	return means, nil
}
