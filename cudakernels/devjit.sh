#!/usr/bin/env bash
# devjit.sh OUTDIR — what a user's build runs against what the published
# figures ran, in one device call: bench.test built with CUBIN=1 (devpack.sh:
# ptxas 12.4's machine code embedded) times BenchmarkKernelsGPU with its own
# modules and again with -kerneldir cudakernels/ptx, the committed PTX that
# the driver compiles when a user's backend opens, alternated ROUNDS times
# (default 2). The first PTX load compiles every module (about 150 s on a
# fresh H100, 2026-12-06), so a warm-up run goes first; the driver's cache
# (CUDA_CACHE_MAXSIZE, devcommon.sh) serves the rest. BENCH is the
# -test.bench pattern (default: FP32, TF32 and BF16 at D 64 and 128, N 2048
# and 8192, non-causal). From the repository root, with .gpu/bins.tar.xz.
# Outputs OUTDIR/{cubin,jit}-<round>.txt for abmean-style comparison
# (kernel-ms per shape), and the driver's version on stdout.
set -uo pipefail
out="${1:?usage: devjit.sh OUTDIR}"
root="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=devcommon.sh
. "$root/cudakernels/devcommon.sh"
bench="${BENCH:-KernelsGPU/(fp32|bf16|tf32)/(fwd|bwd)/D(64|128)_N(2048|8192)_causal=false}"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
cd "$root/bench" || exit 1
b=$bins/bench.test
start=$SECONDS
"$b" -test.run '^$' -test.bench 'KernelsGPU/bf16/fwd/D64_N512_causal=false' -test.benchtime 1x \
	-kerneldir "$root/cudakernels/ptx" >"$out/warm.txt" 2>&1
echo "warm-up (the driver compiling the PTX) exit $? in $((SECONDS - start)) s"
for r in $(seq "${ROUNDS:-2}"); do
	"$b" -test.run '^$' -test.bench "$bench" -test.benchtime 1x >"$out/cubin-$r.txt" 2>&1
	echo "cubin-$r exit $? at ${SECONDS}s"
	"$b" -test.run '^$' -test.bench "$bench" -test.benchtime 1x -kerneldir "$root/cudakernels/ptx" >"$out/jit-$r.txt" 2>&1
	echo "jit-$r exit $? at ${SECONDS}s"
done
