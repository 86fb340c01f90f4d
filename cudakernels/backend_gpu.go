//go:build flashgpu

package cudakernels

import (
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"gorgonia.org/cu"

	"github.com/gorgonia-flash/flashattention/kernels"
)

// Backend computes attention on one CUDA device. It implements
// kernels.Backend; its methods may be called from any goroutine (they are
// serialised on the thread that owns the device context). Close releases the
// device.
//
// It is three parts, each used on the worker's thread once open: the device
// (context and thread, device_gpu.go), the kernel registry (modules and the
// kernels of every choice, registry_gpu.go) and the copy pipeline (streams,
// staging, workspace: resident_gpu.go).
type Backend struct {
	prec Precision
	name string

	mu     sync.RWMutex // held for writing only by Close
	closed bool
	w      *worker

	ctx  cu.CUContext
	reg  *registry
	xfer transfers
}

var _ kernels.Backend = (*Backend)(nil)

type config struct {
	prec      Precision
	family    Family
	device    int
	kernelDir string
	// table replaces the device's committed tuning table when tableSet.
	table    *TuneTable
	tableSet bool
	// reduceDQ allows the fused Hopper backward (WithDeterministic(false)).
	reduceDQ bool
}

// An Option configures NewBackend.
type Option func(*config)

// WithPrecision selects the arithmetic of Forward32 and Backward32 (default
// FP32).
func WithPrecision(p Precision) Option { return func(c *config) { c.prec = p } }

// WithFamily selects the kernel family of the tensor-core forward (default
// FamilyAuto). NewBackend fails with ErrUnsupported when the device cannot
// run it.
func WithFamily(f Family) Option { return func(c *config) { c.family = f } }

// WithDeterministic(false) lets the Hopper backward of plain BF16 and FP16
// problems at head dimensions up to 128 run as one kernel that sums dQ by
// reductions in float32, instead of a second kernel that recomputes the
// scores for dQ: dQ's bits then vary from run to run (the sums' order
// does), within the same error bound, and the backward's scratch holds a
// float32 copy of dQ (padded to 128 rows and the kernel's head
// dimension). The default, true, keeps every result bit-identical between
// runs. Which of the two is faster depends on the shape: on an H100
// (2026-12-07, bench/RESULTS.md) the fused kernel ran the BF16 backward
// 6–13 % faster at D = 128 from N = 2k on, and within −3 to +2 % of the
// two kernels at D = 64.
func WithDeterministic(on bool) Option { return func(c *config) { c.reduceDQ = !on } }

// WithDevice selects the CUDA device by ordinal (default 0).
func WithDevice(ordinal int) Option { return func(c *config) { c.device = ordinal } }

// WithKernelDir loads the PTX from dir (files named as under ptx/) instead of
// the copy compiled into the binary. It is meant for testing kernels freshly
// built by gen.sh before they are committed.
func WithKernelDir(dir string) Option { return func(c *config) { c.kernelDir = dir } }

// WithTuneTable makes a FamilyAuto backend choose its kernels by t instead
// of the committed table of its device model (tuned/), whatever device t
// was timed on; nil leaves the heuristic alone. A table from Tune (the
// flashtune command) on a GPU model with no committed table takes effect
// this way without rebuilding, and tests use it to run a candidate kernel
// the heuristic does not choose.
func WithTuneTable(t *TuneTable) Option {
	return func(c *config) { c.table, c.tableSet = t, true }
}

// Devices returns the number of CUDA devices, or an error wrapping
// ErrNoDevice when the driver cannot be asked.
func Devices() (int, error) {
	n, err := cu.NumDevices()
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrNoDevice, err)
	}
	return n, nil
}

