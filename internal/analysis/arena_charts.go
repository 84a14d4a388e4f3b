package analysis

import (
	"cmp"
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	xfont "golang.org/x/image/font"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// WriteArena writes the arena into dir: arena.md, a heat map per metric
// (arena-<slug>.png) and a Pareto chart per scenario (pareto-<name>.png).
// It returns the paths written, arena.md first.
func WriteArena(dir string, a *Arena, opts ArenaOptions) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create output folder: %w", err)
	}
	var paths []string
	write := func(name string, f func(io.Writer) error) error {
		p := filepath.Join(dir, name)
		paths = append(paths, p)
		return WriteFile(p, f)
	}
	if err := write(ArenaMD, func(w io.Writer) error { return WriteArenaMarkdown(w, a, opts) }); err != nil {
		return nil, err
	}
	for mi := range a.Metrics {
		if err := write(HeatMapPNG(a.Metrics[mi].Slug), func(w io.Writer) error { return WriteHeatMap(w, a, mi) }); err != nil {
			return nil, err
		}
	}
	for si, sc := range a.Scenarios {
		if err := write(ParetoPNG(sc), func(w io.Writer) error { return WriteParetoChart(w, a, si) }); err != nil {
			return nil, err
		}
	}
	return paths, nil
}

// Heat map colours: a column's worst value, its middle, its best (the
// lighter stops of ColorBrewer's diverging RdBu, readable under black text
// and by most colour-blind readers).
var (
	heatWorst = color.RGBA{R: 0xef, G: 0x8a, B: 0x62, A: 0xff}
	heatMid   = color.RGBA{R: 0xf7, G: 0xf7, B: 0xf7, A: 0xff}
	heatBest  = color.RGBA{R: 0x67, G: 0xa9, B: 0xcf, A: 0xff}
	heatNaN   = color.RGBA{R: 0xd9, G: 0xd9, B: 0xd9, A: 0xff}
)

// HeatColor is the colour of a normalised value (0 worst, 1 best; NaN grey).
func HeatColor(v float64) color.RGBA {
	if math.IsNaN(v) {
		return heatNaN
	}
	v = math.Max(0, math.Min(1, v))
	lerp := func(a, b color.RGBA, t float64) color.RGBA {
		mix := func(x, y uint8) uint8 { return uint8(math.Round(float64(x) + t*(float64(y)-float64(x)))) }
		return color.RGBA{R: mix(a.R, b.R), G: mix(a.G, b.G), B: mix(a.B, b.B), A: 0xff}
	}
	if v < 0.5 {
		return lerp(heatWorst, heatMid, v/0.5)
	}
	return lerp(heatMid, heatBest, (v-0.5)/0.5)
}

// heatCells draws the heat map's cells: column si at x = si, policy pi at
// y = rows-1-pi (the first policy on top).
type heatCells struct {
	a  *Arena
	mi int
}

func (h heatCells) DataRange() (xmin, xmax, ymin, ymax float64) {
	return -0.5, float64(len(h.a.Scenarios)) - 0.5, -0.5, float64(len(h.a.Policies)) - 0.5
}

