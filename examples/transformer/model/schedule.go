package model

import "math"

// Schedule is the learning rate as a function of the optimiser step: a
// linear warm-up over the first Warmup steps to Peak, then a cosine decay
// that reaches Peak·Floor at step Steps, and Peak·Floor after that. It
// counts steps from the start of training, not of a run, and is saved in
// checkpoints, so that a resumed run continues it instead of warming up
// again.
type Schedule struct {
	Peak   float64
	Warmup int
	Floor  float64 // final rate as a fraction of Peak
	Steps  int     // the step at which the decay reaches the floor
}

// Rate is the learning rate of the i-th step (from 0) since training began.
// A schedule with no step left after its warm-up stays at Peak.
func (s Schedule) Rate(i int) float64 {
	if i < s.Warmup {
		return s.Peak * float64(i+1) / float64(s.Warmup)
	}
	decay := s.Steps - s.Warmup - 1
	if decay <= 0 {
		return s.Peak
	}
	progress := min(1, float64(i-s.Warmup)/float64(decay))
	floor := s.Peak * s.Floor
	return floor + (s.Peak-floor)*0.5*(1+math.Cos(math.Pi*progress))
}
