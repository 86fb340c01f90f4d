#!/usr/bin/env bash
# devcpu.sh OUTDIR — issue 12's CPU measurements on the GPU machine's Xeon
# host, in one device call, from the repository root with the binaries
# devpack.sh built (.gpu/bins.tar.xz or .gpu/bench.test):
#
#  1. the machine: lscpu, the load average before and after (the host is
#     shared, and a busy neighbour moves per-core figures by 30 %);
#  2. xeon_cpu_vs_torch.sh, one thread, ROUNDS rounds (default 5), then 16
#     threads, ROUNDS16 rounds (default 3; 0 skips them and their profile,
#     for a call that times the GPU on the other cores meanwhile);
#  3. CPU profiles of our kernels where the Xeon's per-core figures fell
#     furthest below the dev box's (2026-12-02: forward 0.54–0.87× PyTorch
#     per core there, where dev's core runs the same code at 0.70–0.84 of
#     its FMA peak): the one-thread forward at N = 2048 and N = 512, and
#     the 16-thread backward at N = 512. The profiles are symbolized by
#     the Go runtime, so `go tool pprof -top` reads them on any machine.
#
# A phase starts only while LIMIT seconds (default 560) have not passed.
# Logs and profiles: OUTDIR/cpu.tar.xz; the comparison tables on stdout.
set -uo pipefail
out="${1:?usage: devcpu.sh OUTDIR}"
root="$(cd "$(dirname "$0")/.." && pwd)"
limit="${LIMIT:-560}"
# shellcheck source=../cudakernels/devcommon.sh
. "$root/cudakernels/devcommon.sh" # logs, bins, and the driver's path: bench.test is flashgpu-tagged
left() { ((SECONDS < limit)) || { echo "devcpu: ${SECONDS}s passed, skipping $1"; return 1; }; }
git -C "$root" log -1 --format='HEAD %h %s' 2>/dev/null
{
	lscpu
	echo "load before: $(cat /proc/loadavg)"
} >"$logs/machine.txt" 2>&1
grep -E '^(Model name|CPU\(s\)|Thread|L2|L3)' "$logs/machine.txt"

if left "one thread"; then
	bash "$root/bench/xeon_cpu_vs_torch.sh" "$bins/bench.test" "${ROUNDS:-5}" >"$logs/vs-torch-1thread.txt" 2>&1
	echo "one thread exit $? at ${SECONDS}s"
	sed -n '/^| shape/,$p' "$logs/vs-torch-1thread.txt"
fi
sixteen=${ROUNDS16:-3}
if ((sixteen > 0)) && left "16 threads"; then
	THREADS=16 bash "$root/bench/xeon_cpu_vs_torch.sh" "$bins/bench.test" "$sixteen" >"$logs/vs-torch-16threads.txt" 2>&1
	echo "16 threads exit $? at ${SECONDS}s"
	sed -n '/^| shape/,$p' "$logs/vs-torch-16threads.txt"
fi
# profile NAME THREADS BENCH TIMES: one profiled benchmark run, pinned as
# xeon_cpu_vs_torch.sh pins (CPU, default 1, for one thread).
profile() {
	left "profile $1" || return
	local cpus=${CPU:-1}
	(($2 > 1)) && cpus="0-$(($2 - 1))"
	(cd "$root/bench" && GOMAXPROCS=$2 taskset -c "$cpus" "$bins/bench.test" -test.run '^$' -test.bench "$3" -test.benchtime "$4" \
		-test.cpu "$2" -test.cpuprofile "$logs/$1.prof") >"$logs/$1.txt" 2>&1
	echo "profile $1 exit $? at ${SECONDS}s"
}
profile forward-N2048-1thread 1 'KernelForward32/B1_H8_N2048_D64_causal=false$' 40x
profile forward-N512-1thread 1 'KernelForward32/B1_H8_N512_D64_causal=false$' 400x
((sixteen > 0)) && profile backward-N512-16threads 16 'KernelBackward32/B1_H8_N512_D64_causal=false$' 400x
echo "load after: $(cat /proc/loadavg)" | tee -a "$logs/machine.txt"
tar -cJf "$out/cpu.tar.xz" -C "$logs" .
