#!/usr/bin/env bash
# devab.sh OUTDIR — a kernel change timed against its base on the GPU
# machine, in one call: bench.test and bench-old.test (devpack.sh OLD=<rev>)
# run the same benchmarks in turn, ROUNDS times (default 4), so that both
# meet the same clocks and neighbours: old then new in odd rounds, new then
# old in even ones, so that a binary's place in the turn (a GPU warm from
# the other's run, or not) cannot pass for its speed (2026-12-06: a BF16
# row +1–4 % in two old-then-new rounds with nothing in the change to
# explain it; use an even ROUNDS). BENCH is the -test.bench
# pattern (default 'KernelsGPU/(bf16|fp16)/'). Each run's output goes to
# OUTDIR/{old,new}-<round>.txt, for benchstat on the development machine
# (cat old-*.txt >old.txt; cat new-*.txt >new.txt; benchstat old.txt
# new.txt). A round starts only while LIMIT seconds (default 480) have not
# passed. REPS, when set, passes -reps REPS to both binaries (the timed
# runs behind each median, 3 by default; both binaries must be of
# revisions that have the flag, 2026-12-05 on): with the default,
# unchanged kernels moved by up to 1.3 % between two rounds (H100).
# OLDBIN and NEWBIN name the two binaries under the unpacked .gpu/
# (default bench-old.test and bench.test): a third one packed by hand,
# say bench with a second patch on top, is then timed against either.
# FAMILY, when set, passes -family FAMILY to both (sm80 keeps FP32 on the
# CUDA cores; sm90 and, from 2026-12-05 on, auto run FP32's plain rows at
# D ≤ 64 on the 3xTF32 kernels, and at D ≤ 128 from 2026-12-06 on;
# before, FP32 was on the CUDA cores in every family). FLAGS adds more
# bench.test flags to both (e.g. -deterministic=false, the fused
# backward).
# shellcheck disable=SC2086 # FLAGS: bench.test flags, one per word
set -uo pipefail
out="${1:?usage: devab.sh OUTDIR}"
root="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=devcommon.sh
. "$root/cudakernels/devcommon.sh"
old_bin=$bins/${OLDBIN:-bench-old.test} new_bin=$bins/${NEWBIN:-bench.test}
for b in "$old_bin" "$new_bin"; do
	[[ -x "$b" ]] || { echo "devab: no $b (devpack.sh OLD=<rev> packs bench-old.test)" >&2; exit 1; }
done
nvidia-smi -L
for r in $(seq "${ROUNDS:-4}"); do
	sides=(old new)
	((r % 2 == 0)) && sides=(new old)
	for side in "${sides[@]}"; do
		((SECONDS < ${LIMIT:-480})) || { echo "devab: ${SECONDS}s passed, stopping"; break 2; }
		bin=$new_bin
		[[ $side == old ]] && bin=$old_bin
		(cd "$root/bench" && "$bin" -test.run '^$' -test.bench "${BENCH:-KernelsGPU/(bf16|fp16)/}" -test.benchtime 1x \
			${REPS:+-reps "$REPS"} ${FAMILY:+-family "$FAMILY"} ${FLAGS:-}) \
			>"$out/$side-$r.txt" 2>&1
		echo "$side-$r exit $? at ${SECONDS}s"
	done
done
