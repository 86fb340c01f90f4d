#!/usr/bin/env bash
# devbench.sh OUTDIR — the timing batch on the GPU machine, for a call of
# its own after devrun.sh has passed (timings never share the GPU with
# tests). From the repository root, with the binaries devpack.sh built
# (.gpu/bins.tar.xz or .gpu/*), which run the kernels they embed (bench's
# benchmarks always; flashtune unless FLASHATTN_KERNEL_DIR names a
# folder of PTX).
#
#  1. flashtune: every candidate kernel at N = 512 … 8192 (B·N = 16384,
#     H·D = 2048), into OUTDIR/tuned.json, its progress in the log.
#  2. BenchmarkKernelsGPU's BF16 forward and backward, alternated between
#     the heuristic and the new table (FLASHATTN_TUNE_TABLE), and the
#     backward between the two deterministic kernels and the fused one
#     (-deterministic=false), ROUNDS rounds (default 2).
#  3. gpu_side_by_side.py --short beside PyTorch, with the new table.
# A phase starts only while LIMIT seconds (default 540) have not passed.
# Logs: OUTDIR/bench.tar.xz (flashtune, each round, the side by side); a
# summary on stdout.
set -uo pipefail
out="${1:?usage: devbench.sh OUTDIR}"
root="$(cd "$(dirname "$0")/.." && pwd)"
limit="${LIMIT:-540}"
rounds="${ROUNDS:-2}"
# shellcheck source=devcommon.sh
. "$root/cudakernels/devcommon.sh"
kernels=()
[[ -n "${FLASHATTN_KERNEL_DIR:-}" ]] && kernels=(-kernels "$FLASHATTN_KERNEL_DIR")
nvidia-smi -L
git -C "$root" log -1 --format='HEAD %h %s' 2>/dev/null
left() { ((SECONDS < limit)) || { echo "devbench: ${SECONDS}s passed, skipping $1"; return 1; }; }

if left flashtune; then
	"$bins/flashtune" "${kernels[@]}" -out "$out/tuned.json" 2>&1 | tee "$logs/flashtune.log" | tail -n 5
	echo "flashtune exit ${PIPESTATUS[0]} at ${SECONDS}s"
fi
bench() { # bench NAME ARGS...: one run of BenchmarkKernelsGPU's BF16 entries
	local name=$1
	shift
	(cd "$root/bench" && "$bins/bench.test" -test.run '^$' -test.bench 'KernelsGPU/bf16/' -test.benchtime 1x "$@") \
		>"$logs/$name.log" 2>&1
	echo "$name exit $? at ${SECONDS}s"
}
for r in $(seq "$rounds"); do
	left "round $r" || break
	bench "heuristic-$r"
	[[ -f "$out/tuned.json" ]] && FLASHATTN_TUNE_TABLE="$out/tuned.json" bench "tuned-$r"
	bench "fused-$r" -deterministic=false
done
if left side-by-side; then
	table=()
	[[ -f "$out/tuned.json" ]] && table=(env FLASHATTN_TUNE_TABLE="$out/tuned.json")
	(cd "$root/bench" && "${table[@]}" python3 gpu_side_by_side.py "$bins/bench.test" --short --out "$logs/side-by-side.md") \
		>"$logs/side-by-side.log" 2>&1
	echo "side-by-side exit $? at ${SECONDS}s"
	cat "$logs/side-by-side.md" 2>/dev/null
fi
tar -cJf "$out/bench.tar.xz" -C "$logs" .
