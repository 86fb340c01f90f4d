//go:build flashgpu

package cudakernels

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/gorgonia-flash/flashattention/kernels"
)

// TuneOptions says what Tune times.
type TuneOptions struct {
	// Hidden and Tokens size every timed problem as FlashAttention's
	// benchmarks (and bench's BenchmarkKernelsGPU) do: H = max(1,
	// Hidden/D) heads and, at each length N of Lengths, B = max(1,
	// Tokens/N) batch entries of N queries and N keys, so that every
	// shape keeps the GPU about as busy.
	Hidden, Tokens int
	Lengths        []int
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
// each compiled head dimension, causal or not, forward and backward, at
// each length) on the device with every candidate kernel (candidates)
// where two or more of them differ, and returns the table: each such
// kind's fastest candidate and every candidate's time (KernelTime,
// without copies, L2 flushed). Kinds for which every candidate is the same
// kernel are left out: there is nothing to decide. Before a kind is timed,
// each of its candidates computes a small problem against float64
// (checkCandidates): Tune fails, naming it, when one errs far more than
// the others. A device where only one
// family runs has nothing to tune (an error wrapping ErrUnsupported).
func Tune(o TuneOptions) (*TuneTable, error) {
	if o.Hidden < 1 || o.Tokens < 1 || o.Reps < 1 || len(o.Lengths) == 0 {
		return nil, fmt.Errorf("%w: tuning hidden %d over %d tokens at lengths %v with %d reps", kernels.ErrInvalidParams, o.Hidden, o.Tokens, o.Lengths, o.Reps)
	}
	for _, n := range o.Lengths {
		if n < 1 {
			return nil, fmt.Errorf("%w: tuning length %d", kernels.ErrInvalidParams, n)
		}
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
		Date: time.Now().UTC().Format("2006-01-02"), Problem: fmt.Sprintf("H = max(1, %d/D) heads, B = max(1, %d/N) batch entries", o.Hidden, o.Tokens)}
	for _, prec := range []Precision{TF32, BF16, FP16} {
		backends, err := tuneBackends(o, prec)
		if err == nil {
			err = tunePrecision(t, o, capab, prec, backends)
		}
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

// tuneBackends opens one backend of prec per candidate name: the families'
// by WithFamily, the others (tunedCandidates: the Hopper forward's other
// plain kernels and the conversion passes, where prec has them) as
// FamilyAuto backends with a table that chooses that candidate wherever it
// exists.
func tuneBackends(o TuneOptions, prec Precision) (map[string]*Backend, error) {
	opts := map[string]Option{FamilySM80.String(): WithFamily(FamilySM80), FamilySM90.String(): WithFamily(FamilySM90)}
	for _, c := range tunedCandidates(prec) {
		opts[c.String()] = WithTuneTable(forcingTable(prec, c))
	}
	bs := map[string]*Backend{}
	for name, opt := range opts {
		b, err := NewBackend(WithPrecision(prec), opt, WithDevice(o.Device), WithKernelDir(o.KernelDir))
		if err != nil {
			return nil, errors.Join(err, closeAll(bs))
		}
		bs[name] = b
	}
	return bs, nil
}

// tunePrecision adds prec's entries to t, timing each candidate with its
// backend of backends.
func tunePrecision(t *TuneTable, o TuneOptions, capab Capability, prec Precision, backends map[string]*Backend) error {
	for _, dp := range headDims {
		for _, causal := range []bool{false, true} {
			for _, dir := range []direction{forwardDir, backwardDir} {
				timed := distinctCandidates(capab, prec, dp, dir)
				if len(timed) < 2 {
					continue
				}
				if err := checkCandidates(prec, dp, causal, dir, timed, backends); err != nil {
					return err
				}
				for _, n := range o.Lengths {
					p := kernels.Params{B: max(1, o.Tokens/n), H: max(1, o.Hidden/dp), Nq: n, Nk: n, D: dp,
						Scale: 1 / math.Sqrt(float64(dp)), Causal: causal}
					e := TuneEntry{Precision: prec.String(), HeadDim: dp, Causal: causal, Backward: dir == backwardDir, N: n,
						Millis: map[string]float64{}}
					best := math.Inf(1)
					var line []string
					for _, c := range timed {
						ms, err := backends[c.String()].KernelTime(p, dir == backwardDir, o.Reps)
						if err != nil {
							return fmt.Errorf("timing %v %v D=%d causal=%v N=%d with %v: %w", prec, dir, dp, causal, n, c, err)
						}
						e.Millis[c.String()] = ms
						line = append(line, fmt.Sprintf("%v %.4f ms", c, ms))
						if ms < best {
							best, e.Kernel = ms, c.String()
						}
					}
					t.Entries = append(t.Entries, e)
					if o.Progress != nil {
						o.Progress(fmt.Sprintf("%v %v D=%d causal=%v N=%d B=%d H=%d: %s: %s", prec, dir, dp, causal, n, p.B, p.H,
							strings.Join(line, ", "), e.Kernel))
					}
				}
			}
		}
	}
	return nil
}

// checkCandidates runs every candidate of one kind of call on a small
// problem (lengths no tile divides, so that padding is computed too) and
// fails when one's error against float64 is more than four times the most
// accurate one's: a kernel that computes something else must never win on
// speed. Correct kernels of one precision differ in error by far less (the
// same roundings, sums in other orders); a broken one errs by the size of
// the output. The conformance suite, which runs every candidate
// (testKernelSets), is the full check; this one guards a table made on a
// device or with kernels the suite has not seen.
func checkCandidates(prec Precision, dp int, causal bool, dir direction, timed []candidate, backends map[string]*Backend) error {
	p := kernels.Params{B: 1, H: 2, Nq: 300, Nk: 300, D: dp, Scale: 1 / math.Sqrt(float64(dp)), Causal: causal}
	rng := rand.New(rand.NewPCG(uint64(dp), 7))
	in := make([][]float32, 4) // q, k, v, dO
	wide := make([][]float64, 4)
	for i, n := range []int{p.QLen(), p.KLen(), p.KLen(), p.QLen()} {
		in[i], wide[i] = make([]float32, n), make([]float64, n)
		for j := range n {
			in[i][j] = float32(rng.NormFloat64())
			wide[i][j] = float64(in[i][j])
		}
	}
	ref := make([][]float64, 5) // o, lse, dq, dk, dv
	for i, n := range []int{p.QLen(), p.LSELen(), p.QLen(), p.KLen(), p.KLen()} {
		ref[i] = make([]float64, n)
	}
	err := kernels.NaiveForward(p, wide[0], wide[1], wide[2], ref[0], ref[1])
	if err == nil {
		err = kernels.NaiveBackward(p, wide[0], wide[1], wide[2], ref[0], ref[1], wide[3], nil, ref[2], ref[3], ref[4])
	}
	if err != nil {
		return err
	}
	outs := []int{0} // the forward is judged on O
	if dir == backwardDir {
		outs = []int{2, 3, 4}
	}
	errs := make([]float64, len(timed))
	for c, cand := range timed {
		got := make([][]float32, 5)
		for i, r := range ref {
			got[i] = make([]float32, len(r))
		}
		b := backends[cand.String()]
		err := b.Forward32(p, in[0], in[1], in[2], got[0], got[1])
		if err == nil && dir == backwardDir {
			err = b.Backward32(p, in[0], in[1], in[2], got[0], got[1], in[3], nil, got[2], got[3], got[4])
		}
		if err != nil {
			return fmt.Errorf("checking %v %v D=%d causal=%v with %v: %w", prec, dir, dp, causal, cand, err)
		}
		for _, i := range outs {
			errs[c] = max(errs[c], relErr(got[i], ref[i]))
		}
	}
	best := slices.Min(errs)
	for c, e := range errs {
		if !(e <= 4*best) {
			return fmt.Errorf("%w: %v %v D=%d causal=%v: kernel %v errs %.3g against float64, the best candidate %.3g",
				ErrUnsupported, prec, dir, dp, causal, timed[c], e, best)
		}
	}
	return nil
}

// relErr is the largest |got − want| over the largest |want|.
func relErr(got []float32, want []float64) float64 {
	var diff, peak float64
	for i, w := range want {
		diff = max(diff, math.Abs(float64(got[i])-w))
		peak = max(peak, math.Abs(w))
	}
	return diff / peak
}

func closeAll(bs map[string]*Backend) error {
	var errs []error
	for _, b := range bs {
		errs = append(errs, b.Close())
	}
	return errors.Join(errs...)
}
