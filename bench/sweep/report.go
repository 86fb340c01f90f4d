package main

import (
	"errors"
	"fmt"
	"image/color"
	"path/filepath"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/gorgonia-flash/flashattention/examples/transformer/model"
)

// find returns the point for (n, impl, kind), if measured.
func (r results) find(n int, impl model.Attention, kind string) (point, bool) {
	for _, p := range r.Points {
		if p.N == n && p.Impl == impl && p.Kind == kind {
			return p, true
		}
	}
	return point{}, false
}

// axes returns the distinct N and implementations in the order measured.
func (r results) axes() (ns []int, impls []model.Attention) {
	for _, p := range r.Points {
		if !slices.Contains(ns, p.N) {
			ns = append(ns, p.N)
		}
		if !slices.Contains(impls, p.Impl) {
			impls = append(impls, p.Impl)
		}
	}
	return ns, impls
}

// markdown renders one row per (N, implementation).
func markdown(r results) string {
	var sb strings.Builder
	s := r.Shape
	device := r.Device
	if r.Precision != "" {
		device += " (" + r.Precision + ")"
	}
	fmt.Fprintf(&sb, "Causal self-attention, float32, device %s. Model: batch %d, %d layer(s), %d heads, dim %d (head dim %d), vocab %d. "+
		"Each point ran in its own process, limited to %s of address space; peak memory is that process's maximum RSS. "+
		"\"Step\" is one training step of the whole model (forward, backward, Adam); \"op alone\" is attention on [B, H, N, D], "+
		"forward and forward+backward, with GFLOP/s counted as 4·B·H·N²·D/2 forward and 2.5× that backward.\n\n",
		device, s.Batch, s.Layers, s.Heads, s.Dim, s.Dim/s.Heads, s.Vocab, mib(r.MemLimit))
	sb.WriteString("| N | attention | step peak RSS | step time | step tok/s | op peak RSS | op fwd | op fwd+bwd | op fwd+bwd GFLOP/s |\n")
	sb.WriteString("|---:|---|---:|---:|---:|---:|---:|---:|---:|\n")
	ns, impls := r.axes()
	for _, n := range ns {
		for _, impl := range impls {
			cells := []string{fmt.Sprint(n), string(impl)}
			step, ok := r.find(n, impl, kindStep)
			switch {
			case !ok:
				cells = append(cells, "", "", "")
			case step.Status != statusOK:
				cells = append(cells, failure(step), "", "")
			default:
				cells = append(cells, mib(step.PeakRSS), seconds(step.StepSeconds), fmt.Sprintf("%.0f", step.TokensPerSecond))
			}
			opp, ok := r.find(n, impl, kindOp)
			switch {
			case !ok:
				cells = append(cells, "", "", "", "")
			case opp.Status != statusOK:
				cells = append(cells, failure(opp), "", "", "")
			default:
				cells = append(cells, mib(opp.PeakRSS), seconds(opp.FwdSeconds), seconds(opp.FwdBwdSeconds), fmt.Sprintf("%.2f", opp.FwdBwdGFLOPS))
			}
			sb.WriteString("| " + strings.Join(cells, " | ") + " |\n")
		}
	}
	return sb.String()
}

func failure(p point) string {
	switch p.Status {
	case statusOOM:
		return "**out of memory**"
	case statusSkipped:
		return "not run (OOM below)"
	}
	return fmt.Sprintf("%s: %s", p.Status, strings.ReplaceAll(p.Detail, "|", "/"))
}

func seconds(s float64) string {
	if s < 1 {
		return fmt.Sprintf("%.1f ms", s*1e3)
	}
	return fmt.Sprintf("%.2f s", s)
}

var implColor = map[model.Attention]color.Color{
	model.AttentionNaive: color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	model.AttentionFlash: color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
}

// series is one line of a plot: kind's value against N for one implementation.
func (r results) series(impl model.Attention, kind string, value func(point) float64) plotter.XYs {
	var xys plotter.XYs
	for _, p := range r.Points {
		if p.Impl == impl && p.Kind == kind && p.Status == statusOK {
			xys = append(xys, plotter.XY{X: float64(p.N), Y: value(p)})
		}
	}
	return xys
}

