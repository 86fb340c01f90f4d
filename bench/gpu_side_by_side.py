"""Our CUDA kernels beside PyTorch's SDPA, in one command, as two tables.

Runs BenchmarkKernelsGPU from a flashgpu-tagged test binary of package bench
(built beforehand: go test -c -tags flashgpu -o .gpu/bench.test ./bench),
then times torch.nn.functional.scaled_dot_product_attention on the same
shapes with its efficient (fp32), flash (FlashAttention 2, bf16) and cuDNN
(bf16) backends, and prints a Markdown table of TFLOP/s, forward and
backward, FLOPs counted alike (4·B·H·N²·D forward, halved when causal;
backward 2.5× the forward), then the same run as the ratios issue 12's
targets are stated in (ours over cuDNN, over cuDNN from fp32, over the
efficient fp32 backend).

Both sides flush the L2 cache before each timed run (ours in KernelTime,
triton.testing.do_bench on PyTorch's side) and report a median.

Our kernels take and return float32 (Gorgonia's tensors) and their times
include the conversions into bf16 operands; the bf16 peers are handed bf16
tensors. The column "torch cuDNN bf16 from fp32" times cuDNN as a user
with float32 tensors would call it: Q, K, V cast to bf16 and O back to
float32 in the forward, dO cast to bf16 and dQ, dK, dV back to float32
in the backward (autograd's casts), the work our times include.

--family passes -family to our benchmark: sm80 keeps FP32 on the CUDA
cores, where auto and sm90 run its plain rows at D ≤ 64 on the 3xTF32
kernels (binaries of 2026-12-05 on; before, only sm90 did), and at
D ≤ 128 from 2026-12-06 on.

--fused adds the column "ours bf16 fused bwd": our BF16 backward run again
with -deterministic=false, where plain problems take the one-kernel
backward that sums dQ by reductions (cudakernels.WithDeterministic). Its
dQ's last bits vary from run to run, as those of the peers' backwards do.

usage: python3 bench/gpu_side_by_side.py BENCH_BINARY [--short] [--family F] [--fused] [--out FILE]
"""
import argparse
import re

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from triton.testing import do_bench

from gobench import benchmark_lines
from markdown_table import cell, emit, progress, ratio

LINE = re.compile(r"^BenchmarkKernelsGPU/(\w+)/(fwd|bwd)/D(\d+)_N(\d+)_causal=(true|false)\S*\s.*?([\d.]+) TFLOP/s")

# Our columns: FP16 runs the same kernels as BF16 and is left out.
OURS = [("fp32", "fwd"), ("fp32", "bwd"), ("tf32", "fwd"), ("tf32", "bwd"), ("bf16", "fwd"), ("bf16", "bwd")]

# Each peer: its column name, its tensors' dtype, the SDPA backend, and the
# dtype the call casts them to (and its output back from), or None.
PEERS = [
    ("torch efficient fp32", torch.float32, SDPBackend.EFFICIENT_ATTENTION, None),
    ("torch flash (FA2) bf16", torch.bfloat16, SDPBackend.FLASH_ATTENTION, None),
    ("torch cuDNN bf16", torch.bfloat16, SDPBackend.CUDNN_ATTENTION, None),
    ("torch cuDNN bf16 from fp32", torch.float32, SDPBackend.CUDNN_ATTENTION, torch.bfloat16),
]

# The ratios issue 12's targets are stated in: each is ours (precision,
# pass) over a peer's figure (name, 0 forward / 1 backward).
RATIOS = [
    ("bf16 fwd ÷ cuDNN", ("bf16", "fwd"), ("torch cuDNN bf16", 0)),
    ("bf16 bwd ÷ cuDNN", ("bf16", "bwd"), ("torch cuDNN bf16", 1)),
    ("bf16 bwd fused ÷ cuDNN", ("bf16 fused", "bwd"), ("torch cuDNN bf16", 1)),
    ("bf16 fwd ÷ cuDNN from fp32", ("bf16", "fwd"), ("torch cuDNN bf16 from fp32", 0)),
    ("bf16 bwd ÷ cuDNN from fp32", ("bf16", "bwd"), ("torch cuDNN bf16 from fp32", 1)),
    ("fp32 fwd ÷ efficient fp32", ("fp32", "fwd"), ("torch efficient fp32", 0)),
    ("fp32 bwd ÷ efficient fp32", ("fp32", "bwd"), ("torch efficient fp32", 1)),
    ("tf32 fwd ÷ efficient fp32", ("tf32", "fwd"), ("torch efficient fp32", 0)),
    ("tf32 bwd ÷ efficient fp32", ("tf32", "bwd"), ("torch efficient fp32", 1)),
]