// NewBackend opens a CUDA device and loads the kernels. It fails with an
// error wrapping ErrNoDevice when there is no device, and ErrUnsupported for
// a precision that has no kernels yet or a device older than compute
// capability 8.0.
func NewBackend(opts ...Option) (*Backend, error) {
	cfg := config{prec: FP32}
	for _, o := range opts {
		o(&cfg)
	}
	switch cfg.prec {
	case FP32, TF32, BF16, FP16:
	default:
		return nil, fmt.Errorf("%w: precision %v has no kernels yet", ErrUnsupported, cfg.prec)
	}
	switch cfg.family {
	case FamilyAuto, FamilySM80, FamilySM90:
	default:
		return nil, fmt.Errorf("%w: kernel family %v", ErrUnsupported, cfg.family)
	}
	n, err := cu.NumDevices()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoDevice, err)
	}
	if cfg.device < 0 || cfg.device >= n {
		return nil, fmt.Errorf("%w: device %d requested, %d present", ErrNoDevice, cfg.device, n)
	}
	b := &Backend{prec: cfg.prec, name: "cuda-" + cfg.prec.String()}
	w, err := startWorker(func() error { return b.open(cfg) }, b.release)
	if err != nil {
		return nil, err
	}
	b.w = w
	return b, nil
}

// open runs on the worker's thread: it probes the device, creates the
// context there (which makes it current), then loads the kernels selection
// can choose.
func (b *Backend) open(cfg config) (err error) {
	dev, capab, err := probe(cfg.device)
	if err != nil {
		return err
	}
	if err := checkDevice(capab, cfg.family); err != nil {
		return fmt.Errorf("device %d: %w", cfg.device, err)
	}
	if b.ctx, err = dev.MakeContext(cu.SchedAuto); err != nil {
		return fmt.Errorf("cudakernels: creating a context on device %d: %w", cfg.device, err)
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, b.release())
		}
	}()
	if err := b.xfer.open(); err != nil {
		return err
	}
	name, err := dev.Name()
	if err != nil {
		return fmt.Errorf("cudakernels: device %d: %w", cfg.device, err)
	}
	tuned := cfg.table
	if !cfg.tableSet {
		if tuned, err = tunedTable(name, capab); err != nil {
			return err
		}
	}
	b.reg, err = loadRegistry(capab, cfg.family, cfg.prec, tuned, cfg.kernelDir, cfg.reduceDQ)
	return err
}

// release frees the pipeline's resources, the modules and the context; it
// runs on the worker's thread.
func (b *Backend) release() error {
	if b.ctx == (cu.CUContext{}) {
		return nil
	}
	errs := []error{b.xfer.release()}
	if b.reg != nil {
		errs = append(errs, b.reg.release())
	}
	errs = append(errs, b.ctx.Destroy())
	b.ctx = cu.CUContext{}
	return errors.Join(errs...)
}

// Close waits for calls in flight, then frees every device resource. Calls
// after Close return an error.
func (b *Backend) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	b.closed = true
	b.w.stop()
	return nil
}

// Name reports the backend and its float32 precision, e.g. "cuda-bf16".
func (b *Backend) Name() string { return b.name }

var errClosed = errors.New("cudakernels: backend is closed")

// run executes fn on the device thread unless the backend is closed.
func (b *Backend) run(fn func() error) error {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.closed {
		return errClosed
	}
	return b.w.do(fn)
}

// Forward32 implements kernels.Backend in the backend's precision: on CUDA
// cores for FP32, on tensor cores for TF32, BF16 and FP16.
func (b *Backend) Forward32(p kernels.Params, q, k, v, o, lse []float32) error {
	_, err := forward(b, p, q, k, v, o, lse, false)
	return err
}

// Forward64 implements kernels.Backend in float64 on CUDA cores.
func (b *Backend) Forward64(p kernels.Params, q, k, v, o, lse []float64) error {
	_, err := forward(b, p, q, k, v, o, lse, false)
	return err
}

// Backward32 implements kernels.Backend in the backend's precision: on CUDA
// cores for FP32; for TF32, BF16 and FP16 on tensor cores where the
// backend's kernel family has a backward for the head dimension (see the
// package documentation), else on CUDA cores in float32 on Q, K, V and dO
// rounded to the storage precision exactly as the forward rounded them. So
// the gradients are those of the function the forward computed; O (for
// D = rowsum(dO∘O)) and LSE are used as given.
func (b *Backend) Backward32(p kernels.Params, q, k, v, o, lse, do, dlse, dq, dk, dv []float32) error {
	return backward(b, p, nil, q, k, v, o, lse, do, dlse, dq, dk, dv)
}

