package main

import (
	"fmt"
	"image/color"
	"path/filepath"
	"strconv"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

var (
	colorBad  = color.RGBA{R: 200, G: 60, B: 50, A: 255}
	colorGood = color.RGBA{R: 40, G: 120, B: 180, A: 255}
	colorGrey = color.RGBA{R: 140, G: 140, B: 140, A: 255}
)

func (r results) drawCharts(dir string) ([]chart, error) {
	var charts []chart
	add := func(name, title string, draw func(path, title string) error) error {
		path := filepath.Join(dir, name)
		if err := draw(path, title); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		charts = append(charts, chart{path: path, title: title})
		return nil
	}
	steps := []struct {
		name, title string
		draw        func(path, title string) error
	}{
		{"race.png", "The seed's race: units sold of " + strconv.Itoa(r.race.units), r.drawRace},
		{"holds.png", "Hot-SKU holds per second by concurrency", r.drawHolds},
		{"e2e_rate.png", "Completed per second on the same dev server", r.drawE2ERate},
		{"e2e_latency.png", "End-to-end latency", r.drawE2ELatency},
		{"e2e_cpu.png", "CPU per workflow, every process, on the same dev server", r.drawE2ECPU},
		{"flashsale.png", "Flash sale timeline", r.drawFlash},
		{"soldout.png", "Sold-out gate vs a bare Echo handler", r.drawGate},
	}
	for _, s := range steps {
		if err := add(s.name, s.title, s.draw); err != nil {
			return nil, err
		}
	}
	return charts, nil
}

// bars draws one bar per value, each labelled with its value.
func bars(path, title, ylabel string, names []string, values []float64, colors []color.Color, format string, ref float64, refLabel string) error {
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = ylabel
	top := 0.0
	for i, v := range values {
		b, err := plotter.NewBarChart(plotter.Values{v}, vg.Points(60))
		if err != nil {
			return err
		}
		b.XMin = float64(i)
		b.Color = colors[i%len(colors)]
		b.LineStyle.Width = 0
		p.Add(b)
		top = max(top, v)
	}
	xys := make(plotter.XYs, len(values))
	labels := make([]string, len(values))
	for i, v := range values {
		xys[i] = plotter.XY{X: float64(i), Y: v}
		labels[i] = fmt.Sprintf(format, v)
	}
	l, err := plotter.NewLabels(plotter.XYLabels{XYs: xys, Labels: labels})
	if err != nil {
		return err
	}
	for i := range l.TextStyle {
		l.TextStyle[i].XAlign = draw.XCenter
		l.TextStyle[i].Font.Size = vg.Points(11)
	}
	l.Offset = vg.Point{Y: vg.Points(4)}
	p.Add(l)
	if ref > 0 {
		line, err := plotter.NewLine(plotter.XYs{{X: -0.5, Y: ref}, {X: float64(len(values)) - 0.5, Y: ref}})
		if err != nil {
			return err
		}
		line.Color = colorGrey
		line.Dashes = []vg.Length{vg.Points(5), vg.Points(4)}
		p.Add(line)
		p.Legend.Add(refLabel, line)
		p.Legend.Top = true
		top = max(top, ref)
	}
	p.NominalX(names...)
	p.X.Min, p.X.Max = -0.5, float64(len(values))-0.5
	p.Y.Min, p.Y.Max = 0, top*1.3
	p.Add(horizontalGrid())
	return p.Save(vg.Points(float64(220+160*len(values))), 4*vg.Inch, path)
}

func (r results) drawRace(path, title string) error {
	rc := r.race
	return bars(path, title, "units sold (buyers told yes)",
		[]string{"GET-check-DECR", "reserve script"},
		[]float64{float64(rc.classic.sold), float64(rc.script.sold)},
		[]color.Color{colorBad, colorGood}, "%.0f", float64(rc.units), fmt.Sprintf("%d units stocked, %d buyers", rc.units, rc.buyers))
}

func (r results) drawHolds(path, title string) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "concurrent callers"
	p.Y.Label.Text = "holds per second (log scale)"
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	var ticks []plot.Tick
	for _, c := range r.sizes.holdConcurrency {
		ticks = append(ticks, plot.Tick{Value: float64(c), Label: strconv.Itoa(c)})
	}
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	lo, hi := 1e18, 0.0
	for i, m := range holdMethods {
		var xys plotter.XYs
		for _, c := range r.sizes.holdConcurrency {
			v := r.holds.cell(m, c).rate()
			xys = append(xys, plotter.XY{X: float64(c), Y: v})
			lo, hi = min(lo, v), max(hi, v)
		}
		line, points, err := plotter.NewLinePoints(xys)
		if err != nil {
			return err
		}
		line.Color, points.Color = plotutil.Color(i), plotutil.Color(i)
		line.Width = vg.Points(2)
		points.Shape = plotutil.Shape(i)
		points.Radius = vg.Points(4)
		p.Add(line, points)
		p.Legend.Add(m, line, points)
	}
	if rb := r.holds.rb; rb.ran {
		s, err := plotter.NewScatter(plotter.XYs{{X: float64(rb.concurrency), Y: rb.rps}})
		if err != nil {
			return err
		}
		s.Shape = draw.PyramidGlyph{}
		s.Radius = vg.Points(6)
		s.Color = color.Black
		p.Add(s)
		p.Legend.Add("redis-benchmark EVALSHA, same script", s)
		lo, hi = min(lo, rb.rps), max(hi, rb.rps)
	}
	p.Y.Min, p.Y.Max = lo/2, hi*40 // room for the legend above the lines
	p.X.Min, p.X.Max = 0.7, 100
	p.Legend.Top, p.Legend.Left = true, false
	p.Legend.XOffs = 0
	p.Add(plotter.NewGrid())
	return p.Save(7*vg.Inch, 5*vg.Inch, path)
}

