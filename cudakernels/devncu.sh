#!/usr/bin/env bash
# devncu.sh OUTDIR — Nsight Compute profiles of the kernels a change
# touched, in one device call, with the figures issue 12 asks NOTES.md to
# keep: duration, tensor-pipe utilisation, the other pipes, the warp
# stalls, registers and spills, shared memory, DRAM and L2 throughput.
# Clocks are left as they are (--clock-control none), as in every profile
# NOTES.md quotes. From the repository root, with the binaries devpack.sh
# built (.gpu/bins.tar.xz or .gpu/*).
#
# BENCH is the -test.bench pattern of bench.test (default: BenchmarkKernelsGPU's
# BF16 forward and backward at D = 128, N = 8192, not causal) and KERNELS an
# ncu regex of kernel names (default: the Hopper attention kernels, the
# conversions into images, and the backward's dot(dO, O) and statistics
# passes). ncu profiles the first COUNT launches that match (default 60:
# KernelTime runs a forward four times, 16 launches, then a forward and
# three backwards, about 37 more). FLAGS adds
# bench.test flags (e.g. -deterministic=false for the fused backward).
#
# Output: OUTDIR/ncu.txt (every section ncu printed) and a summary, one
# block per profiled launch, on stdout and in OUTDIR/ncu-summary.txt.
#
# SAMPLE, when set, is an ncu regex of one kernel name to PC-sample
# afterwards (SourceCounters): launch SKIP of it (default 1, past a first
# launch that may pay the module's load) in a run of its own, saved as
# OUTDIR/sample.ncu-rep, its SASS source page as OUTDIR/sample.csv and
# pcsample.py's account (the share of samples in the tile loop and
# outside it, by run of code and by instruction) in OUTDIR/sample.txt and
# on stdout. Anchor the regex (name$): a launch-skip past every launch of
# the name profiles nothing (2026-12-06: a 'd128$' kernel launched four
# times, skipped four).
#
# DURATIONS, when set, replaces all of the above with one figure per
# launch, gpu__time_duration, in both binaries of a devab.sh pack
# (bench-old.test, then bench.test): COUNT launches of KERNELS in BENCH
# each, into OUTDIR/durations-{old,new}.csv, and ncudurations.py's table
# of each kernel's median, old against new, on stdout and in
# OUTDIR/durations.txt. A whole call's A/B says that a change moved the
# time; this says which kernel did (2026-12-06: 12 s for both binaries
# at BF16 D128 N2k and N16k).
set -uo pipefail
out="${1:?usage: devncu.sh OUTDIR}"
root="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=devcommon.sh
. "$root/cudakernels/devcommon.sh"
command -v ncu >/dev/null || { echo "devncu: ncu not found" >&2; exit 1; }
nvidia-smi -L
bench="${BENCH:-KernelsGPU/bf16/(fwd|bwd)/D128_N8192_causal=false}"
kernels="${KERNELS:-flash_(fwd|bwd)_.*wgmma|flash_to_image|flash_bwd_dot_do_o|flash_bwd_stats}"
# profile BINARY NCU_ARGS...: ncu, clocks as they are, over one run of
# BENCH by that bench binary (with FLAGS).
profile() {
	local bin=$1
	shift
	# shellcheck disable=SC2086 # FLAGS: bench.test flags, one per word
	(cd "$root/bench" && ncu --clock-control none "$@" "$bin" -test.run '^$' -test.bench "$bench" -test.benchtime 1x ${FLAGS:-})
}
if [[ -n "${DURATIONS:-}" ]]; then
	for side in old new; do
		bin="$bins/bench.test"
		[[ $side == old ]] && bin="$bins/bench-old.test"
		profile "$bin" --kernel-name "regex:$kernels" --launch-count "${COUNT:-60}" \
			--csv --print-units base --metrics gpu__time_duration.sum >"$out/durations-$side.csv" 2>&1
		echo "ncu $side exit $?"
	done
	python3 "$root/cudakernels/ncudurations.py" "$out/durations-old.csv" "$out/durations-new.csv" | tee "$out/durations.txt"
	exit 0
fi
metrics=(
	sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active
	sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active
	sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active
	sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active
	smsp__sass_inst_executed_op_local_ld.sum
	smsp__sass_inst_executed_op_local_st.sum
	lts__t_sectors_op_red.sum
	lts__throughput.avg.pct_of_peak_sustained_elapsed
)
metric_list=$(
	IFS=,
	echo "${metrics[*]}"
)
profile "$bins/bench.test" --kernel-name "regex:$kernels" --launch-count "${COUNT:-60}" \
	--section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats \
	--section MemoryWorkloadAnalysis --metrics "$metric_list" >"$out/ncu.txt" 2>&1
echo "ncu exit $?"
# The summary: per launch, its name and grid, then the lines with the
# figures above (ncu's own names), and the stall sentence of WarpStateStats.
awk '
	/^  [a-z_0-9]+ \([0-9]+, [0-9]+, [0-9]+\)x/ { line = $0; sub(/, Context.*/, "", line); sub(/^ +/, "", line); print ""; print line; next }
	/Duration|Registers Per Thread|Dynamic Shared Memory Per Block|Achieved Occupancy|Compute \(SM\) Throughput|DRAM Throughput|L2 Cache Throughput|Warp Cycles Per Issued Instruction|pct_of_peak|op_local|op_red/ { $1 = $1; print "  " $0 }
	/stalled waiting|spends .* cycles being stalled/ { $1 = $1; print "  stall: " $0 }
' "$out/ncu.txt" | tee "$out/ncu-summary.txt"
[[ -n "${SAMPLE:-}" ]] || exit 0
profile "$bins/bench.test" --kernel-name "regex:$SAMPLE" --launch-skip "${SKIP:-1}" --launch-count 1 \
	--section SourceCounters --section WarpStateStats --section SpeedOfLight --import-source no -f -o "$out/sample" \
	>"$out/sample-run.txt" 2>&1
echo "ncu sampling exit $?"
ncu --import "$out/sample.ncu-rep" --page source --csv --print-source sass >"$out/sample.csv" &&
	python3 "$root/cudakernels/pcsample.py" "$out/sample.csv" | tee "$out/sample.txt"