// Backward64 implements kernels.Backend in float64 on CUDA cores.
func (b *Backend) Backward64(p kernels.Params, q, k, v, o, lse, do, dlse, dq, dk, dv []float64) error {
	return backward(b, p, nil, q, k, v, o, lse, do, dlse, dq, dk, dv)
}

// fwdBuffers and bwdBuffers are the device tensors of one call (or chunk),
// by name; scratch is the kernel's scratchBytes of work space.
// vars places the chunk in its call (variantArgs).
type fwdBuffers struct {
	q, k, v, o, lse, scratch cu.DevicePtr
	vars                     variantArgs
}

type bwdBuffers struct {
	q, k, v, o, lse, do, delta, dq, dk, dv cu.DevicePtr
	scratch                                cu.DevicePtr
	vars                                   variantArgs
}

// elemSize is the size of T in bytes.
func elemSize[T kernels.Float]() int {
	var zero T
	return int(unsafe.Sizeof(zero))
}

// forward runs the forward through the copy pipeline. With keep, q, k, v,
// o and lse stay on the device in a state it returns; without, they pass
// through chunk-sized buffers of the workspace.
func forward[T kernels.Float](b *Backend, p kernels.Params, q, k, v, o, lse []T, keep bool) (*deviceState, error) {
	if err := kernels.CheckForward(p, q, k, v, o, lse); err != nil {
		return nil, err
	}
	if _, err := paddedDim(p.D); err != nil {
		return nil, err
	}
	if p.Pages != nil && !keep {
		// Paged keys are a decode's: the split-KV units read the pool in
		// place (decode_gpu.go).
		if err := refuseVariants(p, "the decoding kernels", masksAndMods|pagedVariant); err != nil {
			return nil, err
		}
		return nil, decodeForward(b, p, q, k, v, o, lse)
	}
	var st *deviceState
	err := b.run(func() (err error) {
		f, err := b.reg.forward(elemSize[T](), p)
		if err != nil {
			return err
		}
		if err := f.computes(p); err != nil {
			return err
		}
		bh, g := p.B*p.H, p.H/p.KVHeads()
		tq, tk, tv := staged[T]{host: q, per: p.Nq * p.D}, staged[T]{host: k, per: p.Nk * p.D, group: g}, staged[T]{host: v, per: p.Nk * p.D, group: g}
		to, tl := staged[T]{host: o, per: p.Nq * p.D}, staged[T]{host: lse, per: p.Nq}
		all := []*staged[T]{&tq, &tk, &tv, &to, &tl}
		hb := headBytes(all)
		hc := groupHeads(p, capScratch(b.xfer.chunkHeads(bh, hb), f.scratchBytes(chunkParams(p, g))/int64(g), hb))
		sb := f.scratchBytes(chunkParams(p, hc))
		var scratch [slots]cu.DevicePtr
		var aux auxArgs
		var bias biasArgs[T]
		parts := append([]part{{&scratch[0], sb}, {&scratch[1], sb}, aux.part(p)}, bias.parts(p)...)
		if keep {
			st = &deviceState{b: b, p: p, elem: elemSize[T]()}
			if st.a, err = newArena(part{&st.q, int64(tq.heads(bh)) * tq.bytes()}, part{&st.k, int64(tk.heads(bh)) * tk.bytes()},
				part{&st.v, int64(tv.heads(bh)) * tv.bytes()}, part{&st.o, int64(to.heads(bh)) * to.bytes()},
				part{&st.lse, int64(tl.heads(bh)) * tl.bytes()}); err != nil {
				return err
			}
			defer func() {
				if err != nil {
					err = errors.Join(err, st.a.free())
					st = nil
				}
			}()
			tq.whole, tk.whole, tv.whole, to.whole, tl.whole = st.q, st.k, st.v, st.o, st.lse
		} else {
			for _, t := range all {
				parts = append(parts, t.slotParts(hc)...)
			}
		}
		if err := b.xfer.workspace(parts...); err != nil {
			return err
		}
		if err := errors.Join(aux.upload(), bias.upload()); err != nil {
			return err
		}
		return pipeline(&b.xfer, bh, hc, []*staged[T]{&tq, &tk, &tv}, []*staged[T]{&to, &tl}, func(c chunk, s cu.Stream) error {
			buf := fwdBuffers{q: tq.dev(c), k: tk.dev(c), v: tv.dev(c), o: to.dev(c), lse: tl.dev(c), scratch: scratch[c.slot],
				vars: aux.at(p, c, 0)}
			bias.set(&buf.vars)
			if err := f.launch(chunkParams(p, c.n), buf, s); err != nil {
				return fmt.Errorf("cudakernels: forward launch: %w", err)
			}
			return nil
		})
	})
	return st, err
}