func (h heatCells) Plot(c draw.Canvas, p *plot.Plot) {
	a, met := h.a, &h.a.Metrics[h.mi]
	tx, ty := p.Transforms(&c)
	rows := len(a.Policies)
	valueStyle := draw.TextStyle{Color: color.Black, Font: plot.DefaultFont, XAlign: draw.XCenter, YAlign: draw.YCenter,
		Handler: plot.DefaultTextHandler}
	valueStyle.Font.Size = vg.Points(11)
	ciStyle := valueStyle
	ciStyle.Font.Size = vg.Points(8.5)
	ciStyle.Color = color.Gray{Y: 60}
	bestStyle := valueStyle
	bestStyle.Font.Weight = xfont.WeightBold
	outline := draw.LineStyle{Color: color.Black, Width: vg.Points(2)}
	grid := draw.LineStyle{Color: color.White, Width: vg.Points(1.5)}
	for si := range a.Scenarios {
		col := make([]float64, rows)
		for pi := range a.Policies {
			col[pi] = a.Cells[h.mi][pi][si].Mean
			if a.Cells[h.mi][pi][si].N == 0 {
				col[pi] = math.NaN()
			}
		}
		norm := NormalizeColumn(col, met.Better)
		best := a.Best(h.mi, si)
		for pi := range a.Policies {
			x, y := float64(si), float64(rows-1-pi)
			x0, x1, y0, y1 := tx(x-0.5), tx(x+0.5), ty(y-0.5), ty(y+0.5)
			box := []vg.Point{{X: x0, Y: y0}, {X: x1, Y: y0}, {X: x1, Y: y1}, {X: x0, Y: y1}, {X: x0, Y: y0}}
			c.FillPolygon(HeatColor(norm[pi]), box)
			c.StrokeLines(grid, box)
			e := a.Cells[h.mi][pi][si]
			center := vg.Point{X: tx(x), Y: ty(y)}
			style := valueStyle
			isBest := false
			for _, b := range best {
				isBest = isBest || b == pi
			}
			if isBest {
				style = bestStyle
			}
			if e.N == 0 || math.IsNaN(e.Mean) {
				c.FillText(style, center, "n/a")
				continue
			}
			text := met.Format(e.Mean * met.Scale)
			if e.N >= 2 && !math.IsNaN(e.HalfWidth) {
				// Mean above, ± half-width below, both inside the cell.
				prec := met.prec(e.Mean * met.Scale)
				c.FillText(style, vg.Point{X: center.X, Y: center.Y + vg.Points(5)}, text)
				c.FillText(ciStyle, vg.Point{X: center.X, Y: center.Y - vg.Points(8)},
					"± "+strconv.FormatFloat(e.HalfWidth*met.Scale, 'f', prec, 64))
			} else {
				c.FillText(style, center, text)
			}
		}
		for _, pi := range best {
			y := float64(rows - 1 - pi)
			x0, x1 := tx(float64(si)-0.5)+vg.Points(1.5), tx(float64(si)+0.5)-vg.Points(1.5)
			y0, y1 := ty(y-0.5)+vg.Points(1.5), ty(y+0.5)-vg.Points(1.5)
			c.StrokeLines(outline, []vg.Point{{X: x0, Y: y0}, {X: x1, Y: y0}, {X: x1, Y: y1}, {X: x0, Y: y1}, {X: x0, Y: y0}})
		}
	}
}

// WriteHeatMap draws metric mi as a heat map: a row per policy, a column per
// scenario, each cell coloured by its value normalised within its column
// (NormalizeColumn: the column's best is blue, its worst orange), the mean
// and the CI half-width printed in the cell, the best of each column bold
// and framed.
func WriteHeatMap(w io.Writer, a *Arena, mi int) error {
	if len(a.Policies) == 0 || len(a.Scenarios) == 0 {
		return ErrNoRuns
	}
	met := &a.Metrics[mi]
	p := plot.New()
	p.Title.Text = met.Heading() + "\neach column coloured from its worst (orange) to its best (blue); best framed; mean over seeds ± 95 % CI"
	p.Title.TextStyle.Font.Size = 13
	p.Title.Padding = vg.Points(8)
	p.Add(heatCells{a: a, mi: mi})
	xt := make([]plot.Tick, len(a.Scenarios))
	for si, sc := range a.Scenarios {
		xt[si] = plot.Tick{Value: float64(si), Label: sc}
	}
	yt := make([]plot.Tick, len(a.Policies))
	for pi, pol := range a.Policies {
		yt[pi] = plot.Tick{Value: float64(len(a.Policies) - 1 - pi), Label: pol}
	}
	p.X.Tick.Marker, p.Y.Tick.Marker = plot.ConstantTicks(xt), plot.ConstantTicks(yt)
	for _, ax := range []*plot.Axis{&p.X, &p.Y} {
		ax.Tick.Label.Font.Size = vg.Points(11)
		ax.Tick.LineStyle.Width = 0
		ax.LineStyle.Width = 0
		ax.Padding = 0
	}
	p.X.Label.Text = "scenario"
	p.X.Label.TextStyle.Font.Size = vg.Points(11)
	p.X.Min, p.X.Max = -0.5, float64(len(a.Scenarios))-0.5
	p.Y.Min, p.Y.Max = -0.5, float64(len(a.Policies))-0.5
	width := vg.Inch * vg.Length(2+1.05*float64(len(a.Scenarios)))
	width = max(width, 8*vg.Inch)
	height := vg.Inch * vg.Length(1.4+0.5*float64(len(a.Policies)))
	return writePlot(w, p, width, height)
}

