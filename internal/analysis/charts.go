package analysis

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// WriteCharts writes summary.png and hit_rate_over_time.png into outDir.
func WriteCharts(outDir string, s Summary) error {
	for _, c := range []struct {
		name  string
		write func(io.Writer, Summary) error
	}{{SummaryPNG, WriteSummaryChart}, {HitRateOverTimePNG, WriteHitRateChart}} {
		if err := WriteFile(filepath.Join(outDir, c.name), func(w io.Writer) error { return c.write(w, s) }); err != nil {
			return err
		}
	}
	return nil
}

// WriteFile creates path and writes it with write, reporting close errors.
func WriteFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", path, err)
	}
	return f.Close()
}

// PolicyColor gives each policy the same colour in every chart: the soft
// palette, then the dark one, so that up to 14 policies are told apart.
func PolicyColor(i int) color.Color {
	soft, dark := plotutil.SoftColors, plotutil.DarkColors
	i %= len(soft) + len(dark)
	if i < len(soft) {
		return soft[i]
	}
	return dark[i-len(soft)]
}

// panel is one bar chart of summary.png.
type panel struct {
	title, ylabel string
	value         func(*PolicySummary) Estimate
	scale         float64 // multiplies values (100 for percentages)
	// lo and hi bound the metric (a hit rate lies in [0, 100] %); error bars
	// are drawn clipped to them.
	lo, hi float64
	format func(float64) string
}

// WriteSummaryChart draws summary.png: three panels (hit rate, p95 latency,
// work imbalance), one bar per policy at the mean over runs, with a 95 %
// confidence-interval error bar when a policy has several runs (clipped to
// the metric's possible range: a hit rate stays within [0, 100] %, an
// imbalance at or above 1), and the mean written above each bar.
func WriteSummaryChart(w io.Writer, s Summary) error {
	if len(s.Policies) == 0 {
		return ErrNoRuns
	}
	panels := []panel{
		{"Cache hit rate (follow-up turns)", "hit rate (%)",
			func(p *PolicySummary) Estimate { return p.HitRate }, 100, 0, 100,
			func(v float64) string { return fmt.Sprintf("%.1f%%", v) }},
		{"p95 latency", "p95 latency (s)",
			func(p *PolicySummary) Estimate { return p.LatencyP95S }, 1, 0, math.Inf(1),
			func(v float64) string { return strconv.FormatFloat(v, 'f', secondsPrec(v), 64) + " s" }},
		{"Work imbalance", "busiest / mean processed tokens",
			func(p *PolicySummary) Estimate { return p.Imbalance }, 1, 1, math.Inf(1),
			func(v float64) string { return fmt.Sprintf("%.3f", v) }},
	}
	const width, height = 13 * vg.Inch, 5 * vg.Inch
	plots := make([][]*plot.Plot, 1)
	for _, pn := range panels {
		p, err := barPanel(s, pn, width/3)
		if err != nil {
			return err
		}
		plots[0] = append(plots[0], p)
	}
	return WritePanels(w, plots[0], width, height)
}

// WritePanels draws plots side by side, aligned, as one PNG of the given
// size: the layout of every multi-panel chart (summary.png, sweep charts).
func WritePanels(w io.Writer, plots []*plot.Plot, width, height vg.Length) error {
	img := vgimg.New(width, height)
	tiles := draw.Tiles{Rows: 1, Cols: len(plots), PadX: vg.Points(24),
		PadTop: vg.Points(8), PadBottom: vg.Points(8), PadLeft: vg.Points(8), PadRight: vg.Points(8)}
	canvases := plot.Align([][]*plot.Plot{plots}, tiles, draw.New(img))
	for i, p := range plots {
		p.Draw(canvases[0][i])
	}
	_, err := vgimg.PngCanvas{Canvas: img}.WriteTo(w)
	return err
}

func barPanel(s Summary, pn panel, panelWidth vg.Length) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = pn.title
	p.Title.TextStyle.Font.Size = 13
	p.Y.Label.Text = pn.ylabel
	p.Y.Label.TextStyle.Font.Size = 11
	p.Y.Tick.Marker = niceTicks{}
	p.Add(plotter.NewGrid()) // first, so that the bars are drawn over it
	n := policyAxis(p, s, panelWidth)
	slot := (float64(panelWidth) - 60) / float64(max(1, n))
	barWidth := vg.Length(math.Max(6, math.Min(40, 0.6*slot)))
	top, err := addBars(p, s, pn, barWidth)
	if err != nil {
		return nil, err
	}
	// Set the ranges after Add, which widens them to the data: bars start at
	// 0, head room for the labels above the tallest bar, half a slot of
	// margin on each side.
	p.Y.Min = 0
	p.Y.Max = 1
	if top > 0 {
		p.Y.Max = top * 1.15
	}
	p.X.Min, p.X.Max = -0.5, float64(n)-0.5
	return p, nil
}

