//go:build flashgpu

package cudakernels

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"unsafe"

	"gorgonia.org/cu"

	"github.com/gorgonia-flash/flashattention/kernels"
)

// Backend computes attention on one CUDA device. It implements
// kernels.Backend; its methods may be called from any goroutine (they are
// serialised on the thread that owns the device context). Close releases the
// device.
type Backend struct {
	prec Precision
	name string

	mu     sync.RWMutex // held for writing only by Close
	closed bool
	w      *worker

	// Owned by the worker's thread.
	ctx    cu.CUContext
	mod    cu.Module
	hopper cu.Module                    // the sm_90a module (FamilySM90), loaded on compute capability 9.0 only
	simt   map[int]map[int]*simtKernels // element size → padded D → kernels
	dotDoO map[int]cu.Function          // element size → D = rowsum(dO∘O)
	// Tensor-core forward of the backend's precision (TF32, BF16, FP16) by
	// padded D, of the family chosen for that D, or the error that kernel
	// gave when loading.
	mmaFwd    map[int]forwardKernel
	mmaFwdErr map[int]error
	// Tensor-core backward of the backend's precision by padded D, of the
	// family chosen for that D (absent where none is built; that D falls
	// back to CUDA cores on rounded operands).
	mmaBwd map[int]backwardKernel
	// Rounds a float32 device buffer in place to the backend's operand
	// precision (TF32, BF16, FP16): the CUDA-core backward's operands,
	// rounded as the forward rounded them. Nil for FP32.
	roundFn *cu.Function

	// The copy pipeline's resources (resident_gpu.go), on the worker's
	// thread: streams and events per slot, page-locked staging and a
	// device workspace, both kept between calls and grown to the largest
	// call's need.
	streams     [slots]cu.Stream
	events      [slots]cu.Event
	pinned      unsafe.Pointer
	pinnedBytes int64
	work        cu.DevicePtr
	workBytes   int64
	// chunkOverride fixes the (batch, head) pairs per chunk, and
	// coresOverride the cores that copy, when positive; tests and
	// benchmarks use them to compare settings.
	chunkOverride, coresOverride int
}

var _ kernels.Backend = (*Backend)(nil)

type config struct {
	prec      Precision
	family    Family
	device    int
	kernelDir string
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

// WithDevice selects the CUDA device by ordinal (default 0).
func WithDevice(ordinal int) Option { return func(c *config) { c.device = ordinal } }

// WithKernelDir loads the PTX from dir (files named as under ptx/) instead of
// the copy compiled into the binary. It is meant for testing kernels freshly
// built by gen.sh before they are committed.
func WithKernelDir(dir string) Option { return func(c *config) { c.kernelDir = dir } }

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

// open runs on the worker's thread: it creates the context there (which makes
// it current) and loads the module.
func (b *Backend) open(cfg config) (err error) {
	dev, err := cu.GetDevice(cfg.device)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrNoDevice, err)
	}
	major, err := dev.Attribute(cu.ComputeCapabilityMajor)
	if err != nil {
		return fmt.Errorf("cudakernels: device %d: %w", cfg.device, err)
	}
	minor, err := dev.Attribute(cu.ComputeCapabilityMinor)
	if err != nil {
		return fmt.Errorf("cudakernels: device %d: %w", cfg.device, err)
	}
	if major < 8 {
		return fmt.Errorf("%w: device %d has compute capability %d.x, kernels need 8.0 or newer", ErrUnsupported, cfg.device, major)
	}
	// sm_90a code runs on compute capability 9.0 and nothing else.
	hopper := major == 9 && minor == 0
	if cfg.family == FamilySM90 && !hopper {
		return fmt.Errorf("%w: kernel family sm90 needs compute capability 9.0, device %d has %d.%d", ErrUnsupported, cfg.device, major, minor)
	}
	useHopper := hopper && cfg.family != FamilySM80 && cfg.prec != FP32
	maxSmem, err := maxOptinSmem(dev)
	if err != nil {
		return err
	}
	imageName := "flash_sm80.ptx"
	if major >= 9 {
		imageName = "flash_sm90.ptx"
	}
	image, err := kernelImage(cfg.kernelDir, imageName)
	if err != nil {
		return err
	}
	var hopperImage string
	if useHopper {
		if hopperImage, err = kernelImage(cfg.kernelDir, "flash_sm90a.ptx"); err != nil {
			return err
		}
	}
	if b.ctx, err = dev.MakeContext(cu.SchedAuto); err != nil {
		return fmt.Errorf("cudakernels: creating a context on device %d: %w", cfg.device, err)
	}
	defer func() {
		if err != nil {
			_ = b.release()
		}
	}()
	for i := range b.streams {
		// Non-blocking: the legacy default stream must not serialise the
		// two slots.
		if b.streams[i], err = cu.MakeStream(cu.NonBlocking); err != nil {
			return fmt.Errorf("cudakernels: creating a stream: %w", err)
		}
		if b.events[i], err = cu.MakeEvent(cu.DisableTiming); err != nil {
			return fmt.Errorf("cudakernels: creating an event: %w", err)
		}
	}
	if b.mod, err = cu.LoadData(image); err != nil {
		return fmt.Errorf("cudakernels: loading the kernel module: %w", err)
	}
	if useHopper {
		if b.hopper, err = cu.LoadData(hopperImage); err != nil {
			return fmt.Errorf("cudakernels: loading the sm_90a kernel module: %w", err)
		}
	}
	b.simt = map[int]map[int]*simtKernels{}
	b.dotDoO = map[int]cu.Function{}
	for _, elem := range []int{4, 8} {
		b.simt[elem] = map[int]*simtKernels{}
		for _, dp := range headDims {
			if b.simt[elem][dp], err = loadSimt(b.mod, elem, dp, maxSmem); err != nil {
				return err
			}
		}
		name := "flash_bwd_dot_do_o_" + typeName(elem)
		if b.dotDoO[elem], err = b.mod.Function(name); err != nil {
			return fmt.Errorf("cudakernels: kernel %s: %w", name, err)
		}
	}
	if b.prec != FP32 {
		name := "flash_round_" + b.prec.String()
		fn, err := b.mod.Function(name)
		if err != nil {
			return fmt.Errorf("cudakernels: kernel %s: %w", name, err)
		}
		b.roundFn = &fn
		b.mmaFwd, b.mmaFwdErr = map[int]forwardKernel{}, map[int]error{}
		for _, dp := range headDims {
			var f forwardKernel
			if useHopper && wgmmaBuilt(b.prec, dp) {
				f, err = loadWgmmaForward(b.hopper, b.prec, dp, maxSmem)
			} else {
				f, err = loadMmaForward(b.mod, b.prec, dp, maxSmem)
			}
			switch {
			case errors.Is(err, ErrUnsupported):
				b.mmaFwdErr[dp] = err // only calls with this D fail
			case err != nil:
				return err
			default:
				b.mmaFwd[dp] = f
			}
		}
		b.mmaBwd = map[int]backwardKernel{}
		if b.prec != TF32 { // no mma.sync TF32 backward: CUDA cores on rounded operands
			if b.mmaBwd, err = loadMmaBackward(b.mod, b.prec, maxSmem); err != nil {
				return err
			}
		}
		for _, dp := range headDims {
			if !useHopper || !wgmmaBwdBuilt(b.prec, dp) {
				continue
			}
			w, err := loadWgmmaBackward(b.hopper, b.prec, dp, maxSmem)
			switch {
			case errors.Is(err, ErrUnsupported): // too large for this device: the fallback serves dp
			case err != nil:
				return err
			default:
				b.mmaBwd[dp] = w
			}
		}
	}
	return nil
}

