#!/usr/bin/env bash
# devpatch.sh OUTDIR — a kernel patch's checks and its A/B in one device
# call, with the three binaries of
#   CUBIN=1 OLD=HEAD PATCH=<file> PKGS='cudakernels bench' FLASHTUNE=0 devpack.sh
# (.gpu/bins.tar.xz: cudakernels.test and bench.test with the patch,
# bench-old.test without). Run it with FLASHATTN_KERNEL_DIR= (empty: the
# kernels the binaries embed).
#
#  1. In parallel: TestConformance of each pattern in RUNS (space-separated
#     -test.run patterns after "TestConformance"; default BF16's sm90 and
#     sm90-ws2 sets, FP16's and TF32's sm90 sets; FP32's suite has no
#     family subtests: 'FP32$' runs it whole), FUSED=1 adds the BF16
#     and FP16 sm90 sets on the fused backward (FLASHATTN_DETERMINISTIC=0)
#     with TestFusedBackwardMatchesTwoKernels, and compute-sanitizer's
#     memcheck, racecheck and synccheck on -test.short runs of SANITIZE
#     (default: BF16's and TF32's sm90 golden cases); racecheck and
#     memcheck once more on the fused backward with FUSED=1. Each process
#     has TEST_TIMEOUT seconds (default 150).
#  2. devab.sh with BENCH (default the 16-bit and TF32 forward and
#     backward), ROUNDS (default 4) and what time is left of LIMIT seconds
#     (default 480) for the whole script.
#
# OUTDIR/logs.tar.xz holds every log and the A/B's outputs (ab/); stdout
# has each check's counts and verdict and the A/B's progress. The sessions
# of 2026-12-06 wrote this call by hand four times.
set -uo pipefail
out="${1:?usage: devpatch.sh OUTDIR}"
root="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=devcommon.sh
. "$root/cudakernels/devcommon.sh"
limit=${LIMIT:-480} tmo=${TEST_TIMEOUT:-150}
t=$bins/cudakernels.test
[[ -x $t ]] || { echo "devpatch: no $t (devpack.sh PKGS='cudakernels bench')" >&2; exit 1; }
nvidia-smi -L
read -r -a runs <<<"${RUNS:-BF16\$/^sm90(-ws2)?\$ FP16\$/^sm90\$ TF32\$/^sm90\$}"
sanitize=${SANITIZE:-TestConformance(BF16|TF32)\$/^sm90\$/golden}
i=0
for r in "${runs[@]}"; do
	i=$((i + 1))
	(cd "$root/cudakernels" && timeout "$tmo" "$t" -test.v -test.run "TestConformance$r" >"$logs/conf-$i.log" 2>&1
		echo "conformance $r: exit $? at ${SECONDS}s") &
done
if [[ "${FUSED:-0}" == 1 ]]; then
	(cd "$root/cudakernels" && FLASHATTN_DETERMINISTIC=0 timeout "$tmo" "$t" -test.v \
		-test.run 'TestConformance(BF16|FP16)$/^sm90$|TestFusedBackwardMatchesTwoKernels' >"$logs/conf-fused.log" 2>&1
		echo "fused conformance: exit $? at ${SECONDS}s") &
	for tool in racecheck memcheck; do
		(cd "$root/cudakernels" && FLASHATTN_DETERMINISTIC=0 timeout "$tmo" compute-sanitizer --tool "$tool" --error-exitcode 1 \
			"$t" -test.short -test.run 'TestConformanceBF16$/^sm90$/golden' >"$logs/$tool-fused.log" 2>&1
			echo "fused $tool: exit $? at ${SECONDS}s") &
	done
fi
for tool in memcheck racecheck synccheck; do
	(cd "$root/cudakernels" && timeout "$tmo" compute-sanitizer --tool "$tool" --error-exitcode 1 \
		"$t" -test.short -test.run "$sanitize" >"$logs/$tool.log" 2>&1
		echo "$tool: exit $? at ${SECONDS}s") &
done
wait
for f in "$logs"/conf-*.log; do
	echo "$(basename "$f"): PASS $(grep -c -- '--- PASS' "$f") SKIP $(grep -c -- '--- SKIP' "$f") FAIL $(grep -c -- '--- FAIL' "$f")"
	grep -E '^(--- FAIL|FAIL|panic)|^    --- FAIL' "$f" | head -n 5
	# A pattern that matches no subtest passes with nothing run (2026-12-07:
	# TestConformanceFP32 has no family subtests, so 'FP32$/^sm90$' ran no case).
	if grep -q 'no tests to run' "$f"; then echo "  NOTHING RAN: no test matched that pattern"; fi
done
for f in "$logs"/*check*.log; do echo "$(basename "$f"): $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|SYNCCHECK SUMMARY' "$f" | tail -n 1)"; done
mkdir -p "$logs/ab"
left=$((limit - SECONDS))
if ((left > 30)); then
	BENCH="${BENCH:-KernelsGPU/(bf16|fp16|tf32)/(fwd|bwd)/}" ROUNDS="${ROUNDS:-4}" LIMIT=$((left - 20)) \
		timeout "$left" bash "$root/cudakernels/devab.sh" "$logs/ab"
else
	echo "devpatch: ${SECONDS}s passed, no A/B"
fi
tar -cJf "$out/logs.tar.xz" -C "$logs" .
