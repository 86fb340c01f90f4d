//go:build flashgpu

package cudakernels

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/gorgonia-flash/flashattention/kernels"
)

// TuneOptions says what Tune times.
type TuneOptions struct {
	// B, H and N are the problem every entry times: B·H heads of N queries
	// and N keys.
	B, H, N int
	// Reps is KernelTime's repetitions per measurement (the median).
	Reps int
	// Device is the device ordinal, KernelDir the kernels' directory
	// (WithKernelDir; "" for the embedded ones).
	Device    int
	KernelDir string
	// Progress, if not nil, receives a line per timed entry.
	Progress func(string)
}

// Tune times every kind of call a TuneTable holds (TF32, BF16 and FP16,
// each compiled head dimension, causal or not, forward and backward) on
// the device in each kernel family where the families run different
// kernels for it, and returns the table: each such kind's fastest family
// and every family's time (KernelTime, without copies, L2 flushed). Kinds
// for which both families choose the same kernel are left out: there is
// nothing to decide. A device where only one family runs has nothing to
// tune (an error wrapping ErrUnsupported).
func Tune(o TuneOptions) (*TuneTable, error) {
	if o.B < 1 || o.H < 1 || o.N < 1 || o.Reps < 1 {
		return nil, fmt.Errorf("%w: tuning problem B=%d H=%d N=%d with %d reps", kernels.ErrInvalidParams, o.B, o.H, o.N, o.Reps)
	}
	dev, capab, err := probe(o.Device)
	if err != nil {
		return nil, err
	}
	if checkDevice(capab, FamilySM90) != nil {
		return nil, fmt.Errorf("%w: compute capability %d.%d runs one kernel family: nothing to tune", ErrUnsupported, capab.Major, capab.Minor)
	}
	name, err := dev.Name()
	if err != nil {
		return nil, fmt.Errorf("cudakernels: device %d: %w", o.Device, err)
	}
	t := &TuneTable{Device: name, Capability: fmt.Sprintf("%d.%d", capab.Major, capab.Minor),
		Date: time.Now().UTC().Format("2006-01-02"), Problem: fmt.Sprintf("B=%d H=%d N=%d", o.B, o.H, o.N)}
	families := []Family{FamilySM80, FamilySM90}
	for _, prec := range []Precision{TF32, BF16, FP16} {
		var backends []*Backend
		for _, f := range families {
			b, err := NewBackend(WithPrecision(prec), WithFamily(f), WithDevice(o.Device), WithKernelDir(o.KernelDir))
			if err != nil {
				return nil, errors.Join(err, closeAll(backends))
			}
			backends = append(backends, b)
		}
		err := tunePrecision(t, o, capab, prec, families, backends)
		if err := errors.Join(err, closeAll(backends)); err != nil {
			return nil, err
		}
	}
	data, err := t.JSON()
	if err != nil {
		return nil, err
	}
	return ParseTuneTable(data) // the same checks as a committed table's
}

// tunePrecision adds prec's entries to t, timing with backends (one per
// family of families).
func tunePrecision(t *TuneTable, o TuneOptions, capab Capability, prec Precision, families []Family, backends []*Backend) error {
	for _, dp := range headDims {
		for _, causal := range []bool{false, true} {
			for _, dir := range []direction{forwardDir, backwardDir} {
				r := request{prec: prec, d: dp, dir: dir, causal: causal}
				choices := make([]choice, len(families))
				errs := make([]error, len(families))
				for i, f := range families {
					choices[i], errs[i] = choose(capab, f, r)
				}
				if errs[0] != nil || errs[1] != nil || choices[0] == choices[1] {
					continue // a family fails, or both run the same kernel
				}
				p := kernels.Params{B: o.B, H: o.H, Nq: o.N, Nk: o.N, D: dp, Scale: 1 / math.Sqrt(float64(dp)), Causal: causal}
				e := TuneEntry{Precision: prec.String(), HeadDim: dp, Causal: causal, Backward: dir == backwardDir,
					Millis: map[string]float64{}}
				best := math.Inf(1)
				for i, f := range families {
					ms, err := backends[i].KernelTime(p, dir == backwardDir, o.Reps)
					if err != nil {
						return fmt.Errorf("timing %v %v D=%d causal=%v on %v: %w", prec, dir, dp, causal, f, err)
					}
					e.Millis[f.String()] = ms
					if ms < best {
						best, e.Family = ms, f.String()
					}
				}
				t.Entries = append(t.Entries, e)
				if o.Progress != nil {
					o.Progress(fmt.Sprintf("%v %v D=%d causal=%v: sm80 %s %.3f ms, sm90 %s %.3f ms: %s",
						prec, dir, dp, causal, choices[0].kind, e.Millis["sm80"], choices[1].kind, e.Millis["sm90"], e.Family))
				}
			}
		}
	}
	return nil
}

func closeAll(bs []*Backend) error {
	var errs []error
	for _, b := range bs {
		errs = append(errs, b.Close())
	}
	return errors.Join(errs...)
}
