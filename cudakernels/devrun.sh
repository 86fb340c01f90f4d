#!/usr/bin/env bash
# devrun.sh OUTDIR — the test batch on the GPU machine, run from the
# repository root against the PTX under cudakernels/ptx (FLASHATTN_KERNEL_DIR,
# unless set; set it empty for the kernels the binaries embed)
# with the binaries devpack.sh built (.gpu/bins.tar.xz, or .gpu/*.test).
# Timings beside PyTorch's are the bench/*_side_by_side.py scripts' business,
# never run beside this batch.
#
#  0. First, alone, the quick checks (QUICK, a -test.run pattern of
#     package cudakernels; empty skips them; with PART, in part 1 only):
#     the tests whose verdict decides what to do next, printed before the
#     long batch starts, so that a call cut short still reports them.
#     Default: the orientation probe, the fused backward against the two
#     kernels, TestHeadDims, and the FP32 suite's golden cases (the
#     default backend: on Hopper the 3xTF32 kernels for plain D ≤ 64).
#  1. In parallel, one process each: TestConformanceFP32, its run on the
#     CUDA cores alone (TestConformanceFP32CUDACores), and
#     TestConformance{TF32,BF16,FP16}, each running every kernel set (sm80,
#     sm90, sm90-rowblock, sm90-ws2) in turn, the BF16 and FP16 sm90 suites
#     again on the fused backward (FLASHATTN_DETERMINISTIC=0), the rest of
#     package cudakernels' GPU tests, op's GPU tests, and compute-sanitizer
#     memcheck and racecheck on small cases (SANITIZE_RUN). The float64
#     references and naive baselines are nearly all of the host's work and
#     keep its cores busy while the GPU is mostly idle, so the processes
#     share it: about 320 s for the ten processes of 2026-12-04, where one
#     after another took over 900. A precision's sets share their
#     references (conformance.KeepReferences, since 2026-12-05), which is
#     why a precision is one process: with one process per set (22 in
#     all) every suite passed 450 s unfinished on 2026-12-05.
#     The host emulation's tests (KernelsOnHost) are left to the
#     development machine: they need no GPU.
#  2. The tests that read the device's free memory, which other processes
#     move, one at a time: cudakernels' TestDeviceMemoryStable (in phase 1
#     it failed by the 48 MB the parallel suites moved, 2026-12-04) and
#     op's TestGPUTrainingLeavesNoMemory.
#
# The logs go into OUTDIR/logs.tar.xz (the device tool brings back at most
# 8 files) and a summary to stdout; the exit status is 1 if anything
# failed or timed out. Environment: TEST_TIMEOUT (seconds for each process
# of phase 1, default 480), SHORT=1 (-test.short everywhere), SANITIZE_RUN,
# PART (1, 2 or 3: a third of the batch per device call, below), QUICK.
set -uo pipefail
out="${1:?usage: devrun.sh OUTDIR}"
root="$(cd "$(dirname "$0")/.." && pwd)"
# FLASHATTN_KERNEL_DIR set but empty: the kernels the binaries embed
# (devpack.sh CUBIN=1).
export FLASHATTN_KERNEL_DIR="${FLASHATTN_KERNEL_DIR-$root/cudakernels/ptx}"
# shellcheck source=devcommon.sh
. "$root/cudakernels/devcommon.sh"
short=()
[[ "${SHORT:-0}" == 1 ]] && short=(-test.short)
for tool in nvidia-smi compute-sanitizer; do
	command -v "$tool" >/dev/null || { echo "devrun: $tool not found" >&2; exit 1; }
done
nvidia-smi -L
git -C "$root" log -1 --format='HEAD %h %s' 2>/dev/null

failed=0
# run NAME DIR TIMEOUT COMMAND... runs COMMAND in DIR with its output in
# NAME.log and its exit status in the summary.
run() {
	local name="$1" dir="$2" limit="$3"
	shift 3
	(cd "$dir" && timeout "$limit" "$@") >"$logs/$name.log" 2>&1
	local rc=$?
	echo "$name exit $rc" >>"$logs/summary.txt"
}

limit="${TEST_TIMEOUT:-480}"
# PART splits the batch between three device calls, should one call not
# hold it: PART=1: the quick checks, FP32, TF32 and the other tests;
# PART=2: BF16, its fused run; PART=3: FP16, its fused run, then phase 2.
# Unset: everything at once.
part="${PART:-all}"
in_part() { [[ "$part" == all || "$part" == "$1" ]]; }
precision_part() { case $1 in TF32) echo 1 ;; BF16) echo 2 ;; *) echo 3 ;; esac; }

