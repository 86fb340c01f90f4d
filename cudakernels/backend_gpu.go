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
	simt   map[int]map[int]*simtKernels // element size → padded D → kernels
	dotDoO map[int]cu.Function          // element size → D = rowsum(dO∘O)
	// Tensor-core forward of the backend's precision (BF16, FP16) by padded
	// D, or the error that kernel gave when loading.
	mmaFwd    map[int]*fwdKernel
	mmaFwdErr map[int]error
	// Rounds a float32 device buffer in place to the backend's storage
	// precision (BF16, FP16): the backward's operands, rounded as the
	// forward rounded them. Nil for FP32.
	roundFn *cu.Function
}

var _ kernels.Backend = (*Backend)(nil)

type config struct {
	prec      Precision
	device    int
	kernelDir string
}

// An Option configures NewBackend.
type Option func(*config)

// WithPrecision selects the arithmetic of Forward32 and Backward32 (default
// FP32).
func WithPrecision(p Precision) Option { return func(c *config) { c.prec = p } }

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
	case FP32, BF16, FP16:
	default:
		return nil, fmt.Errorf("%w: precision %v has no kernels yet", ErrUnsupported, cfg.prec)
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
	if major < 8 {
		return fmt.Errorf("%w: device %d has compute capability %d.x, kernels need 8.0 or newer", ErrUnsupported, cfg.device, major)
	}
	maxSmem, err := maxOptinSmem(dev)
	if err != nil {
		return err
	}
	image, err := kernelImage(cfg.kernelDir, major)
	if err != nil {
		return err
	}
	if b.ctx, err = dev.MakeContext(cu.SchedAuto); err != nil {
		return fmt.Errorf("cudakernels: creating a context on device %d: %w", cfg.device, err)
	}
	defer func() {
		if err != nil {
			_ = b.release()
		}
	}()
	if b.mod, err = cu.LoadData(image); err != nil {
		return fmt.Errorf("cudakernels: loading the kernel module: %w", err)
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
	if b.prec == BF16 || b.prec == FP16 {
		name := "flash_round_" + b.prec.String()
		fn, err := b.mod.Function(name)
		if err != nil {
			return fmt.Errorf("cudakernels: kernel %s: %w", name, err)
		}
		b.roundFn = &fn
		b.mmaFwd, b.mmaFwdErr = map[int]*fwdKernel{}, map[int]error{}
		for _, dp := range headDims {
			if dp > mmaVerifiedDim {
				b.mmaFwdErr[dp] = fmt.Errorf("%w: the %v forward for head dimensions above %d has not been verified on a device yet", ErrUnsupported, b.prec, mmaVerifiedDim)
				continue
			}
			f, err := loadMmaForward(b.mod, b.prec, dp, maxSmem)
			switch {
			case errors.Is(err, ErrUnsupported):
				b.mmaFwdErr[dp] = err // only calls with this D fail
			case err != nil:
				return err
			default:
				b.mmaFwd[dp] = f
			}
		}
	}
	return nil
}

