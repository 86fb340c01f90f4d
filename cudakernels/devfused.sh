#!/usr/bin/env bash
# devfused.sh OUTDIR — the fused Hopper backward timed against the two
# deterministic kernels on the GPU machine, in one call: bench.test's
# BenchmarkKernelsGPU on the BF16 backward with -deterministic=true (dK/dV
# and dQ kernels, seven products a step) and =false (plain problems at
# D ≤ 128 take the one kernel that sums dQ by reductions, five products),
# alternated ROUNDS times (default 2) while LIMIT seconds (default 300)
# have not passed, then a table of each shape's kernel-ms, the mean of the
# rounds, and fused ÷ deterministic. With FAMILIES (default "sm80 sm90")
# it then times the TF32 and FP32 forwards at D = 128 in each family:
# mma.sync's tf32 rate on Hopper beside wgmma's, the input an mma.sync
# FP32 design needs (NOTES.md, "D = 128 on wgmma, worked through").
# Run from the repository root after devpack.sh (CUBIN=1: set
# FLASHATTN_KERNEL_DIR= , empty). Outputs go to OUTDIR/det-*.txt and
# OUTDIR/fam-*.txt.
set -uo pipefail
out="${1:?usage: devfused.sh OUTDIR}"
root="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=devcommon.sh
. "$root/cudakernels/devcommon.sh"
nvidia-smi -L
bench() { (cd "$root/bench" && timeout "${RUN_TIMEOUT:-150}" "$bins/bench.test" -test.run '^$' -test.benchtime 1x "$@"); }
for r in $(seq "${ROUNDS:-2}"); do
	for det in true false; do
		((SECONDS < ${LIMIT:-300})) || { echo "devfused: ${SECONDS}s passed, stopping"; break 2; }
		bench -test.bench 'KernelsGPU/bf16/bwd/' -deterministic="$det" >"$out/det-$det-$r.txt" 2>&1
		echo "deterministic=$det round $r exit $? at ${SECONDS}s"
	done
done
# metric NAME FILES… prints each benchmark's mean value of NAME over FILES.
metric() {
	local name=$1
	shift
	cat "$@" 2>/dev/null | awk -v m="$name" '{for (i = 2; i <= NF; i++) if ($i == m) {s[$1] += $(i - 1); n[$1]++}}
		END {for (k in s) print k, s[k] / n[k]}' | sort
}
join <(metric kernel-ms "$out"/det-true-*.txt) <(metric kernel-ms "$out"/det-false-*.txt) |
	awk 'BEGIN {print "shape, kernel-ms: two kernels, fused, fused ÷ two"} {printf "%-58s %9.4f %9.4f %6.3f\n", $1, $2, $3, $3 / $2}'
for fam in ${FAMILIES-sm80 sm90}; do
	bench -test.bench 'KernelsGPU/(tf32|fp32)/fwd/D128' -family "$fam" >"$out/fam-$fam.txt" 2>&1
	echo "family $fam exit $? at ${SECONDS}s"
	metric TFLOP/s "$out/fam-$fam.txt"
done