// policyAxis names the policies along p's x axis, rotated when they would
// not fit side by side in panelWidth, and returns how many there are.
func policyAxis(p *plot.Plot, s Summary, panelWidth vg.Length) int {
	names := make([]string, len(s.Policies))
	maxLen := 0
	for i := range s.Policies {
		names[i] = s.Policies[i].Policy
		maxLen = max(maxLen, len(names[i]))
	}
	p.NominalX(names...)
	p.X.Tick.Label.Font.Size = 10
	if n := len(names); float64(n)*(float64(maxLen)*5.5+10) > float64(panelWidth)-60 {
		p.X.Tick.Label.Rotation = math.Pi / 6
		p.X.Tick.Label.XAlign = draw.XRight
		p.X.Tick.Label.YAlign = draw.YTop
	}
	return len(names)
}

// addBars adds a bar per policy at its mean, its confidence interval
// (clamped to the metric's range) as an error bar, and the mean written
// above it ("n/a" without one); it returns the top of the tallest.
func addBars(p *plot.Plot, s Summary, pn panel, barWidth vg.Length) (top float64, err error) {
	var labels plotter.XYLabels
	var errs plotter.XYs
	var errVals plotter.YErrors
	for i := range s.Policies {
		e := pn.value(&s.Policies[i])
		if e.N == 0 || math.IsNaN(e.Mean) {
			labels.XYs = append(labels.XYs, plotter.XY{X: float64(i), Y: 0})
			labels.Labels = append(labels.Labels, "n/a")
			continue
		}
		mean := e.Mean * pn.scale
		bar, err := plotter.NewBarChart(plotter.Values{mean}, barWidth)
		if err != nil {
			return 0, err
		}
		bar.XMin = float64(i)
		bar.Color = PolicyColor(i)
		bar.LineStyle.Width = 0
		p.Add(bar)
		y := mean
		if e.N >= 2 && !math.IsNaN(e.HalfWidth) {
			hw := e.HalfWidth * pn.scale
			low := math.Max(pn.lo, math.Min(mean, mean-hw))
			high := math.Min(pn.hi, math.Max(mean, mean+hw))
			errs = append(errs, plotter.XY{X: float64(i), Y: mean})
			errVals = append(errVals, struct{ Low, High float64 }{mean - low, high - mean})
			y = high
		}
		top = math.Max(top, y)
		labels.XYs = append(labels.XYs, plotter.XY{X: float64(i), Y: y})
		labels.Labels = append(labels.Labels, pn.format(mean))
	}
	if len(errs) > 0 {
		eb := &plotter.YErrorBars{XYs: errs, YErrors: errVals, LineStyle: plotter.DefaultLineStyle, CapWidth: vg.Points(8)}
		eb.LineStyle.Width = vg.Points(1.2)
		p.Add(eb)
	}
	return top, addBarLabels(p, labels)
}

// addBarLabels writes labels centred above their points.
func addBarLabels(p *plot.Plot, labels plotter.XYLabels) error {
	if len(labels.Labels) == 0 {
		return nil
	}
	l, err := plotter.NewLabels(labels)
	if err != nil {
		return err
	}
	for i := range l.TextStyle {
		l.TextStyle[i].XAlign = draw.XCenter
		l.TextStyle[i].Font.Size = 10
	}
	l.Offset = vg.Point{Y: vg.Points(6)}
	p.Add(l)
	return nil
}

// MinChartBinFollowUps is the number of follow-up turns a bin needs to be
// drawn in hit_rate_over_time.png: the last bins of a run hold the few
// longest conversations, and a hit rate of 1 or 2 turns is noise.
// Summary.Policies[].OverTime keeps every bin.
const MinChartBinFollowUps = 5