// WriteParetoChart draws scenario si: p95 latency (y) against follow-up hit
// rate (x), a point per policy with its name and its 95 % CIs as error bars,
// the Pareto frontier (Arena.Pareto) as a dashed line through its points,
// which are ringed. When the frontier sits in a small corner of the chart
// (the usual case: the worst policies stretch the axes), a second panel
// shows that corner close up.
func WriteParetoChart(w io.Writer, a *Arena, si int) error {
	pc := newParetoChart(a, si, nil)
	var xs, ys []float64 // of the points drawn, display units
	for pi := range a.Policies {
		if pt, he, le := pc.at(pi); he.N > 0 && le.N > 0 && !math.IsNaN(he.Mean) && !math.IsNaN(le.Mean) {
			xs, ys = append(xs, pt.X), append(ys, pt.Y)
		}
	}
	if len(xs) == 0 {
		return fmt.Errorf("scenario %s: %w with both a hit rate and a p95 latency", a.Scenarios[si], ErrNoRuns)
	}
	full, err := paretoPlot(a, si, "", nil)
	if err != nil {
		return err
	}
	// The close-up: the frontier's bounding box, widened by half its size
	// (at least 5 points of hit rate and 10 % of its latency).
	xlo, xhi, ylo, yhi := math.Inf(1), math.Inf(-1), math.Inf(1), math.Inf(-1)
	for _, pi := range a.Pareto(si) {
		pt, _, _ := pc.at(pi)
		xlo, xhi, ylo, yhi = math.Min(xlo, pt.X), math.Max(xhi, pt.X), math.Min(ylo, pt.Y), math.Max(yhi, pt.Y)
	}
	dx := math.Max((xhi-xlo)/2, 2.5)
	dy := math.Max((yhi-ylo)/2, 0.05*yhi)
	zoom := &[4]float64{xlo - dx, xhi + 2*dx, math.Max(0, ylo-dy), yhi + dy} // more room right, for names
	if a.Metrics[pc.hit].Scale == 100 && zoom[1] > 100 {                     // a hit rate ends at 100 %: names go left of the points there
		zoom[1] = max(100, xhi) + 0.3*dx
	}
	fx := slices.Max(xs) - slices.Min(xs)
	fy := slices.Max(ys) - slices.Min(ys)
	if !(zoom[1]-zoom[0] < 0.5*fx || zoom[3]-zoom[2] < 0.5*fy) {
		full.Title.Text = paretoTitle(a.Scenarios[si])
		return writePlot(w, full, 10*vg.Inch, 6.5*vg.Inch)
	}
	full.Title.Text = "all policies"
	close, err := paretoPlot(a, si, "close-up of the frontier", zoom)
	if err != nil {
		return err
	}
	const width, height = 16 * vg.Inch, 6.5 * vg.Inch
	img := vgimg.New(width, height)
	dc := draw.New(img)
	title := draw.TextStyle{Color: color.Black, Font: plot.DefaultFont, XAlign: draw.XCenter, YAlign: draw.YTop,
		Handler: plot.DefaultTextHandler}
	title.Font.Size = vg.Points(13)
	text := paretoTitle(a.Scenarios[si])
	dc.FillText(title, vg.Point{X: width / 2, Y: height - vg.Points(6)}, text)
	body := draw.Crop(dc, vg.Points(6), -vg.Points(10), vg.Points(6), -(title.Height(text) + vg.Points(14)))
	tiles := draw.Tiles{Rows: 1, Cols: 2, PadX: vg.Points(30)}
	plots := [][]*plot.Plot{{full, close}}
	canvases := plot.Align(plots, tiles, body)
	full.Draw(canvases[0][0])
	close.Draw(canvases[0][1])
	_, err = vgimg.PngCanvas{Canvas: img}.WriteTo(w)
	return err
}

func paretoTitle(scenario string) string {
	return fmt.Sprintf("%s: p95 latency against follow-up hit rate (better: right and down)\n"+
		"dashed: the Pareto frontier, its policies ringed; bars: 95 %% CI over seeds", scenario)
}

