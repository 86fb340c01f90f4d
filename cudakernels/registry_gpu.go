//go:build flashgpu

package cudakernels

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"gorgonia.org/cu"

	"github.com/gorgonia-flash/flashattention/kernels"
)

// A forwardKernel enqueues a forward, with the conversions its operands
// need, on a stream; scratchBytes is the size of fwdBuffers.scratch it
// needs for p.
//
// computes returns an error wrapping ErrUnsupported when p uses a variant
// the kernel does not compute (refuseVariants).
type forwardKernel interface {
	computes(p kernels.Params) error
	scratchBytes(p kernels.Params) int64
	launch(p kernels.Params, buf fwdBuffers, stream cu.Stream) error
}

// A backwardKernel enqueues the backward's gradient kernels (after
// D = rowsum(dO∘O) is in buf.delta) with the conversions their operands
// need; scratchBytes is the size of bwdBuffers.scratch it needs for p.
type backwardKernel interface {
	computes(p kernels.Params) error
	scratchBytes(p kernels.Params) int64
	launch(p kernels.Params, buf bwdBuffers, stream cu.Stream) error
}

// A deltaFuser is a backwardKernel that, for the calls fusesDelta accepts,
// computes D = rowsum(dO∘O) itself in launch (of dO rounded to its
// operand type), in the pass that converts dO: enqueueBackward then
// launches no D pass.
type deltaFuser interface {
	fusesDelta(p kernels.Params, buf bwdBuffers) bool
}

// registry holds the loaded modules and, for every choice that choose can
// return for this backend, its kernels. It is used on the worker's thread.
type registry struct {
	dev   Capability
	fam   Family
	prec  Precision
	tuned *TuneTable // the device's tuning table, nil if it has none
	// reduceDQ lets the Hopper backward sum dQ by reductions in its dK/dV
	// kernel where built (WithDeterministic(false)).
	reduceDQ bool

	mod, hopper cu.Module // hopper: the sm_90a module, loaded when a choice needs it
	fwd         map[choice]forwardKernel
	bwd         map[choice]backwardKernel
	dotDoO      map[int]cu.Function // by element size: D = rowsum(dO∘O)
	// round rounds float32 device memory in place to prec (TF32, BF16,
	// FP16): dO always, and the operands of a rounded CUDA-core backward.
	round cu.Function
	// dotDoORound is D = rowsum(dO∘O) and dO's rounding to prec in one pass,
	// for the backwards that do not run the CUDA cores on rounded operands;
	// for FP32, D of split products for the 3xTF32 backward. dotDoORounded
	// (TF32, BF16, FP16) takes D of the rounded dO but leaves dO as it is,
	// for the Hopper backward, whose images round it the same way.
	dotDoORound, dotDoORounded cu.Function
	// dec holds the decoding kernels (decode_gpu.go).
	dec *decoder
}

// loadRegistry loads the modules and the kernels of every choice for a
// backend of precision prec and family fam on a device of capability dev
// with tuning table tuned (nil: none), with the fused Hopper backward where
// reduceDQ. It runs on the worker's thread with the context current.
func loadRegistry(dev Capability, fam Family, prec Precision, tuned *TuneTable, kernelDir string, reduceDQ bool) (_ *registry, err error) {
	// r is not the named result: a failing return sets that to nil, and the
	// deferred release still needs r.
	r := &registry{dev: dev, fam: fam, prec: prec, tuned: tuned, reduceDQ: reduceDQ, fwd: map[choice]forwardKernel{},
		bwd: map[choice]backwardKernel{}, dotDoO: map[int]cu.Function{}}
	defer func() {
		if err != nil {
			err = errors.Join(err, r.release())
		}
	}()
	// One image for every device: the driver compiles compute_80 PTX for
	// the device it loads on (gen.sh).
	if r.mod, err = loadModule(kernelDir, "flash_sm80.ptx"); err != nil {
		return nil, err
	}
	if r.dec, err = loadDecoder(kernelDir, dev); err != nil {
		return nil, err
	}
	for _, elem := range []int{4, 8} {
		if r.dotDoO[elem], err = function(r.mod, "flash_bwd_dot_do_o_"+typeName(elem)); err != nil {
			return nil, err
		}
	}
	if prec != FP32 {
		if r.round, err = function(r.mod, "flash_round_"+prec.String()); err != nil {
			return nil, err
		}
		if r.dotDoORound, err = function(r.mod, "flash_bwd_dot_do_o_round_"+prec.String()); err != nil {
			return nil, err
		}
		if r.dotDoORounded, err = function(r.mod, "flash_bwd_dot_do_o_rounded_"+prec.String()); err != nil {
			return nil, err
		}
	} else if r.dotDoORound, err = function(r.mod, "flash_bwd_dot_do_o_round_tf32x3"); err != nil {
		return nil, err
	}
	// Every length a tuning table times, so that each of its entries'
	// kernels is loaded, and those on each side of the heuristic's bounds
	// (wgmmaWS2Pays).
	lengths := append(slices.Clone(heuristicLengths), tuned.lengths()...)
	for _, f64 := range []bool{false, true} {
		for _, dp := range headDims {
			for _, dir := range []direction{forwardDir, backwardDir} {
				// Plain attention, causal or not (a tuning table may tell
				// them apart), with a bias (and maybe dropout), with
				// dropout alone.
				// Plain problems (which FP32's Hopper kernels alone compute)
				// and ones with other variants.
				for _, extra := range []struct{ any, bias, causal, plain bool }{{false, false, false, true}, {false, false, true, true},
					{false, false, false, false}, {true, true, false, false}, {true, false, false, false}} {
					for _, nq := range lengths {
						c, err := chooseTuned(dev, fam, tuned, request{prec: prec, f64: f64, d: dp, dir: dir, biasOrDropout: extra.any,
							bias: extra.bias, causal: extra.causal, nq: nq, plain: extra.plain})
						if err != nil {
							continue // calls with this head dimension get the error
						}
						if err := r.ensure(c, kernelDir); err != nil {
							return nil, err
						}
					}
				}
			}
		}
	}
	return r, nil
}

