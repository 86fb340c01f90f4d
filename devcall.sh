#!/usr/bin/env bash
# One device call (twenty-second session): the 3xTF32 kernels' first run.
set -uo pipefail
out="${1:?}"
root="$(pwd)"
. "$root/cudakernels/devcommon.sh"
export FLASHATTN_KERNEL_DIR=
nvidia-smi -L
start=$SECONDS
(cd cudakernels && timeout 150 "$bins/cudakernels.test" -test.v -test.run 'TestTF32ProductsIgnoreOperandOrder|TestConformanceFP32TensorCores/golden') >"$out/quick.log" 2>&1
echo "quick exit $? at $((SECONDS - start))s"
grep -E -- '^--- (PASS|FAIL|SKIP)|^    --- FAIL|^panic' "$out/quick.log" | head -n 20
grep -E 'error .* > bound' "$out/quick.log" | head -n 20
(cd cudakernels && timeout 200 "$bins/cudakernels.test" -test.v -test.run 'TestConformanceFP32TensorCores$' -test.skip 'TestConformanceFP32TensorCores/golden') >"$out/fp32tc.log" 2>&1
echo "fp32tc exit $? at $((SECONDS - start))s"
grep -E -- '^--- (PASS|FAIL)|^    --- FAIL' "$out/fp32tc.log" | head -n 30
grep -E 'error .* > bound' "$out/fp32tc.log" | head -n 30
grep -c -- '--- PASS' "$out/fp32tc.log"; grep -c -- '--- FAIL' "$out/fp32tc.log"
[[ "${SHORT_CALL:-0}" == 1 ]] && exit 0
mkdir -p "$out/ab"
FAMILY=sm90 BENCH='KernelsGPU/fp32/(fwd|bwd)/D64_' ROUNDS=2 LIMIT=100 bash cudakernels/devab.sh "$out/ab"
echo "ab done at $((SECONDS - start))s"
grep -h 'kernel-ms' "$out"/ab/new-1.txt | head -n 30
(cd bench && timeout 60 python3 - <<'PY') >"$out/torch.txt" 2>&1
import torch
from torch.nn.attention import SDPBackend
import gpu_side_by_side as s
print(torch.cuda.get_device_name(), torch.__version__)
for n in (512, 1024, 2048, 4096, 8192, 16384):
    for causal in (False, True):
        r = s.peer(torch.float32, SDPBackend.EFFICIENT_ATTENTION, 64, n, causal)
        print(f"D64 N{n} causal={causal} efficient fp32 fwd/bwd TFLOP/s", r)
PY
echo "torch exit $? at $((SECONDS - start))s"
cat "$out/torch.txt"
tar -cJf "$out/ab.tar.xz" -C "$out" ab && rm -rf "$out/ab"