// paretoPlot is one panel of a Pareto chart; window, if not nil, fixes the
// axes (x min, x max, y min, y max) and only the points inside it are
// drawn, without error bars; else the axes fit every point and its bars.
func paretoPlot(a *Arena, si int, title string, window *[4]float64) (*plot.Plot, error) {
	pc := newParetoChart(a, si, window)
	p := plot.New()
	p.Title.Text = title
	p.Title.TextStyle.Font.Size = 12
	p.X.Label.Text = "follow-up hit rate (%)"
	p.Y.Label.Text = "p95 latency (s)"
	p.X.Label.TextStyle.Font.Size, p.Y.Label.TextStyle.Font.Size = vg.Points(11), vg.Points(11)
	p.X.Tick.Marker, p.Y.Tick.Marker = roundTicks{}, roundTicks{}
	p.Add(plotter.NewGrid())
	onFront, err := pc.addFront(p)
	if err != nil {
		return nil, err
	}
	var labels plotter.XYLabels
	for pi, pol := range a.Policies {
		pt, ok, err := pc.addPolicy(p, pi, onFront[pi])
		if err != nil {
			return nil, err
		}
		if ok {
			labels.XYs = append(labels.XYs, pt)
			labels.Labels = append(labels.Labels, pol)
		}
	}
	if len(labels.Labels) > 0 {
		p.Add(&placedLabels{XYLabels: labels})
	}
	pc.setRanges(p)
	return p, nil
}

// paretoChart draws one scenario's policies by hit rate and p95 latency,
// in a window (a close-up) or whole; lo and hi bound what it drew.
type paretoChart struct {
	a        *Arena
	si       int
	window   *[4]float64 // x from, x to, y from, y to (nil: the whole chart)
	hit, p95 int         // the metrics' indexes
	lo, hi   plotter.XY
}

func newParetoChart(a *Arena, si int, window *[4]float64) *paretoChart {
	return &paretoChart{a: a, si: si, window: window, hit: a.MetricIndex("hit-rate"), p95: a.MetricIndex("p95"),
		lo: plotter.XY{X: math.Inf(1), Y: math.Inf(1)}, hi: plotter.XY{X: math.Inf(-1), Y: math.Inf(-1)}}
}

// at returns policy pi's point (scaled means) and its two estimates.
func (pc *paretoChart) at(pi int) (plotter.XY, Estimate, Estimate) {
	he, le := pc.a.Cells[pc.hit][pi][pc.si], pc.a.Cells[pc.p95][pi][pc.si]
	return plotter.XY{X: he.Mean * pc.a.Metrics[pc.hit].Scale, Y: le.Mean * pc.a.Metrics[pc.p95].Scale}, he, le
}

func (pc *paretoChart) inside(x, y float64) bool {
	w := pc.window
	return w == nil || x >= w[0] && x <= w[1] && y >= w[2] && y <= w[3]
}

// cover widens the drawn bounds to [x0, x1] × [y0, y1].
func (pc *paretoChart) cover(x0, x1, y0, y1 float64) {
	pc.lo.X, pc.hi.X, pc.lo.Y, pc.hi.Y = math.Min(pc.lo.X, x0), math.Max(pc.hi.X, x1), math.Min(pc.lo.Y, y0), math.Max(pc.hi.Y, y1)
}

// addFront draws the Pareto frontier as a dashed line and says which
// policies are on it.
func (pc *paretoChart) addFront(p *plot.Plot) ([]bool, error) {
	onFront := make([]bool, len(pc.a.Policies))
	var line plotter.XYs
	for _, pi := range pc.a.Pareto(pc.si) {
		onFront[pi] = true
		pt, _, _ := pc.at(pi)
		line = append(line, pt)
	}
	if len(line) >= 2 {
		l, err := plotter.NewLine(line)
		if err != nil {
			return nil, err
		}
		l.Color = color.Gray{Y: 30}
		l.Width = vg.Points(2)
		l.Dashes = []vg.Length{vg.Points(6), vg.Points(4)}
		p.Add(l)
	}
	return onFront, nil
}