// ensure loads the kernels of c unless they are loaded.
func (r *registry) ensure(c choice, kernelDir string) error {
	if _, done := r.fwd[c]; done {
		return nil
	}
	if _, done := r.bwd[c]; done {
		return nil
	}
	return r.load(c, kernelDir)
}

// load looks up the kernels of c.
func (r *registry) load(c choice, kernelDir string) (err error) {
	mod := r.mod
	if c.kind == kindWGMMA {
		if r.hopper == (cu.Module{}) {
			if r.hopper, err = loadModule(kernelDir, "flash_sm90a.ptx"); err != nil {
				return err
			}
		}
		mod = r.hopper
	}
	switch {
	case c.dir == forwardDir && c.kind == kindSIMT:
		r.fwd[c], err = loadSimtForward(mod, c, r.dev.MaxSmem)
	case c.dir == forwardDir && c.kind == kindMMA:
		r.fwd[c], err = loadMmaForward(mod, c, r.dev.MaxSmem)
	case c.dir == forwardDir:
		r.fwd[c], err = loadWgmmaForward(mod, c, r.dev.MaxSmem, r.dev.SMs)
	case c.kind == kindSIMT:
		r.bwd[c], err = loadSimtBackward(mod, c, r.dev.MaxSmem)
	case c.kind == kindMMA:
		r.bwd[c], err = loadMmaBackward(mod, c, r.dev.MaxSmem)
	default:
		r.bwd[c], err = loadWgmmaBackward(mod, c, r.dev.MaxSmem, r.reduceDQ)
	}
	return err
}

// choose is the package's chooseTuned for this backend.
func (r *registry) choose(elem int, p kernels.Params, dir direction) (choice, error) {
	return chooseTuned(r.dev, r.fam, r.tuned, requestFor(r.prec, elem, p, dir))
}

// forward returns the forward kernel for a call of problem p on elements
// of elem bytes.
func (r *registry) forward(elem int, p kernels.Params) (forwardKernel, error) {
	c, err := r.choose(elem, p, forwardDir)
	if err != nil {
		return nil, err
	}
	return r.fwd[c], nil
}

// backward returns the backward kernel and its choice.
func (r *registry) backward(elem int, p kernels.Params) (backwardKernel, choice, error) {
	c, err := r.choose(elem, p, backwardDir)
	if err != nil {
		return nil, c, err
	}
	return r.bwd[c], c, nil
}

// release unloads the modules.
func (r *registry) release() error {
	var errs []error
	if r.dec != nil {
		errs = append(errs, r.dec.mod.Unload())
		r.dec = nil
	}
	for _, m := range []*cu.Module{&r.mod, &r.hopper} {
		if *m != (cu.Module{}) {
			errs = append(errs, m.Unload())
			*m = cu.Module{}
		}
	}
	return errors.Join(errs...)
}

// loadModule loads the PTX file name, embedded or from dir.
func loadModule(dir, name string) (cu.Module, error) {
	var b []byte
	var err error
	if dir == "" {
		b, err = embeddedPTX.ReadFile("ptx/" + name)
	} else {
		b, err = os.ReadFile(filepath.Join(dir, name))
	}
	if err != nil {
		return cu.Module{}, fmt.Errorf("cudakernels: kernels: %w", err)
	}
	m, err := cu.LoadData(string(b))
	if err != nil {
		return cu.Module{}, fmt.Errorf("cudakernels: loading module %s: %w", name, err)
	}
	return m, nil
}
