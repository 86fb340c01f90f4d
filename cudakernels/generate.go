package cudakernels

// The PTX under ptx/ and kernels.manifest are generated from csrc/ by gen.sh,
// which needs nvcc. TestGeneratedKernelsUpToDate fails when they are stale.
//go:generate bash gen.sh