func (r results) drawE2ERate(path, title string) error {
	return bars(path, title, "per second",
		[]string{"empty workflows", "confirmed checkouts over HTTP"},
		[]float64{r.empty.rate(), r.e2e.rate()},
		[]color.Color{colorGrey, colorGood}, "%.1f/s", 0.5*r.empty.rate(), "target: 0.5 x empty-workflow rate")
}

// drawE2ECPU stacks each process's CPU per workflow for the empty workflow, the floor workflow
// and a confirmed checkout, with the target's bound (2 x the empty workflow's total) dashed.
func (r results) drawE2ECPU(path, title string) error {
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = "CPU ms per workflow"
	runs := []struct {
		n   int
		cpu cpuSnapshot
	}{{r.empty.workflows, r.empty.cpu}, {r.floor.workflows, r.floor.cpu}, {r.e2e.checkouts, r.e2e.cpu}}
	per := func(d time.Duration, n int) float64 { return ms(d) / float64(max(n, 1)) }
	processes := []struct {
		name  string
		of    func(cpuSnapshot) time.Duration
		color color.Color
	}{
		{"dev server", func(c cpuSnapshot) time.Duration { return c.devServer }, colorGood},
		{"API + worker + load generator", func(c cpuSnapshot) time.Duration { return c.self }, colorGrey},
		{"Redis", func(c cpuSnapshot) time.Duration { return c.redis }, colorBad},
		{"Postgres", func(c cpuSnapshot) time.Duration { return c.postgres }, color.RGBA{R: 90, G: 160, B: 90, A: 255}},
	}
	var below *plotter.BarChart
	for _, pr := range processes {
		vs := make(plotter.Values, len(runs))
		for i, run := range runs {
			vs[i] = per(pr.of(run.cpu), run.n)
		}
		b, err := plotter.NewBarChart(vs, vg.Points(60))
		if err != nil {
			return err
		}
		b.Color, b.LineStyle.Width = pr.color, 0
		if below != nil {
			b.StackOn(below)
		}
		p.Add(b)
		p.Legend.Add(pr.name, b)
		below = b
	}
	xys := make(plotter.XYs, len(runs))
	labels := make([]string, len(runs))
	top := 0.0
	for i, run := range runs {
		total := per(run.cpu.total(), run.n)
		xys[i], labels[i] = plotter.XY{X: float64(i), Y: total}, fmt.Sprintf("%.2f ms", total)
		top = max(top, total)
	}
	l, err := plotter.NewLabels(plotter.XYLabels{XYs: xys, Labels: labels})
	if err != nil {
		return err
	}
	for i := range l.TextStyle {
		l.TextStyle[i].XAlign = draw.XCenter
	}
	l.Offset = vg.Point{Y: vg.Points(4)}
	p.Add(l)
	bound := 2 * per(r.empty.cpu.total(), r.empty.workflows)
	line, err := plotter.NewLine(plotter.XYs{{X: -0.5, Y: bound}, {X: float64(len(runs)) - 0.5, Y: bound}})
	if err != nil {
		return err
	}
	line.Color, line.Dashes = colorGrey, []vg.Length{vg.Points(5), vg.Points(4)}
	p.Add(line)
	p.Legend.Add("target: 2 x the empty workflow's", line)
	p.Legend.Top, p.Legend.Left = true, true
	p.NominalX("empty workflow", "floor workflow", "confirmed checkout")
	p.X.Min, p.X.Max = -0.5, float64(len(runs))-0.5
	p.Y.Min, p.Y.Max = 0, max(top, bound)*1.6
	p.Add(horizontalGrid())
	return p.Save(7*vg.Inch, 4.5*vg.Inch, path)
}