// kernelImage returns the PTX for a device of compute capability major.x.
func kernelImage(dir string, major int) (string, error) {
	name := "flash_sm80.ptx"
	if major >= 9 {
		name = "flash_sm90.ptx"
	}
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

// release frees the module and the context; it runs on the worker's thread.
func (b *Backend) release() error {
	var errs []error
	if b.mod != (cu.Module{}) {
		errs = append(errs, b.mod.Unload())
		b.mod = cu.Module{}
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
// cores for FP32, on tensor cores for BF16 and FP16.
func (b *Backend) Forward32(p kernels.Params, q, k, v, o, lse []float32) error {
	return forward(b, p, q, k, v, o, lse)
}

// Forward64 implements kernels.Backend in float64 on CUDA cores.
func (b *Backend) Forward64(p kernels.Params, q, k, v, o, lse []float64) error {
	return forward(b, p, q, k, v, o, lse)
}

// Backward32 implements kernels.Backend on CUDA cores in float32. In BF16
// and FP16 mode it first rounds its device copies of Q, K, V and dO to the
// storage precision, exactly as the tensor-core forward rounded its
// operands, so the gradients are those of the function that forward
// computed; O (for D = rowsum(dO∘O)) and LSE are used as given. There is no
// tensor-core backward yet.
func (b *Backend) Backward32(p kernels.Params, q, k, v, o, lse, do, dq, dk, dv []float32) error {
	return backward(b, p, q, k, v, o, lse, do, dq, dk, dv)
}

// Backward64 implements kernels.Backend in float64 on CUDA cores.
func (b *Backend) Backward64(p kernels.Params, q, k, v, o, lse, do, dq, dk, dv []float64) error {
	return backward(b, p, q, k, v, o, lse, do, dq, dk, dv)
}

func sizeOf[T kernels.Float](s []T) int64 { return int64(len(s)) * int64(unsafe.Sizeof(s[0])) }

func upload[T kernels.Float](dst cu.DevicePtr, src []T) error {
	return cu.MemcpyHtoD(dst, unsafe.Pointer(&src[0]), sizeOf(src))
}

func download[T kernels.Float](dst []T, src cu.DevicePtr) error {
	return cu.MemcpyDtoH(unsafe.Pointer(&dst[0]), src, sizeOf(dst))
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
// d: the tensor-core one for float32 in BF16 and FP16 mode, else CUDA cores.
func forwardFor[T kernels.Float](b *Backend, d int) (*fwdKernel, error) {
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

func forward[T kernels.Float](b *Backend, p kernels.Params, q, k, v, o, lse []T) error {
	if err := kernels.CheckForward(p, q, k, v, o, lse); err != nil {
		return err
	}
	if _, err := paddedDim(p.D); err != nil {
		return err
	}
	return b.run(func() (err error) {
		f, err := forwardFor[T](b, p.D)
		if err != nil {
			return err
		}
		a, err := newArena(sizeOf(q), sizeOf(k), sizeOf(v), sizeOf(o), sizeOf(lse), f.scratchBytes(p))
		if err != nil {
			return err
		}
		defer func() { err = errors.Join(err, a.free()) }()
		buf := fwdBuffers{q: a.parts[0], k: a.parts[1], v: a.parts[2], o: a.parts[3], lse: a.parts[4], scratch: a.parts[5]}
		for _, c := range []struct {
			dst cu.DevicePtr
			src []T
		}{{buf.q, q}, {buf.k, k}, {buf.v, v}} {
			if err := upload(c.dst, c.src); err != nil {
				return fmt.Errorf("cudakernels: copy to device: %w", err)
			}
		}
		if err := f.launch(p, buf, cu.Stream{}); err != nil {
			return fmt.Errorf("cudakernels: forward launch: %w", err)
		}
		if err := cu.Synchronize(); err != nil {
			return fmt.Errorf("cudakernels: forward kernel: %w", err)
		}
		if err := download(o, buf.o); err != nil {
			return fmt.Errorf("cudakernels: copy from device: %w", err)
		}
		return download(lse, buf.lse)
	})
}

func backward[T kernels.Float](b *Backend, p kernels.Params, q, k, v, o, lse, do, dq, dk, dv []T) error {
	if err := kernels.CheckBackward(p, q, k, v, o, lse, do, dq, dk, dv); err != nil {
		return err
	}
	if _, err := paddedDim(p.D); err != nil {
		return err
	}
	return b.run(func() (err error) {
		scratch, err := backwardScratchBytes[T](b, p)
		if err != nil {
			return err
		}
		a, err := newArena(sizeOf(q), sizeOf(k), sizeOf(v), sizeOf(o), sizeOf(lse), sizeOf(do),
			sizeOf(lse), sizeOf(dq), sizeOf(dk), sizeOf(dv), scratch)
		if err != nil {
			return err
		}
		defer func() { err = errors.Join(err, a.free()) }()
		buf := bwdBuffers{q: a.parts[0], k: a.parts[1], v: a.parts[2], o: a.parts[3], lse: a.parts[4],
			do: a.parts[5], delta: a.parts[6], dq: a.parts[7], dk: a.parts[8], dv: a.parts[9], scratch: a.parts[10]}
		for _, c := range []struct {
			dst cu.DevicePtr
			src []T
		}{{buf.q, q}, {buf.k, k}, {buf.v, v}, {buf.o, o}, {buf.lse, lse}, {buf.do, do}} {
			if err := upload(c.dst, c.src); err != nil {
				return fmt.Errorf("cudakernels: copy to device: %w", err)
			}
		}
		if err := enqueueBackward[T](b, p, buf, cu.Stream{}); err != nil {
			return err
		}
		if err := cu.Synchronize(); err != nil {
			return fmt.Errorf("cudakernels: backward kernels: %w", err)
		}
		for _, c := range []struct {
			dst []T
			src cu.DevicePtr
		}{{dq, buf.dq}, {dk, buf.dk}, {dv, buf.dv}} {
			if err := download(c.dst, c.src); err != nil {
				return fmt.Errorf("cudakernels: copy from device: %w", err)
			}
		}
		return nil
	})
}