// addPolicy draws policy pi's point in its colour (ringed on the
// frontier), with its two confidence intervals on the whole chart; ok is
// false when it has no point or the point is outside the window.
func (pc *paretoChart) addPolicy(p *plot.Plot, pi int, onFront bool) (pt plotter.XY, ok bool, err error) {
	pt, he, le := pc.at(pi)
	if he.N == 0 || le.N == 0 || math.IsNaN(he.Mean) || math.IsNaN(le.Mean) || !pc.inside(pt.X, pt.Y) {
		return pt, false, nil
	}
	x, y := pt.X, pt.Y
	pc.cover(x, x, y, y)
	pts := plotter.XYs{pt}
	clr := PolicyColor(pi)
	// Error bars on the whole chart only: gonum does not clip them to a
	// close-up's window.
	if pc.window == nil && he.N >= 2 && le.N >= 2 && !math.IsNaN(he.HalfWidth) && !math.IsNaN(le.HalfWidth) {
		hx, hy := he.HalfWidth*pc.a.Metrics[pc.hit].Scale, le.HalfWidth*pc.a.Metrics[pc.p95].Scale
		pc.cover(x-hx, x+hx, y-hy, y+hy)
		r, g, b, _ := clr.RGBA()
		faint := draw.LineStyle{Color: color.NRGBA{R: uint8(r >> 8), G: uint8(g >> 8), B: uint8(b >> 8), A: 0x80}, Width: vg.Points(1)}
		p.Add(&plotter.XErrorBars{XYs: pts, XErrors: plotter.XErrors{{Low: hx, High: hx}}, LineStyle: faint, CapWidth: vg.Points(5)},
			&plotter.YErrorBars{XYs: pts, YErrors: plotter.YErrors{{Low: hy, High: hy}}, LineStyle: faint, CapWidth: vg.Points(5)})
	}
	if err := addGlyph(p, pts, clr, draw.CircleGlyph{}, 4); err != nil {
		return pt, false, err
	}
	if onFront {
		if err := addGlyph(p, pts, color.Black, draw.RingGlyph{}, 7); err != nil {
			return pt, false, err
		}
	}
	return pt, true, nil
}

// addGlyph draws pts as glyphs of shape, colour and radius (points).
func addGlyph(p *plot.Plot, pts plotter.XYs, clr color.Color, shape draw.GlyphDrawer, radius float64) error {
	s, err := plotter.NewScatter(pts)
	if err != nil {
		return err
	}
	s.Color = clr
	s.Shape = shape
	s.Radius = vg.Points(radius)
	p.Add(s)
	return nil
}

// setRanges sets the axes to the window, or around what was drawn with
// margins: room for the names on the right, a little above and below.
func (pc *paretoChart) setRanges(p *plot.Plot) {
	if w := pc.window; w != nil {
		p.X.Min, p.X.Max, p.Y.Min, p.Y.Max = w[0], w[1], w[2], w[3]
		return
	}
	xlo, xhi, ylo, yhi := pc.lo.X, pc.hi.X, pc.lo.Y, pc.hi.Y
	xr, yr := math.Max(xhi-xlo, 1), math.Max(yhi-ylo, 0.1*math.Max(yhi, 1))
	p.X.Min, p.X.Max = xlo-0.05*xr, xhi+0.25*xr
	if p.X.Max > 100 { // no room is needed beyond 100 %: the names go left of the points there
		p.X.Max = max(100, xhi) + 0.04*xr
	}
	p.Y.Min, p.Y.Max = math.Max(0, ylo-0.08*yr), yhi+0.08*yr
}

// writePlot draws one plot as a PNG of the given size.
func writePlot(w io.Writer, p *plot.Plot, width, height vg.Length) error {
	img := vgimg.New(width, height)
	dc := draw.New(img)
	p.Draw(draw.Crop(dc, vg.Points(6), -vg.Points(10), vg.Points(6), -vg.Points(6)))
	_, err := vgimg.PngCanvas{Canvas: img}.WriteTo(w)
	return err
}

// placedLabels writes each name next to its point without overlapping
// another name or point: right of the point if there is room, else the
// nearest free place above or below (or to the left), joined to its point
// by a thin line. Names are placed from the top of the chart down.
type placedLabels struct {
	plotter.XYLabels
}

