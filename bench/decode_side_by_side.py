"""Our decode attention beside PyTorch's SDPA, in one command.

Runs BenchmarkDecodeGPU from a flashgpu-tagged test binary of package bench
(go test -c -tags flashgpu -o .gpu/bench.test ./bench), then times the same
decode steps with PyTorch: one new query row per sequence (Nq = 1) against
a cache of L keys, H = 32 query heads, Hkv key heads, D = 128. BF16 peers are
SDPA's cuDNN and FlashAttention 2 backends (enable_gqa); the FP32 peer is the
efficient backend, which refuses grouped heads, so it runs only at Hkv = H.
Every figure is effective bandwidth: the bytes of K and V read ÷ the median
time, the L2 flushed before each run (triton's do_bench), beside the read
ceiling our benchmark measured in the same run; "read µs" is the time a
plain read of the step's bytes takes (the floor for a step of that size).

usage: python3 bench/decode_side_by_side.py BENCH_BINARY [--out FILE] [--short]
"""
import argparse
import re

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from triton.testing import do_bench

from gobench import benchmark_lines
from markdown_table import emit, progress

LINE = re.compile(r"^BenchmarkDecodeGPU/(\w+)/B(\d+)_Hkv(\d+)_L(\d+)-\d+\s")
METRIC = re.compile(r"([\d.]+) ([\w/-]+)")
CEILING = re.compile(r"^BenchmarkDecodeGPU/(\w+)/read-ceiling-\d+\s.*?([\d.]+) TB/s")
H, D = 32, 128


def ours(binary, short):
    """Runs our benchmark; returns ({(prec, B, Hkv, L): (us, TB/s, read µs)}, {prec: ceiling TB/s})."""
    got, ceiling = {}, {}
    for line in benchmark_lines(binary, "DecodeGPU", short):
        if m := LINE.match(line):
            prec, b, hkv, l = m.groups()
            metrics = {unit: float(x) for x, unit in METRIC.findall(line[m.end():])}
            got[(prec, int(b), int(hkv), int(l))] = (metrics["kernel-us"], metrics["TB/s"], metrics.get("read-us"))
        elif m := CEILING.match(line):
            ceiling[m.group(1)] = float(m.group(2))
    return got, ceiling


def peer(backend, dtype, b, hkv, l):
    """TB/s of one SDPA decode step, or None where the backend refuses it."""
    q = torch.randn(b, H, 1, D, device="cuda", dtype=dtype)
    k, v = (torch.randn(b, hkv, l, D, device="cuda", dtype=dtype) for _ in range(2))
    try:
        with sdpa_kernel([backend]):
            run = lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=hkv != H)
            run()
            ms = do_bench(run, warmup=10, rep=50, return_mode="median")
    except RuntimeError:
        return None
    finally:
        del q, k, v
        torch.cuda.empty_cache()
    return 2 * b * hkv * l * D * q_bytes(dtype) / (ms / 1e3) / 1e12


def q_bytes(dtype):
    return torch.finfo(dtype).bits // 8


def cell(x, digits=2):
    return "–" if x is None else f"{x:.{digits}f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("binary", help="flashgpu-tagged test binary of package bench")
    ap.add_argument("--out", help="also write the table to this file")
    ap.add_argument("--short", action="store_true", help="the benchmark's -test.short grid")
    args = ap.parse_args()

    got, ceiling = ours(args.binary, args.short)
    header = ["prec", "B", "Hkv", "L", "ours µs", "read µs", "ours TB/s", "of ceiling", "cuDNN TB/s", "FA2 TB/s", "efficient TB/s", "ours ÷ best peer"]
    rows = []
    for (prec, b, hkv, l), (us, tbs, read) in sorted(got.items()):
        dtype = torch.bfloat16 if prec == "bf16" else torch.float32
        peers = []
        if dtype == torch.bfloat16:
            peers = [peer(SDPBackend.CUDNN_ATTENTION, dtype, b, hkv, l), peer(SDPBackend.FLASH_ATTENTION, dtype, b, hkv, l), None]
        else:
            peers = [None, None, peer(SDPBackend.EFFICIENT_ATTENTION, dtype, b, hkv, l)]
        best = max((x for x in peers if x is not None), default=None)
        ratio = None if best is None else tbs / best
        row = [prec, str(b), str(hkv), str(l), f"{us:.1f}", cell(read, 1), f"{tbs:.2f}", f"{tbs / ceiling[prec]:.2f}"] + [cell(x) for x in peers] + [cell(ratio)]
        rows.append(row)
        progress(row)
    gpu = torch.cuda.get_device_name()
    ceil = ", ".join(f"{p} {c:.2f} TB/s" for p, c in sorted(ceiling.items()))
    emit(f"Decode attention, effective bandwidth, {gpu}, PyTorch {torch.__version__}, H = {H}, D = {D}, Nq = 1; read ceiling {ceil}",
         header, rows, args.out)


if __name__ == "__main__":
    main()