def ours(binary, short, family=None, bench="KernelsGPU", extra=()):
    """Runs our benchmark; returns {(prec, pass, d, n, causal): TFLOP/s}."""
    got = {}
    flags = (("-family", family) if family else ()) + tuple(extra)
    for line in benchmark_lines(binary, bench, short, flags):
        m = LINE.match(line)
        if m:
            prec, pas, d, n, causal, tflops = m.groups()
            got[(prec, pas, int(d), int(n), causal == "true")] = float(tflops)
    return got


def peer(dtype, backend, d, n, causal, cast=None):
    """Forward and backward TFLOP/s of one SDPA backend, or None if it refuses.

    With cast (a dtype), the tensors are of dtype and the call casts them to
    cast and its output back."""
    b, h = 16384 // n, 2048 // d
    flops = 4 * b * h * n * n * d / (2 if causal else 1)
    q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=dtype, requires_grad=True) for _ in range(3))
    sdpa = torch.nn.functional.scaled_dot_product_attention
    try:
        with sdpa_kernel([backend]):
            if cast is None:
                run = lambda: sdpa(q, k, v, is_causal=causal)
            else:
                run = lambda: sdpa(q.to(cast), k.to(cast), v.to(cast), is_causal=causal).to(dtype)
            o = run()
            g = torch.randn_like(o)
            fwd = do_bench(run, warmup=25, rep=100, return_mode="median")
            bwd = do_bench(lambda: o.backward(g, retain_graph=True), warmup=25, rep=100, return_mode="median")
        return flops / fwd / 1e9, 2.5 * flops / bwd / 1e9
    except RuntimeError:  # the backend does not take this shape or dtype
        return None
    finally:
        del q, k, v
        torch.cuda.empty_cache()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("binary", help="flashgpu-tagged test binary of package bench")
    ap.add_argument("--short", action="store_true", help="N = 2048 and 8192 only")
    ap.add_argument("--family", help="our kernel family (-family of the benchmark): auto, sm80 or sm90")
    ap.add_argument("--fused", action="store_true", help="also our BF16 backward with -deterministic=false")
    ap.add_argument("--out", help="also write the table to this file")
    args = ap.parse_args()

    got = ours(args.binary, args.short, args.family)
    columns = list(OURS)
    if args.fused:
        fused = ours(args.binary, args.short, args.family, "KernelsGPU/bf16/bwd/", ("-deterministic=false",))
        got.update({("bf16 fused",) + key[1:]: v for key, v in fused.items()})
        columns.append(("bf16 fused", "bwd"))
    shapes = sorted({(d, n, c) for (_, _, d, n, c) in got})
    header = ["D", "N", "causal"] + [f"ours {prec} {pas}" for prec, pas in columns]
    for name, _, _, _ in PEERS:
        header += [f"{name} fwd", f"{name} bwd"]
    rows, peers = [], {}
    for d, n, causal in shapes:
        row = [str(d), str(n), "yes" if causal else "no"]
        for prec, pas in columns:
            row.append(cell(got.get((prec, pas, d, n, causal))))
        for name, dtype, backend, cast in PEERS:
            r = peer(dtype, backend, d, n, causal, cast)
            peers[(name, d, n, causal)] = r
            row += [cell(r[0] if r else None), cell(r[1] if r else None)]
        rows.append(row)
        progress(row)

    gpu = torch.cuda.get_device_name()
    emit(f"TFLOP/s on {gpu}, PyTorch {torch.__version__}, B·N = 16384, hidden 2048 (H = 2048/D)", header, rows, args.out)
    ratios = [r for r in RATIOS if args.fused or r[1][0] != "bf16 fused"]
    rows = []
    for d, n, causal in shapes:
        row = [str(d), str(n), "yes" if causal else "no"]
        for _, ours_key, (name, i) in ratios:
            r = peers.get((name, d, n, causal))
            row.append(ratio(got.get(ours_key + (d, n, causal)), r[i] if r else None))
        rows.append(row)
    emit("The same run as ratios, ours over the peer", ["D", "N", "causal"] + [r[0] for r in ratios], rows, args.out,
         append=True)


if __name__ == "__main__":
    main()
