#!/bin/bash
# Our CPU kernels beside PyTorch's CPU SDPA on one core, alternated shape by
# shape: the machine that runs it (the GPU machine's Xeon host) is shared,
# and one run of each side minutes apart left per-core ratios that moved by
# 30 % from day to day (bench/RESULTS.md, 2026-12-02). Every round runs, for
# each shape of cpu_test.go, our forward and backward and then PyTorch's
# (the other way round every other round), both pinned to the same CPU;
# the summary gives each side's median over the rounds and the median of
# the rounds' own ratios. About four minutes on the Xeon.
#
#   bash bench/xeon_cpu_vs_torch.sh path/to/bench.test [rounds]
#
# bench.test is `go test -c -o bench.test ./bench`. CPU picks the core
# (default 1); ROUNDS (or the second argument) the rounds (default 5).
# THREADS=16 runs both sides on 16 threads instead (GOMAXPROCS and
# torch's --threads; pinned to CPUs 0-15 where taskset exists): issue 12's
# "ahead at 16 threads on every shape".
set -euo pipefail
bin=$(realpath "$1")
rounds=${2:-${ROUNDS:-5}}
here=$(cd "$(dirname "$0")" && pwd)
cpu=${CPU:-1}
threads=${THREADS:-1}
((threads > 1)) && cpu="0-$((threads - 1))"
pin=()
if command -v taskset >/dev/null; then
	pin=(taskset -c "$cpu")
fi
log=$(mktemp)
echo "# $(date -u +%FT%TZ) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-) — $bin, $rounds rounds, $threads thread(s), pinned to ${pin[*]:-nothing}"
shapes=(B1_H8_N2048_D64_causal=false B1_H8_N2048_D64_causal=true B1_H8_N512_D64_causal=false B1_H8_N2048_D128_causal=false)
ours() {
	# 4 timed calls of each direction (the N = 512 ones 16: a few ms each).
	local times=4x
	[[ $1 == *N512_* ]] && times=16x
	GOMAXPROCS=$threads "${pin[@]}" "$bin" -test.run '^$' -test.bench "Kernel(Forward|Backward)32/$1\$" -test.benchtime $times -test.count 1 | grep '^Benchmark' | sed "s/^/round $r ours /" ||
		echo "round $r ours: $1 failed" >&2
}
theirs() {
	local reps=5
	[[ $1 == *N512_* ]] && reps=16
	"${pin[@]}" python3 "$here/torch_cpu_sdpa.py" --threads "$threads" --reps $reps --shape "^$1\$" | grep '^Benchmark' | sed "s/^/round $r torch /" ||
		echo "round $r torch: $1 failed" >&2
}
for r in $(seq 1 "$rounds"); do
	for s in "${shapes[@]}"; do
		if ((r % 2)); then
			ours "$s"; theirs "$s"
		else
			theirs "$s"; ours "$s"
		fi
	done
done | tee "$log"
python3 - "$log" "$threads" <<'PY'
import re, statistics, sys
threads = int(sys.argv[2])
runs = {}  # (direction, shape) -> side -> {round: GFLOP/s}
peaks = []  # the core's FMA rate, from each of our benchmarks' of-peak
for line in open(sys.argv[1]):
    m = re.match(r"round (\d+) (ours|torch) Benchmark(?:Kernel|TorchSDPA)(Forward|Backward)32/(\S+?)(?:-\d+)?\s.*?([\d.]+) GFLOP/s(?:\s+([\d.]+) of-peak)?", line)
    if m:
        rnd, side, direction, shape, gflops, of_peak = m.groups()
        runs.setdefault((direction, shape), {}).setdefault(side, {})[int(rnd)] = float(gflops)
        if of_peak:
            peaks.append(float(gflops) / float(of_peak))
peak = statistics.median(peaks) if peaks else float("nan")
print(f"\nthe float32 FMA peak of {threads} thread(s) (simd.FMAPeak32 after each of our benchmarks): median {peak:.1f} GFLOP/s")
print(f"\n| shape | direction | ours GFLOP/s (median, min-max) | PyTorch {threads} thread(s) | ratio of medians | median of round ratios | of-peak ours / PyTorch |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for (direction, shape), sides in sorted(runs.items(), key=lambda kv: (kv[0][0] == "Backward", kv[0][1])):
    o, t = sides.get("ours", {}), sides.get("torch", {})
    if not o or not t:
        continue
    om, tm = statistics.median(o.values()), statistics.median(t.values())
    paired = [o[r] / t[r] for r in o if r in t]
    print(f"| {shape} | {direction.lower()} | {om:.1f} ({min(o.values()):.1f}-{max(o.values()):.1f}) | {tm:.1f} ({min(t.values()):.1f}-{max(t.values()):.1f}) | {om / tm:.2f} | {statistics.median(paired):.2f} | {om / peak:.2f} / {tm / peak:.2f} |")
PY
rm -f "$log"
