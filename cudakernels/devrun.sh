#!/usr/bin/env bash
# devrun.sh OUTDIR — the batch run on the GPU machine: run the flashgpu tests
# (binary built beforehand with `go test -c -tags flashgpu -o
# .gpu/cudakernels.test`, its PTX generated on the development machine by
# gen.sh) against ptx/, run compute-sanitizer on small cases, and leave the
# logs in OUTDIR. Run from the repository root. Timings beside PyTorch's:
# bench/gpu_side_by_side.py.
set -uo pipefail
out="${1:?usage: devrun.sh OUTDIR}"
export LD_LIBRARY_PATH=/usr/local/nvidia/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi -L
cd cudakernels
export FLASHATTN_KERNEL_DIR=ptx
summary='^(--- FAIL|FAIL|ok|PASS|panic|Benchmark)|    --- FAIL|_test.go:[0-9]+:|TFLOP'
timeout "${TEST_TIMEOUT:-300}" ../.gpu/cudakernels.test -test.v -test.run "${TEST_RUN:-.}" 2>&1 \
	| tee "$out/test.log" | grep -E "$summary" | head -80
echo "test exit: ${PIPESTATUS[0]}"
for tool in memcheck racecheck; do
	timeout 120 compute-sanitizer --tool "$tool" --error-exitcode 1 ../.gpu/cudakernels.test \
		-test.run "${SANITIZE_RUN:-TestHeadDims/(fp32|tf32|bf16)/B1H2_Nq70_Nk255_D(96|256)|TestConformanceBF16/sm[89]0/rows-without-keys}" >"$out/sanitize-$tool.log" 2>&1
	echo "sanitizer $tool exit: $? ($(tail -n 3 "$out/sanitize-$tool.log" | tr '\n' ' '))"
done
