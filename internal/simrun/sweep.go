package simrun

import (
	"fmt"
	"io"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/llm-ring/llm-ring/internal/analysis"
)

// SweepPoint is the analysis of the runs made with one value of a swept
// setting.
type SweepPoint struct {
	Value   string // as given on the command line ("0.25")
	Summary analysis.Summary
}

// SweepFiles returns the names of a sweep's table and chart for key.
func SweepFiles(key string) (md, png string) {
	return "sweep-" + key + ".md", "sweep-" + key + ".png"
}

// WriteSweep writes the sweep's table (markdown) and chart (PNG) into dir,
// named by SweepFiles, and returns their paths.
func WriteSweep(dir, key string, pts []SweepPoint) (md, png string, err error) {
	mdName, pngName := SweepFiles(key)
	md, png = filepath.Join(dir, mdName), filepath.Join(dir, pngName)
	err = analysis.WriteFile(md, func(w io.Writer) error {
		fmt.Fprintf(w, "# Sweep of %s\n\n", key)
		fmt.Fprintf(w, "Each row is one policy at one value of %s: the mean over its runs (seeds) ± the half-width "+
			"of the 95 %% confidence interval (Student t), as in summary.md. Hit rate: follow-up turns whose "+
			"prompt reused ≥ %s of the previous turn's prompt from the cache.\n\n",
			key, strconv.FormatFloat(analysis.DefaultHitFraction, 'f', -1, 64))
		if err := WriteSweepTable(w, key, pts); err != nil {
			return err
		}
		fmt.Fprintf(w, "\n![Hit rate and p95 latency against %s, one line per policy](%s)\n", key, pngName)
		return nil
	})
	if err != nil {
		return "", "", err
	}
	if err := analysis.WriteFile(png, func(w io.Writer) error { return WriteSweepChart(w, key, pts) }); err != nil {
		return "", "", err
	}
	return md, png, nil
}