// kernelImage returns the PTX file name, embedded or from dir.
func kernelImage(dir, name string) (string, error) {
	if dir == "" {
		b, err := embeddedPTX.ReadFile("ptx/" + name)
		if err != nil {
			return "", fmt.Errorf("cudakernels: embedded kernels: %w", err)
		}
		return string(b), nil
	}
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return "", fmt.Errorf("cudakernels: %w", err)
	}
	return string(b), nil
}

// release frees the pipeline's memory, streams and events, the module and
// the context; it runs on the worker's thread.
func (b *Backend) release() error {
	var errs []error
	if b.ctx != (cu.CUContext{}) {
		errs = append(errs, b.freeWork(), b.freePinned())
		for i := range b.streams {
			if b.events[i] != (cu.Event{}) {
				errs = append(errs, cu.DestroyEvent(&b.events[i]))
			}
			if b.streams[i] != (cu.Stream{}) {
				errs = append(errs, b.streams[i].Destroy())
			}
		}
	}
	for _, m := range []*cu.Module{&b.mod, &b.hopper} {
		if *m != (cu.Module{}) {
			errs = append(errs, m.Unload())
			*m = cu.Module{}
		}
	}
	if b.ctx != (cu.CUContext{}) {
		errs = append(errs, b.ctx.Destroy())
	}
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
func (b *Backend) Backward32(p kernels.Params, q, k, v, o, lse, do, dq, dk, dv []float32) error {
	return backward(b, p, nil, q, k, v, o, lse, do, dq, dk, dv)
}

// Backward64 implements kernels.Backend in float64 on CUDA cores.
func (b *Backend) Backward64(p kernels.Params, q, k, v, o, lse, do, dq, dk, dv []float64) error {
	return backward(b, p, nil, q, k, v, o, lse, do, dq, dk, dv)
}

// kernelsFor picks the CUDA-core kernels for element type T and head
// dimension d.
func kernelsFor[T kernels.Float](b *Backend, d int) (*simtKernels, int, error) {
	dp, err := paddedDim(d)
	if err != nil {
		return nil, 0, err
	}
	var zero T
	elem := int(unsafe.Sizeof(zero))
	return b.simt[elem][dp], elem, nil
}

// forwardFor picks the forward kernel for element type T and head dimension
// d: the tensor-core one for float32 in TF32, BF16 and FP16 mode (of the
// family open chose), else CUDA cores.
func forwardFor[T kernels.Float](b *Backend, d int) (forwardKernel, error) {
	ks, elem, err := kernelsFor[T](b, d)
	if err != nil {
		return nil, err
	}
	if elem == 8 || b.mmaFwd == nil {
		return &ks.fwd, nil
	}
	dp, _ := paddedDim(d)
	if err := b.mmaFwdErr[dp]; err != nil {
		return nil, err
	}
	return b.mmaFwd[dp], nil
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
	var st *deviceState
	err := b.run(func() (err error) {
		f, err := forwardFor[T](b, p.D)
		if err != nil {
			return err
		}
		var zero T
		elem := int64(unsafe.Sizeof(zero))
		bh := p.B * p.H
		per := []int{p.Nq * p.D, p.Nk * p.D, p.Nk * p.D, p.Nq * p.D, p.Nq} // q, k, v, o, lse
		var headBytes int64
		for _, n := range per {
			headBytes += int64(n) * elem
		}
		hc := b.chunkHeads(bh, headBytes)
		sb := f.scratchBytes(chunkParams(p, hc))
		dev := make([]func(chunk) cu.DevicePtr, len(per))
		var scratch []cu.DevicePtr
		if keep {
			sizes := make([]int64, len(per))
			for i, n := range per {
				sizes[i] = int64(bh) * int64(n) * elem
			}
			a, err := newArena(sizes...)
			if err != nil {
				return err
			}
			st = &deviceState{b: b, p: p, elem: int(elem), a: a}
			defer func() {
				if err != nil {
					err = errors.Join(err, a.free())
					st = nil
				}
			}()
			for i, n := range per {
				dev[i] = at[T](a.parts[i], n)
			}
			if scratch, err = b.workspace(sb, sb); err != nil {
				return err
			}
		} else {
			ws, err := b.workspace(append(slotSizes(hc, elem, per...), sb, sb)...)
			if err != nil {
				return err
			}
			for i := range per {
				dev[i] = perSlot(ws[2*i : 2*i+2])
			}
			scratch = ws[2*len(per):]
		}
		in := []staged[T]{{q, per[0], dev[0]}, {k, per[1], dev[1]}, {v, per[2], dev[2]}}
		out := []staged[T]{{o, per[3], dev[3]}, {lse, per[4], dev[4]}}
		return pipeline(b, bh, hc, in, out, func(c chunk, s cu.Stream) error {
			buf := fwdBuffers{q: dev[0](c), k: dev[1](c), v: dev[2](c), o: dev[3](c), lse: dev[4](c), scratch: scratch[c.slot]}
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
func backward[T kernels.Float](b *Backend, p kernels.Params, st *deviceState, q, k, v, o, lse, do, dq, dk, dv []T) error {
	if st == nil {
		if err := kernels.CheckBackward(p, q, k, v, o, lse, do, dq, dk, dv); err != nil {
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
		var zero T
		elem := int64(unsafe.Sizeof(zero))
		bh := p.B * p.H
		qd, kd := p.Nq*p.D, p.Nk*p.D
		// Tensors, in bwdBuffers order up to dv: q, k, v, o, lse, do, delta,
		// dq, dk, dv.
		per := []int{qd, kd, kd, qd, p.Nq, qd, p.Nq, qd, kd, kd}
		host := [][]T{q, k, v, o, lse, do, nil, dq, dk, dv}
		first := 0 // the first tensor that passes through slot buffers
		if st != nil {
			first = 5
		}
		var headBytes int64
		for i := first; i < len(per); i++ {
			if host[i] != nil {
				headBytes += int64(per[i]) * elem
			}
		}
		hc := b.chunkHeads(bh, headBytes)
		sb, err := backwardScratchBytes[T](b, chunkParams(p, hc))
		if err != nil {
			return err
		}
		ws, err := b.workspace(append(slotSizes(hc, elem, per[first:]...), sb, sb)...)
		if err != nil {
			return err
		}
		dev := make([]func(chunk) cu.DevicePtr, len(per))
		for i := range per {
			if i < first {
				dev[i] = at[T](st.a.parts[i], per[i])
			} else {
				j := 2 * (i - first)
				dev[i] = perSlot(ws[j : j+2])
			}
		}
		scratch := ws[2*(len(per)-first):]
		var in, out []staged[T]
		for i := first; i < len(per); i++ {
			switch {
			case i == 6: // delta is work space
			case i < 7:
				in = append(in, staged[T]{host[i], per[i], dev[i]})
			default:
				out = append(out, staged[T]{host[i], per[i], dev[i]})
			}
		}
		return pipeline(b, bh, hc, in, out, func(c chunk, s cu.Stream) error {
			buf := bwdBuffers{q: dev[0](c), k: dev[1](c), v: dev[2](c), o: dev[3](c), lse: dev[4](c),
				do: dev[5](c), delta: dev[6](c), dq: dev[7](c), dk: dev[8](c), dv: dev[9](c), scratch: scratch[c.slot]}
			return enqueueBackward[T](b, chunkParams(p, c.n), buf, s)
		})
	})
}
