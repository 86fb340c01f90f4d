package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// progress reports training on stderr: a bar redrawn in place on a
// terminal, and otherwise (a redirected log, a pipe) a plain line every
// few steps, since the bar's carriage returns would pile up in a file.
type progress struct {
	w     io.Writer                // nil when quiet
	bar   *progressbar.ProgressBar // on w when it is a terminal
	step0 int                      // steps taken before this run
	total int                      // steps of this run
	every int                      // steps between plain lines
}

// newProgress reports total steps following step0 on w, a plain line
// every `every` steps and at the last; enabled false reports nothing.
func newProgress(w io.Writer, enabled bool, step0, total, every int) *progress {
	if !enabled {
		return &progress{}
	}
	p := &progress{w: w, step0: step0, total: total, every: every}
	if isTerminal(w) {
		p.bar = progressbar.NewOptions(total,
			progressbar.OptionSetWriter(w),
			progressbar.OptionSetWidth(25),
			progressbar.OptionShowCount(),
			progressbar.OptionSetPredictTime(true),
			progressbar.OptionThrottle(200*time.Millisecond),
			progressbar.OptionShowElapsedTimeOnFinish(),
		)
	}
	return p
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// update reports the i-th step (from 0) of this run.
func (p *progress) update(i int, loss, val, lr, tokPerSec float64) error {
	status := fmt.Sprintf("loss %.3f  val %.3f  lr %.2e  %.0f tok/s", loss, val, lr, tokPerSec)
	if p.bar != nil {
		p.bar.Describe(status)
		return p.bar.Add(1)
	}
	if p.w != nil && ((i+1)%p.every == 0 || i == p.total-1) {
		_, err := fmt.Fprintf(p.w, "step %d/%d  %s\n", p.step0+i+1, p.step0+p.total, status)
		return err
	}
	return nil
}

// finish completes the bar and ends its line.
func (p *progress) finish() error {
	if p.bar == nil {
		return nil
	}
	if err := p.bar.Finish(); err != nil {
		return err
	}
	_, err := fmt.Fprintln(p.w)
	return err
}
