//go:build !flashgpu

package op

import (
	"fmt"

	"github.com/gorgonia-flash/flashattention/kernels"
)

// sharedGPU fails: this build has no GPU kernels.
func sharedGPU(kernels.Precision) (kernels.Backend, error) { return nil, noGPUBuild() }

// CloseGPU closes the GPU backends that Attention opened. This build opens
// none, so it does nothing.
func CloseGPU() error { return nil }

// gpuPresent fails: this build has no GPU kernels.
func gpuPresent() error { return noGPUBuild() }

func noGPUBuild() error {
	return fmt.Errorf("%w: this binary was built without the flashgpu build tag (go build -tags flashgpu)", ErrNoGPU)
}