// WriteSweepTable writes the sweep as a markdown table: one row per (value,
// policy), in the order of the values, then policies in analysis order.
func WriteSweepTable(w io.Writer, key string, pts []SweepPoint) error {
	var b strings.Builder
	fmt.Fprintf(&b, "| %s | policy | runs | requests | errors | hit rate | redirects / run | p50 latency (s) | p95 latency (s) | imbalance |\n", key)
	b.WriteString("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, pt := range pts {
		for i := range pt.Summary.Policies {
			p := &pt.Summary.Policies[i]
			fmt.Fprintf(&b, "| %s | %s | %d | %d | %d | %s | %s | %s | %s | %s |\n",
				pt.Value, p.Policy, p.Runs, p.Requests, p.Errors,
				estimate(p.HitRate, 100, 1, "%"), perRun(p.Redirects, p.Runs),
				estimate(p.LatencyP50S, 1, 1, ""), estimate(p.LatencyP95S, 1, 1, ""), estimate(p.Imbalance, 1, 3, ""))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func perRun(n, runs int) string {
	if runs == 0 {
		return "n/a"
	}
	return strconv.FormatFloat(float64(n)/float64(runs), 'f', 1, 64)
}

// estimate formats mean ± half-width, scaled, with prec decimals.
func estimate(e analysis.Estimate, scale float64, prec int, unit string) string {
	if e.N == 0 || math.IsNaN(e.Mean) {
		return "n/a"
	}
	s := strconv.FormatFloat(e.Mean*scale, 'f', prec, 64) + unit
	if e.N >= 2 && !math.IsNaN(e.HalfWidth) {
		s += " ± " + strconv.FormatFloat(e.HalfWidth*scale, 'f', prec, 64)
	}
	return s
}

// WriteSweepChart draws the sweep: hit rate (left) and p95 latency (right)
// against the swept value, one line per policy, with 95 % confidence
// intervals as error bars. Numeric values are placed on a numeric axis;
// otherwise the values are evenly spaced categories.
func WriteSweepChart(w io.Writer, key string, pts []SweepPoint) error {
	if len(pts) == 0 {
		return analysis.ErrNoRuns
	}
	c := newSweepChart(key, pts)
	var plots []*plot.Plot
	for pi, pn := range sweepPanels() {
		p, err := c.panel(pn, pi == 0)
		if err != nil {
			return err
		}
		plots = append(plots, p)
	}
	return analysis.WritePanels(w, plots, 12*vg.Inch, 5*vg.Inch)
}

// sweepPanel is one panel of the sweep's chart: a policy summary's
// estimate, scaled, against the swept value.
type sweepPanel struct {
	title, ylabel string
	value         func(*analysis.PolicySummary) analysis.Estimate
	scale         float64
}

func sweepPanels() []sweepPanel {
	return []sweepPanel{
		{"Cache hit rate (follow-up turns)", "hit rate (%)", func(p *analysis.PolicySummary) analysis.Estimate { return p.HitRate }, 100},
		{"p95 latency", "p95 latency (s)", func(p *analysis.PolicySummary) analysis.Estimate { return p.LatencyP95S }, 1},
	}
}

// sweepChart is what every panel shares: the points, their places on the
// x axis (the values when all are numbers, else their ranks) and the
// policies, in analysis order.
type sweepChart struct {
	key              string
	pts              []SweepPoint
	xs               []float64
	names            []string
	minX, maxX, span float64
}

func newSweepChart(key string, pts []SweepPoint) *sweepChart {
	c := &sweepChart{key: key, pts: pts, xs: make([]float64, len(pts))}
	numeric := true
	for i, pt := range pts {
		v, err := strconv.ParseFloat(pt.Value, 64)
		if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
			numeric = false
		}
		c.xs[i] = v
	}
	if !numeric {
		for i := range c.xs {
			c.xs[i] = float64(i)
		}
	}
	// Policies in order of first appearance (each summary is in analysis order).
	for _, pt := range pts {
		for _, p := range pt.Summary.Policies {
			if !slices.Contains(c.names, p.Policy) {
				c.names = append(c.names, p.Policy)
			}
		}
	}
	analysis.SortPolicies(c.names)
	c.minX, c.maxX = c.xs[0], c.xs[0]
	for _, x := range c.xs {
		c.minX, c.maxX = math.Min(c.minX, x), math.Max(c.maxX, x)
	}
	c.span = c.maxX - c.minX
	if c.span == 0 {
		c.span = 1
	}
	return c
}

// panel draws one panel: a line per policy; with legend (the left panel),
// the policies' legend in head room above the data.
func (c *sweepChart) panel(pn sweepPanel, legend bool) (*plot.Plot, error) {
	ticks := make([]plot.Tick, len(c.pts))
	for i, pt := range c.pts {
		ticks[i] = plot.Tick{Value: c.xs[i], Label: pt.Value}
	}
	p := plot.New()
	p.Title.Text = pn.title + " vs " + c.key
	p.Title.TextStyle.Font.Size = 13
	p.X.Label.Text = c.key
	p.Y.Label.Text = pn.ylabel
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	p.Add(plotter.NewGrid())
	lo, hi := math.Inf(1), math.Inf(-1)
	for ci := range c.names {
		llo, lhi, err := c.addLine(p, pn, ci, legend)
		if err != nil {
			return nil, err
		}
		lo, hi = math.Min(lo, llo), math.Max(hi, lhi)
	}
	if !math.IsInf(lo, 0) {
		// Head room above the data for the legend (left panel).
		r := math.Max(hi-lo, 1)
		p.Y.Min = math.Max(0, lo-0.08*r)
		p.Y.Max = hi + 0.08*r
		if legend {
			p.Y.Max = hi + (0.1+0.075*float64(len(c.names)))*r
			p.Legend.Top, p.Legend.Left = true, true
			p.Legend.XOffs, p.Legend.YOffs = vg.Points(6), -vg.Points(4)
			p.Legend.TextStyle.Font.Size = 10
		}
	}
	pad := c.span * 0.06
	p.X.Min, p.X.Max = c.minX-pad, c.maxX+pad
	return p, nil
}

// addLine draws policy ci's line through the points that have its
// estimate, with error bars where there are several runs, nudged sideways
// a little so that the policies' error bars do not hide each other. It
// returns the lowest and highest y drawn (+Inf, -Inf for none).
func (c *sweepChart) addLine(p *plot.Plot, pn sweepPanel, ci int, legend bool) (lo, hi float64, err error) {
	lo, hi = math.Inf(1), math.Inf(-1)
	dodge := (float64(ci) - float64(len(c.names)-1)/2) * c.span * 0.012
	var line, bars plotter.XYs
	var errs plotter.YErrors
	for i := range c.pts {
		ps := findPolicy(&c.pts[i].Summary, c.names[ci])
		if ps == nil {
			continue
		}
		e := pn.value(ps)
		if e.N == 0 || math.IsNaN(e.Mean) {
			continue
		}
		x, y := c.xs[i]+dodge, e.Mean*pn.scale
		line = append(line, plotter.XY{X: x, Y: y})
		lo, hi = math.Min(lo, y), math.Max(hi, y)
		if e.N >= 2 && !math.IsNaN(e.HalfWidth) {
			hw := e.HalfWidth * pn.scale
			bars = append(bars, plotter.XY{X: x, Y: y})
			errs = append(errs, struct{ Low, High float64 }{hw, hw})
			lo, hi = math.Min(lo, y-hw), math.Max(hi, y+hw)
		}
	}
	if len(line) == 0 {
		return lo, hi, nil
	}
	l, s, err := plotter.NewLinePoints(line)
	if err != nil {
		return lo, hi, err
	}
	clr := analysis.PolicyColor(ci)
	l.Color, s.Color = clr, clr
	l.Width = vg.Points(2)
	s.Shape = plotutil.Shape(ci)
	s.Radius = vg.Points(3.5)
	p.Add(l, s)
	if len(bars) > 0 {
		eb := &plotter.YErrorBars{XYs: bars, YErrors: errs, LineStyle: l.LineStyle, CapWidth: vg.Points(6)}
		eb.LineStyle.Width = vg.Points(1)
		p.Add(eb)
	}
	if legend {
		p.Legend.Add(c.names[ci], l, s)
	}
	return lo, hi, nil
}

func findPolicy(s *analysis.Summary, name string) *analysis.PolicySummary {
	for i := range s.Policies {
		if s.Policies[i].Policy == name {
			return &s.Policies[i]
		}
	}
	return nil
}