quick="${QUICK-TestTF32ProductsIgnoreOperandOrder|TestFusedBackwardMatchesTwoKernels|TestHeadDims|TestConformanceFP32$/golden}"
in_part 1 || quick=
if [[ -n "$quick" ]]; then
	start=$SECONDS
	(cd "$root/cudakernels" && timeout 240 "$bins/cudakernels.test" -test.v -test.run "$quick") >"$logs/quick.log" 2>&1
	rc=$?
	echo "quick checks exit $rc in $((SECONDS - start))s:"
	grep -E -- '^--- (PASS|FAIL|SKIP)|^    --- FAIL|^panic' "$logs/quick.log" | head -n 40
	[[ "$rc" == 0 ]] || failed=1
fi
if in_part 1; then
	run conformance-FP32 "$root/cudakernels" "$limit" "$bins/cudakernels.test" -test.v "${short[@]}" \
		-test.run 'TestConformanceFP32$' &
	run conformance-FP32-cores "$root/cudakernels" "$limit" "$bins/cudakernels.test" -test.v "${short[@]}" \
		-test.run 'TestConformanceFP32CUDACores$' &
fi
# One process per tensor-core precision, its kernel sets (testKernelSets)
# in turn, sharing their references. TF32 has no two-consumer kernel (its
# set skips).
for prec in TF32 BF16 FP16; do
	in_part "$(precision_part "$prec")" || continue
	run "conformance-$prec" "$root/cudakernels" "$limit" "$bins/cudakernels.test" -test.v "${short[@]}" \
		-test.run "TestConformance$prec\$" &
done
# The fused Hopper backward (WithDeterministic(false)) through the whole
# suite, its determinism tests skipped (conformance.NonDeterministic: its
# dQ sums vary in order from call to call), so its exit status is its
# verdict.
for prec in BF16 FP16; do
	in_part "$(precision_part "$prec")" || continue
	run "conformance-$prec-fused" "$root/cudakernels" "$limit" env FLASHATTN_DETERMINISTIC=0 "$bins/cudakernels.test" \
		-test.v "${short[@]}" -test.run "TestConformance$prec\$/^sm90\$" &
done
in_part 1 && run cudakernels-other "$root/cudakernels" "$limit" "$bins/cudakernels.test" -test.v "${short[@]}" \
	-test.skip "TestConformance(FP32|FP32CUDACores|TF32|BF16|FP16)\$|TestDeviceMemoryStable|KernelsOnHost${quick:+|$quick}" &
in_part 1 && run op-gpu "$root/op" "$limit" "$bins/op.test" -test.v "${short[@]}" -test.run GPU \
	-test.skip TestGPUTrainingLeavesNoMemory &
sanitize="${SANITIZE_RUN:-TestConformanceBF16/sm(80|90)$/(golden|rows-without-keys)|TestConformanceFP32$/(golden|non-finite)|TestHeadDims/(fp32|tf32|bf16)/B1H2_Nq70_Nk255_D(96|256)|TestFusedBackwardMatchesTwoKernels}"
for tool in memcheck racecheck; do
	in_part 1 || continue
	run "sanitize-$tool" "$root/cudakernels" "$limit" compute-sanitizer --tool "$tool" --error-exitcode 1 \
		"$bins/cudakernels.test" -test.short -test.run "$sanitize" &
done
wait
in_part 3 && run cudakernels-memory "$root/cudakernels" 120 "$bins/cudakernels.test" -test.v -test.run TestDeviceMemoryStable
in_part 3 && run op-memory "$root/op" 120 "$bins/op.test" -test.v -test.run TestGPUTrainingLeavesNoMemory

while read -r name _ rc; do
	log="$logs/$name.log"
	printf '%-24s exit %-3s PASS %5d  SKIP %4d  FAIL %4d\n' "$name" "$rc" \
		"$(grep -c -- '--- PASS' "$log")" "$(grep -c -- '--- SKIP' "$log")" "$(grep -c -- '--- FAIL' "$log")"
	grep -E '^(--- FAIL|FAIL|panic)|^    --- FAIL|SUMMARY' "$log" | head -n 12
	[[ "$rc" == 0 ]] || failed=1
done <"$logs/summary.txt"
tar -cJf "$out/logs.tar.xz" -C "$logs" .
exit "$failed"