// WriteHitRateChart draws hit_rate_over_time.png: the follow-up hit rate per
// bin of start time (bins with at least MinChartBinFollowUps follow-up
// turns), one line per policy (its runs pooled), and a vertical dashed line
// at the mean time the scale-up replica became ready.
func WriteHitRateChart(w io.Writer, s Summary) error {
	if len(s.Policies) == 0 {
		return ErrNoRuns
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Follow-up hit rate over time (%s s bins with ≥ %d follow-up turns, runs of a policy pooled)",
		trimFloat(s.Options.BinS), MinChartBinFollowUps)
	p.Title.TextStyle.Font.Size = 13
	p.Title.Padding = vg.Points(10)
	p.X.Label.Text = "start time of the turn (s since run start)"
	p.Y.Label.Text = "follow-up hit rate (%)"
	p.X.Label.TextStyle.Font.Size = 11
	p.Y.Label.TextStyle.Font.Size = 11
	p.X.Tick.Marker, p.Y.Tick.Marker = niceTicks{}, niceTicks{}
	p.Add(plotter.NewGrid())

	leg := plot.NewLegend()
	leg.Top, leg.Left = true, true
	leg.TextStyle.Font.Size = 11
	leg.Padding = vg.Points(4)
	leg.ThumbnailWidth = vg.Points(28)
	xMax := 0.0
	for i := range s.Policies {
		ps := &s.Policies[i]
		pts := make(plotter.XYs, 0, len(ps.OverTime))
		for _, b := range ps.OverTime {
			if b.FollowUps < MinChartBinFollowUps {
				continue
			}
			xMax = max(xMax, b.EndS)
			pts = append(pts, plotter.XY{X: (b.StartS + b.EndS) / 2, Y: 100 * b.HitRate})
		}
		if len(pts) == 0 {
			leg.Add(fmt.Sprintf("%s (no bin with ≥ %d follow-ups)", ps.Policy, MinChartBinFollowUps))
			continue
		}
		line, points, err := plotter.NewLinePoints(pts)
		if err != nil {
			return err
		}
		line.Color = PolicyColor(i)
		line.Width = vg.Points(1.8)
		line.Dashes = plotutil.Dashes(i)
		points.Color = PolicyColor(i)
		points.Shape = plotutil.Shape(i)
		points.Radius = vg.Points(3)
		p.Add(line, points)
		leg.Add(ps.Policy, line, points)
	}
	if !math.IsNaN(s.ScaleReadyS) {
		mark, err := plotter.NewLine(plotter.XYs{{X: s.ScaleReadyS, Y: 0}, {X: s.ScaleReadyS, Y: 100}})
		if err != nil {
			return err
		}
		mark.Color = color.Gray{Y: 60}
		mark.Width = vg.Points(1.5)
		mark.Dashes = []vg.Length{vg.Points(6), vg.Points(4)}
		p.Add(mark)
		leg.Add(fmt.Sprintf("scale-up ready (%s s)", trimFloat(math.Round(s.ScaleReadyS*10)/10)), mark)
		xMax = max(xMax, s.ScaleReadyS+s.Options.WithDefaults().BinS) // keep the marker off the frame
	}
	// After Add (which widens the ranges to the data): the x axis runs from 0
	// to the end of the last bin.
	p.X.Min, p.Y.Min, p.Y.Max = 0, 0, 100
	if xMax > 0 {
		p.X.Max = xMax
	}

	const width, height = 11 * vg.Inch, 5.5 * vg.Inch
	img := vgimg.New(width, height)
	dc := draw.New(img)
	legWidth := leg.Rectangle(dc).Size().X + vg.Points(24)
	p.Draw(draw.Crop(dc, vg.Points(6), -legWidth, vg.Points(6), -vg.Points(6)))
	titleH := p.Title.TextStyle.Height(p.Title.Text) + vg.Points(18)
	leg.Draw(draw.Crop(dc, width-legWidth+vg.Points(12), 0, 0, -titleH))
	_, err := vgimg.PngCanvas{Canvas: img}.WriteTo(w)
	return err
}

// niceTicks labels round values (1, 2 or 5 × 10^k apart, about six of them)
// without trailing zeros, with an unlabelled minor tick between two majors.
type niceTicks struct{}

func (niceTicks) Ticks(lo, hi float64) []plot.Tick {
	if !(hi > lo) {
		return []plot.Tick{{Value: lo, Label: trimFloat(lo)}}
	}
	raw := (hi - lo) / 6
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	for _, m := range []float64{1, 2, 5, 10} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	var ticks []plot.Tick
	for i := math.Ceil(lo / step * 2); i/2*step <= hi+step*1e-9; i++ {
		v := i / 2 * step
		t := plot.Tick{Value: v}
		if int64(i)%2 == 0 {
			t.Label = strconv.FormatFloat(math.Round(v/mag*1e6)/1e6*mag, 'f', -1, 64)
		}
		ticks = append(ticks, t)
	}
	return ticks
}