func (r results) drawE2ELatency(path, title string) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s (concurrency %d)", title, r.e2e.concurrency)
	p.Y.Label.Text = "milliseconds"
	names := []string{"StartWorkflow (empty)", "POST /v1/checkouts", "payment -> confirmed"}
	p50 := plotter.Values{ms(r.empty.start.pct(50)), ms(r.e2e.post.pct(50)), ms(r.e2e.payToConfirmed.pct(50))}
	p99 := plotter.Values{ms(r.empty.start.pct(99)), ms(r.e2e.post.pct(99)), ms(r.e2e.payToConfirmed.pct(99))}
	w := vg.Points(40)
	b50, err := plotter.NewBarChart(p50, w)
	if err != nil {
		return err
	}
	b50.Color, b50.Offset, b50.LineStyle.Width = colorGood, -w/2, 0
	b99, err := plotter.NewBarChart(p99, w)
	if err != nil {
		return err
	}
	b99.Color, b99.Offset, b99.LineStyle.Width = colorBad, w/2, 0
	p.Add(b50, b99)
	p.Legend.Add("p50", b50)
	p.Legend.Add("p99", b99)
	p.Legend.Top = true
	top := 0.0
	for i := range p99 {
		top = max(top, p99[i], p50[i])
	}
	line, err := plotter.NewLine(plotter.XYs{{X: 0.5, Y: 3 * p99[0]}, {X: 1.5, Y: 3 * p99[0]}})
	if err != nil {
		return err
	}
	line.Color, line.Dashes = colorGrey, []vg.Length{vg.Points(5), vg.Points(4)}
	p.Add(line)
	p.Legend.Add("target: POST p99 <= 3 x StartWorkflow p99", line)
	p.NominalX(names...)
	p.Y.Min, p.Y.Max = 0, max(top, 3*p99[0])*1.45
	p.Add(horizontalGrid())
	return p.Save(8*vg.Inch, 4.5*vg.Inch, path)
}

// cumulative turns sorted event times into a step count over time.
func cumulative(ts []float64) plotter.XYs {
	xys := make(plotter.XYs, 0, len(ts)+1)
	xys = append(xys, plotter.XY{X: 0, Y: 0})
	for i, t := range ts {
		xys = append(xys, plotter.XY{X: max(t, 0), Y: float64(i + 1)})
	}
	return xys
}

func (r results) drawFlash(path, title string) error {
	f := r.flash
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s: %d units, %d requests, %d clients", title, f.units, f.requests, f.concurrency)
	p.X.Label.Text = "seconds since the burst started"
	p.Y.Label.Text = "cumulative count"
	series := []struct {
		name string
		ts   []float64
		c    color.Color
	}{
		{fmt.Sprintf("answered 409 sold out (%d)", len(f.rejectedAt)), f.rejectedAt, colorGrey},
		{fmt.Sprintf("answered 201 held (%d)", len(f.heldAt)), f.heldAt, colorGood},
		{fmt.Sprintf("order confirmed in Postgres (%d)", len(f.confirmedAt)), f.confirmedAt, color.RGBA{G: 150, B: 60, A: 255}},
	}
	for _, s := range series {
		if len(s.ts) == 0 {
			continue
		}
		line, err := plotter.NewLine(cumulative(s.ts))
		if err != nil {
			return err
		}
		line.Color, line.Width = s.c, vg.Points(2)
		p.Add(line)
		p.Legend.Add(s.name, line)
	}
	units, err := plotter.NewLine(plotter.XYs{{X: 0, Y: float64(f.units)}, {X: f.allConfirmed.Seconds() + 1, Y: float64(f.units)}})
	if err != nil {
		return err
	}
	units.Color, units.Dashes = colorBad, []vg.Length{vg.Points(5), vg.Points(4)}
	p.Add(units)
	p.Legend.Add(fmt.Sprintf("%d units stocked", f.units), units)
	p.Legend.Top, p.Legend.Left = true, true
	p.Y.Min, p.X.Min = 0, 0
	p.Add(plotter.NewGrid())
	return p.Save(7*vg.Inch, 4.5*vg.Inch, path)
}

func (r results) drawGate(path, title string) error {
	g := r.gate
	return bars(path, fmt.Sprintf("%s (concurrency %d)", title, g.concurrency), "requests per second",
		[]string{"bare Echo handler", "sold-out 409, limiter off", "sold-out 409, limiter on"},
		[]float64{g.bareRate(), g.soldOutRate(), g.limitedRate()},
		[]color.Color{colorGrey, colorGood, colorGood}, "%.0f/s", 0.5*g.bareRate(), "target: 0.5 x bare Echo")
}

// horizontalGrid is a grid of horizontal lines only, for charts with named bars.
func horizontalGrid() *plotter.Grid {
	g := plotter.NewGrid()
	g.Vertical.Color = nil
	return g
}
