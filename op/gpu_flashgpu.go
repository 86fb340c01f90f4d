//go:build flashgpu

package op

import (
	"errors"
	"fmt"
	"sync"

	"github.com/gorgonia-flash/flashattention/cudakernels"
	"github.com/gorgonia-flash/flashattention/kernels"
)

// gpus are the GPU backends Attention opened, one per precision on device
// 0, shared by every node that asked for the GPU.
var gpus struct {
	mu   sync.Mutex
	open map[kernels.Precision]*cudakernels.Backend
}

// sharedGPU returns the shared backend for prec, opening it on first use.
func sharedGPU(prec kernels.Precision) (kernels.Backend, error) {
	gpus.mu.Lock()
	defer gpus.mu.Unlock()
	if b := gpus.open[prec]; b != nil {
		return b, nil
	}
	b, err := cudakernels.NewBackend(cudakernels.WithPrecision(prec))
	if errors.Is(err, cudakernels.ErrNoDevice) {
		return nil, fmt.Errorf("%w: %w", ErrNoGPU, err)
	}
	if err != nil {
		return nil, err
	}
	if gpus.open == nil {
		gpus.open = map[kernels.Precision]*cudakernels.Backend{}
	}
	gpus.open[prec] = b
	return b, nil
}

// CloseGPU closes the GPU backends that Attention opened (WithDevice(GPU) or
// FLASHATTN_DEVICE=gpu), freeing all their device memory, including the
// state nodes keep between forward and backward. Nodes built before then
// return an error when run; nodes built after open a fresh backend. Backends
// passed with WithBackend belong to the caller and are not touched.
func CloseGPU() error {
	gpus.mu.Lock()
	defer gpus.mu.Unlock()
	var errs []error
	for prec, b := range gpus.open {
		errs = append(errs, b.Close())
		delete(gpus.open, prec)
	}
	return errors.Join(errs...)
}

// gpuPresent returns nil when CUDA device 0 exists, else an error wrapping
// ErrNoGPU.
func gpuPresent() error {
	n, err := cudakernels.Devices()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrNoGPU, err)
	}
	if n == 0 {
		return fmt.Errorf("%w: no CUDA device", ErrNoGPU)
	}
	return nil
}