func (l *placedLabels) DataRange() (xmin, xmax, ymin, ymax float64) {
	return plotter.XYRange(l.XYs)
}

func (l *placedLabels) Plot(c draw.Canvas, p *plot.Plot) {
	tx, ty := p.Transforms(&c)
	style := draw.TextStyle{Color: color.Black, Font: plot.DefaultFont, XAlign: draw.XLeft, YAlign: draw.YCenter,
		Handler: plot.DefaultTextHandler}
	style.Font.Size = vg.Points(10)
	pts := make([]vg.Point, len(l.XYs))
	var taken []vg.Rectangle
	const r = 5 // points: a marker's half-size
	for i, xy := range l.XYs {
		pts[i] = vg.Point{X: tx(xy.X), Y: ty(xy.Y)}
		taken = append(taken, vg.Rectangle{Min: vg.Point{X: pts[i].X - r, Y: pts[i].Y - r}, Max: vg.Point{X: pts[i].X + r, Y: pts[i].Y + r}})
	}
	order := make([]int, len(pts))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(i, j int) int { return cmp.Compare(pts[j].Y, pts[i].Y) })
	overlaps := func(a vg.Rectangle) bool {
		if a.Min.X < c.Min.X || a.Max.X > c.Max.X || a.Min.Y < c.Min.Y || a.Max.Y > c.Max.Y {
			return true
		}
		for _, b := range taken {
			if a.Min.X < b.Max.X && b.Min.X < a.Max.X && a.Min.Y < b.Max.Y && b.Min.Y < a.Max.Y {
				return true
			}
		}
		return false
	}
	leader := draw.LineStyle{Color: color.Gray{Y: 110}, Width: vg.Points(0.6)}
	for _, i := range order {
		name := l.Labels[i]
		w, h := style.Width(name), style.Height(name)+vg.Points(1)
		gap := vg.Points(8)
		var box vg.Rectangle
		found := false
		for k := 0; k <= 24 && !found; k++ {
			dy := vg.Length((k+1)/2) * h // 0, h, h, 2h, 2h, ...
			if k%2 == 1 {
				dy = -dy // below first: the frontier runs down to the left
			}
			for _, left := range []bool{false, true} {
				x0 := pts[i].X + gap
				if left {
					x0 = pts[i].X - gap - w
				}
				box = vg.Rectangle{Min: vg.Point{X: x0, Y: pts[i].Y + dy - h/2}, Max: vg.Point{X: x0 + w, Y: pts[i].Y + dy + h/2}}
				if !overlaps(box) {
					found = true
					break
				}
			}
		}
		if !found { // crowded out: right of the point, over whatever is there
			box = vg.Rectangle{Min: vg.Point{X: pts[i].X + gap, Y: pts[i].Y - h/2}, Max: vg.Point{X: pts[i].X + gap + w, Y: pts[i].Y + h/2}}
		}
		taken = append(taken, box)
		mid := (box.Min.Y + box.Max.Y) / 2
		if mid != pts[i].Y {
			end := box.Min.X
			if box.Max.X < pts[i].X {
				end = box.Max.X
			}
			c.StrokeLine2(leader, pts[i].X, pts[i].Y, end, mid)
		}
		c.FillText(style, vg.Point{X: box.Min.X, Y: mid}, name)
	}
}

// roundTicks are niceTicks with labels written to the decimals their step
// needs (0.2 apart: "10.4", never "10.400000000000001").
type roundTicks struct{}

func (roundTicks) Ticks(lo, hi float64) []plot.Tick {
	ticks := niceTicks{}.Ticks(lo, hi)
	step := math.Inf(1)
	prev := math.NaN()
	for _, t := range ticks {
		if t.Label == "" {
			continue
		}
		if !math.IsNaN(prev) {
			step = math.Min(step, t.Value-prev)
		}
		prev = t.Value
	}
	prec := 0
	if step > 0 && !math.IsInf(step, 0) {
		prec = max(0, int(math.Ceil(-math.Log10(step)-1e-9)))
	}
	for i := range ticks {
		if ticks[i].Label != "" {
			ticks[i].Label = strconv.FormatFloat(ticks[i].Value, 'f', prec, 64)
		}
	}
	return ticks
}