// backward runs the backward through the copy pipeline: on the inputs st
// holds when st is not nil (uploading only do), else on q, k, v, o, lse and
// do, which pass through chunk-sized buffers of the workspace like dq, dk
// and dv.
func backward[T kernels.Float](b *Backend, p kernels.Params, st *deviceState, q, k, v, o, lse, do, dlse, dq, dk, dv []T) error {
	if st == nil {
		if err := kernels.CheckBackward(p, q, k, v, o, lse, do, dlse, dq, dk, dv); err != nil {
			return err
		}
	}
	if _, err := paddedDim(p.D); err != nil {
		return err
	}
	return b.run(func() error {
		if st != nil && st.a == nil {
			return fmt.Errorf("%w: device state already released", kernels.ErrInvalidParams)
		}
		ks, _, err := b.reg.backward(elemSize[T](), p)
		if err != nil {
			return err
		}
		if err := ks.computes(p); err != nil {
			return err
		}
		bh, g := p.B*p.H, p.H/p.KVHeads()
		qd, kd := p.Nq*p.D, p.Nk*p.D
		tq, tk, tv := staged[T]{host: q, per: qd}, staged[T]{host: k, per: kd, group: g}, staged[T]{host: v, per: kd, group: g}
		to, tl, tdo := staged[T]{host: o, per: qd}, staged[T]{host: lse, per: p.Nq}, staged[T]{host: do, per: qd}
		tdelta := staged[T]{per: p.Nq} // work space, never copied
		tdq, tdk, tdv := staged[T]{host: dq, per: qd}, staged[T]{host: dk, per: kd, group: g}, staged[T]{host: dv, per: kd, group: g}
		tdlse := staged[T]{host: dlse, per: p.Nq}
		in := []*staged[T]{&tdo}
		if st != nil {
			tq.whole, tk.whole, tv.whole, to.whole, tl.whole = st.q, st.k, st.v, st.o, st.lse
		} else {
			in = []*staged[T]{&tq, &tk, &tv, &to, &tl, &tdo}
		}
		if dlse != nil {
			in = append(in, &tdlse)
		}
		out := []*staged[T]{&tdq, &tdk, &tdv}
		slotted := append(append(append([]*staged[T](nil), in...), &tdelta), out...)
		hb := headBytes(append(append([]*staged[T](nil), in...), out...))
		perGroup, err := backwardScratchBytes[T](b, chunkParams(p, g))
		if err != nil {
			return err
		}
		hc := groupHeads(p, capScratch(b.xfer.chunkHeads(bh, hb), perGroup/int64(g), hb))
		var bias biasArgs[T]
		biasParts := bias.parts(p)
		if bias.wantsGrad() {
			// dBias sums over every pair that shares a bias slice in one
			// kernel, in a fixed order: the whole call is one chunk.
			hc = bh
		}
		sb, err := backwardScratchBytes[T](b, chunkParams(p, hc))
		if err != nil {
			return err
		}
		var scratch [slots]cu.DevicePtr
		var aux auxArgs
		parts := append([]part{{&scratch[0], sb}, {&scratch[1], sb}, aux.part(p)}, biasParts...)
		for _, t := range slotted {
			parts = append(parts, t.slotParts(hc)...)
		}
		if err := b.xfer.workspace(parts...); err != nil {
			return err
		}
		if err := errors.Join(aux.upload(), bias.upload()); err != nil {
			return err
		}
		err = pipeline(&b.xfer, bh, hc, in, out, func(c chunk, s cu.Stream) error {
			var dlseAt cu.DevicePtr
			if dlse != nil {
				dlseAt = tdlse.dev(c)
			}
			buf := bwdBuffers{q: tq.dev(c), k: tk.dev(c), v: tv.dev(c), o: to.dev(c), lse: tl.dev(c),
				do: tdo.dev(c), delta: tdelta.dev(c), dq: tdq.dev(c), dk: tdk.dev(c), dv: tdv.dev(c), scratch: scratch[c.slot],
				vars: aux.at(p, c, dlseAt)}
			bias.set(&buf.vars)
			return enqueueBackward[T](b, chunkParams(p, c.n), buf, s)
		})
		if err != nil {
			return err
		}
		return bias.download()
	})
}