// ooms are the N at which impl ran out of memory, drawn at the limit.
func (r results) ooms(impl model.Attention, kind string, limitY float64) plotter.XYs {
	var xys plotter.XYs
	for _, p := range r.Points {
		if p.Impl == impl && p.Kind == kind && p.Status == statusOOM {
			xys = append(xys, plotter.XY{X: float64(p.N), Y: limitY})
		}
	}
	return xys
}

// writePlots draws memory.png and time.png. With no successful point there
// is nothing to draw on log axes, and it writes nothing.
func writePlots(dir string, r results) error {
	if !slices.ContainsFunc(r.Points, func(p point) bool { return p.Status == statusOK }) {
		return errors.New("no point succeeded")
	}
	_, impls := r.axes()
	toMiB := func(p point) float64 { return float64(p.PeakRSS) / (1 << 20) }
	limit := float64(r.MemLimit) / (1 << 20)
	mem := newLogPlot("Peak memory (max RSS of the process)", "peak RSS (MiB)")
	tim := newLogPlot("Time per call", "seconds")
	for _, impl := range impls {
		c := implColor[impl]
		if err := addLine(mem, r.series(impl, kindStep, toMiB), c, false, string(impl)+", training step"); err != nil {
			return err
		}
		if err := addLine(mem, r.series(impl, kindOp, toMiB), c, true, string(impl)+", attention alone (fwd+bwd)"); err != nil {
			return err
		}
		if oom := r.ooms(impl, kindStep, limit); len(oom) > 0 {
			s, err := plotter.NewScatter(oom)
			if err != nil {
				return err
			}
			s.Shape, s.Color, s.Radius = draw.CrossGlyph{}, c, vg.Points(6)
			mem.Add(s)
			mem.Legend.Add(string(impl)+": out of memory", s)
		}
		if err := addLine(tim, r.series(impl, kindStep, func(p point) float64 { return p.StepSeconds }), c, false, string(impl)+", training step"); err != nil {
			return err
		}
		if err := addLine(tim, r.series(impl, kindOp, func(p point) float64 { return p.FwdBwdSeconds }), c, true, string(impl)+", attention alone (fwd+bwd)"); err != nil {
			return err
		}
	}
	if limit > 0 {
		lim := plotter.NewFunction(func(float64) float64 { return limit })
		lim.Color, lim.Dashes = color.Gray{Y: 0x80}, []vg.Length{vg.Points(2), vg.Points(2)}
		mem.Add(lim)
		mem.Legend.Add("memory limit", lim)
	}
	if err := mem.Save(7*vg.Inch, 4.5*vg.Inch, filepath.Join(dir, "memory.png")); err != nil {
		return err
	}
	return tim.Save(7*vg.Inch, 4.5*vg.Inch, filepath.Join(dir, "time.png"))
}

func newLogPlot(title, ylabel string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "sequence length N"
	p.Y.Label.Text = ylabel
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	p.X.Tick.Marker, p.Y.Tick.Marker = powersOfTwo{}, plot.LogTicks{Prec: -1}
	p.Legend.Top, p.Legend.Left = true, true
	p.Add(plotter.NewGrid())
	return p
}

func addLine(p *plot.Plot, xys plotter.XYs, c color.Color, dashed bool, label string) error {
	if len(xys) == 0 {
		return nil
	}
	l, s, err := plotter.NewLinePoints(xys)
	if err != nil {
		return err
	}
	l.Color, s.Color = c, c
	if dashed {
		l.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
		s.Shape = draw.BoxGlyph{}
	}
	p.Add(l, s)
	p.Legend.Add(label, l, s)
	return nil
}

// powersOfTwo labels the N axis at the powers of two in range.
type powersOfTwo struct{}

func (powersOfTwo) Ticks(lo, hi float64) []plot.Tick {
	var ticks []plot.Tick
	for v := 1.0; v <= hi; v *= 2 {
		if v >= lo {
			ticks = append(ticks, plot.Tick{Value: v, Label: fmt.Sprint(v)})
		}
	}
	return ticks
}
