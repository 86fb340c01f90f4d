package main

import (
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/gorgonia-flash/flashattention/examples/transformer/model"
)

// writeLossPlot draws the per-step training loss and the validation points.
func writeLossPlot(path string, history []model.LossPoint) error {
	p := plot.New()
	p.Title.Text = "Character model loss"
	p.X.Label.Text = "step"
	p.Y.Label.Text = "cross-entropy (nats/char)"
	var train, val plotter.XYs
	for _, h := range history {
		if !math.IsNaN(h.Train) {
			train = append(train, plotter.XY{X: float64(h.Step), Y: h.Train})
		}
		if !math.IsNaN(h.Val) {
			val = append(val, plotter.XY{X: float64(h.Step), Y: h.Val})
		}
	}
	if len(train) > 0 {
		l, err := plotter.NewLine(train)
		if err != nil {
			return err
		}
		l.Color = plotColorTrain
		p.Add(l)
		p.Legend.Add("train", l)
	}
	if len(val) > 0 {
		l, s, err := plotter.NewLinePoints(val)
		if err != nil {
			return err
		}
		l.Color = plotColorVal
		s.Color = plotColorVal
		l.Width = vg.Points(2)
		p.Add(l, s)
		p.Legend.Add("validation", l, s)
	}
	p.Add(plotter.NewGrid())
	p.Legend.Top = true // the curves fall towards the bottom right
	return p.Save(7*vg.Inch, 4*vg.Inch, path)
}