// backwardScratchBytes is the device memory, beyond bwdBuffers' tensors, that
// enqueueBackward needs for element type T and problem p.
func backwardScratchBytes[T kernels.Float](b *Backend, p kernels.Params) (int64, error) {
	ks, _, err := b.reg.backward(elemSize[T](), p)
	if err != nil {
		return 0, err
	}
	return ks.scratchBytes(p), nil
}

// enqueueBackward enqueues on stream the backward kernels for element type
// T: buf's q, k, v, o, lse and do must hold the inputs, and dq, dk and dv
// receive the gradients once the stream reaches that point; delta and
// scratch are work space. In TF32, BF16 and FP16 mode dO is rounded in
// place to the storage precision (so that D = rowsum(dO∘O) uses the dO the
// products see), and so are q, k and v where the CUDA-core backward serves
// the head dimension; rounding is idempotent, and the forward rounds the
// same way. Where the tensor cores serve the backward, dO's rounding and D
// are one pass (flash_bwd_dot_do_o_round; for the Hopper backward, which
// rounds dO into its images, _rounded, which leaves dO unwritten and D
// the same bits; or, where ks is a deltaFuser that fuses D for p, the
// pass of ks.launch that writes dO's image); the CUDA-core backward keeps D
// in the fma chain of its own dP (round.cuh says why). FP32's 3xTF32
// backward takes D from the same pass, of split products and with dO
// unrounded (round.cuh's do_o_fma).
func enqueueBackward[T kernels.Float](b *Backend, p kernels.Params, buf bwdBuffers, stream cu.Stream) error {
	elem := elemSize[T]()
	ks, c, err := b.reg.backward(elem, p)
	if err != nil {
		return err
	}
	roundedOperands := elem == 4 && b.prec != FP32
	splitProducts := elem == 4 && b.prec == FP32 && c.kind == kindWGMMA
	f, fuser := ks.(deltaFuser)
	switch {
	case fuser && roundedOperands && f.fusesDelta(p, buf):
		// D comes from the pass that writes dO's image, in ks.launch.
	case (roundedOperands && !c.rounded) || splitProducts:
		dot := b.reg.dotDoORound
		if roundedOperands && c.kind == kindWGMMA {
			dot = b.reg.dotDoORounded
		}
		if err := launchDotDoORound(dot, p, buf, stream); err != nil {
			return fmt.Errorf("cudakernels: backward launch: %w", err)
		}
	default:
		if roundedOperands {
			for _, r := range []struct {
				ptr cu.DevicePtr
				n   int
			}{{buf.do, p.QLen()}, {buf.q, p.QLen()}, {buf.k, p.KLen()}, {buf.v, p.KLen()}} {
				if err := launchRound(b.reg.round, r.ptr, r.n, stream); err != nil {
					return fmt.Errorf("cudakernels: rounding launch: %w", err)
				}
			}
		}
		if err := launchDotDoO(b.reg.dotDoO[elem], p, buf, stream); err != nil {
			return fmt.Errorf("cudakernels: backward launch: %w", err)
		}
	}
	if err := ks.launch(p, buf, stream); err != nil {
		return fmt.Errorf("cudakernels: backward launch: %w", err)
	}
	return nil
}
