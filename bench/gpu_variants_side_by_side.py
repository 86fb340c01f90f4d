"""Our attention variants beside FlexAttention and SDPA, in one command.

Runs BenchmarkVariantsGPU from a flashgpu-tagged test binary of package bench
(go test -c -tags flashgpu -o .gpu/bench.test ./bench), then times the same
problems in BF16 with PyTorch: FlexAttention (torch.compile'd
flex_attention with a block mask and a score_mod), and SDPA where it has the
variant (enable_gqa on the cuDNN and FlashAttention 2 backends, dropout on
FlashAttention 2 and the efficient backend, an additive bias with its
gradient on the cuDNN and efficient backends, the causal mask folded into
it as −inf). FLOPs are the visible ones for
everybody: 4·D per (row, visible key) pair over all heads, the backward
2.5× the forward, so a variant that costs no more than its visible work
runs at the plain kernel's TFLOP/s. Both sides flush the L2 cache before
each timed run and report a median.

usage: python3 bench/gpu_variants_side_by_side.py BENCH_BINARY [--only REGEXP] [--out FILE]
"""
import argparse
import math
import re
import sys

import torch
import torch._functorch.config
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.flex_attention import create_block_mask, flex_attention
from triton.testing import do_bench

from gobench import benchmark_lines
from markdown_table import cell, emit, progress

# The backward is timed by calling backward() again on one graph
# (retain_graph), which compiled FlexAttention refuses while it donates its
# saved buffers.
torch._functorch.config.donated_buffer = False

LINE = re.compile(r"^BenchmarkVariantsGPU/(\w+)/(fwd|bwd)/(\S+?)-\d+\s.*?([\d.]+) TFLOP/s")
D = 128


def ours(binary, only):
    """Runs our benchmark on the cases whose names match the regular
    expression only; returns {(prec, pass, name): TFLOP/s}."""
    got = {}
    for line in benchmark_lines(binary, f"VariantsGPU/././{only}"):
        m = LINE.match(line)
        if m:
            prec, pas, name, tflops = m.groups()
            got[(prec, pas, name)] = float(tflops)
    return got


class Case:
    """One variant: shapes, masks and modifiers, as BenchmarkVariantsGPU's."""

    def __init__(self, name, n, b=None, hkv=16, window=None, softcap=0.0, alibi=False, lens=None, dropout=0.0,
                 bias=False):
        self.name, self.n, self.b = name, n, b or 16384 // n
        self.h, self.hkv = 16, hkv
        self.window, self.softcap, self.alibi, self.lens, self.dropout = window, softcap, alibi, lens, dropout
        # bias: one [N, N] slice shared by every batch entry and head, its
        # gradient wanted, as BenchmarkVariantsGPU's.
        self.bias = torch.randn(1, 1, n, n, device="cuda", dtype=torch.bfloat16, requires_grad=True) if bias else None

    def visible_pairs(self):
        """Σ over batch entries and rows of the keys the causal mask, the
        window and the lengths leave (per head)."""
        total = 0
        for b in range(self.b):
            length = self.lens[b] if self.lens else self.n
            for i in range(length):
                lo = max(0, i - self.window) if self.window is not None else 0
                total += i + 1 - lo
        return total

    def flops(self):
        return 4 * self.h * self.visible_pairs() * D

    def mask_mod(self):
        window, lens = self.window, self.lens_tensor()

        def mod(b, h, q, kv):
            keep = q >= kv
            if window is not None:
                keep = keep & (q - kv <= window)
            if lens is not None:
                keep = keep & (q < lens[b]) & (kv < lens[b])
            return keep

        return mod

    def lens_tensor(self):
        return None if self.lens is None else torch.tensor(self.lens, device="cuda", dtype=torch.int32)

    def score_mod(self):
        cap, alibi, heads, bias = self.softcap, self.alibi, self.h, self.bias
        if not cap and not alibi and bias is None:
            return None

        def mod(score, b, h, q, kv):
            if bias is not None:
                score = score + bias[0, 0, q, kv]
            if cap:
                score = cap * torch.tanh(score / cap)
            if alibi:
                # The slopes 2^(−8(h+1)/H) computed from h: a captured slope
                # tensor fails to compile here.
                score = score - torch.exp2(-8.0 * (h + 1) / heads) * (q - kv).abs()
            return score

        return mod


CASES = [
    Case("plain_N8192_causal", 8192),
    Case("plain_N16384_causal", 16384),
    Case("gqa8_N8192_causal", 8192, hkv=2),
    Case("window1024_N16384_causal", 16384, window=1023),
    Case("softcap30_N8192_causal", 8192, softcap=30.0),
    Case("alibi_N8192_causal", 8192, alibi=True),
    Case("lengths_quarter_N8192_causal", 8192, b=8, lens=[2048, 1024, 3072, 2048, 512, 3584, 2048, 2048]),
    Case("dropout0.1_N8192_causal", 8192, dropout=0.1),
    Case("bias_shared_N8192_causal", 8192, bias=True),
]


def timed(run, flops):
    """Forward and backward TFLOP/s of run (returning the output)."""
    o = run()
    g = torch.randn_like(o)
    fwd = do_bench(run, warmup=25, rep=100, return_mode="median")
    bwd = do_bench(lambda: o.backward(g, retain_graph=True), warmup=25, rep=100, return_mode="median")
    return flops / fwd / 1e9, 2.5 * flops / bwd / 1e9


def inputs(c):
    q = torch.randn(c.b, c.h, c.n, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k, v = (torch.randn(c.b, c.hkv, c.n, D, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(2))
    return q, k, v


def flex_peer(c):
    if c.dropout:
        return None  # FlexAttention has no dropout
    q, k, v = inputs(c)
    block = create_block_mask(c.mask_mod(), c.b if c.lens else None, None, c.n, c.n, device="cuda")
    mod = c.score_mod()
    # A fresh compile for every case, of static shapes: after the first
    # shapes torch.compile turns to dynamic ones, under which the bias and
    # ALiBi score_mods fail to compile ("all unwrapped values must be
    # FakeTensor"), and past its recompile limit it runs eagerly.
    torch._dynamo.reset()
    flex = torch.compile(flex_attention, dynamic=False)
    run = lambda: flex(q, k, v, score_mod=mod, block_mask=block, enable_gqa=c.hkv != c.h)
    return timed(run, c.flops())


def sdpa_peer(c, backend):
    """SDPA where it computes the variant without a materialised mask."""
    if c.window is not None or c.softcap or c.alibi or c.lens:
        return None
    if c.dropout and backend == SDPBackend.CUDNN_ATTENTION:
        return None
    q, k, v = inputs(c)
    mask, causal = None, True
    if c.bias is not None:
        # SDPA takes a mask or is_causal, not both: the causal mask goes
        # into the bias as −inf, the gradient reaching the bias itself.
        above = torch.full((c.n, c.n), float("-inf"), device="cuda", dtype=torch.bfloat16).triu(1)
        mask, causal = lambda: c.bias + above, False
    try:
        with sdpa_kernel([backend]):
            run = lambda: torch.nn.functional.scaled_dot_product_attention(
                q, k, v, attn_mask=mask() if mask else None, is_causal=causal, dropout_p=c.dropout,
                enable_gqa=c.hkv != c.h)
            return timed(run, c.flops())
    except RuntimeError:
        return None


PEERS = [
    ("FlexAttention", flex_peer),
    ("SDPA cuDNN", lambda c: sdpa_peer(c, SDPBackend.CUDNN_ATTENTION)),
    ("SDPA FA2", lambda c: sdpa_peer(c, SDPBackend.FLASH_ATTENTION)),
    ("SDPA efficient", lambda c: sdpa_peer(c, SDPBackend.EFFICIENT_ATTENTION)),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("binary", help="flashgpu-tagged test binary of package bench")
    ap.add_argument("--only", default=".", help="time only the cases whose names this regular expression matches")
    ap.add_argument("--out", help="also write the table to this file")
    args = ap.parse_args()

    cases = [c for c in CASES if re.search(args.only, c.name)]
    if not cases:
        sys.exit(f"no case matches {args.only!r}: the cases are {', '.join(c.name for c in CASES)}")
    got = ours(args.binary, args.only)
    header = ["variant", "ours bf16 fwd", "ours bf16 bwd", "ours fp32 fwd", "ours fp32 bwd"]
    for name, _ in PEERS:
        header += [f"{name} fwd", f"{name} bwd"]
    rows = []
    for c in cases:
        row = [c.name] + [cell(got.get((prec, pas, c.name))) for prec in ("bf16", "fp32") for pas in ("fwd", "bwd")]
        for name, fn in PEERS:
            try:
                r = fn(c)
            except Exception as e:  # one peer failing must not lose the table
                print(f"{name} on {c.name}: {e}", file=sys.stderr)
                r = None
            row += [cell(r[0] if r else None), cell(r[1] if r else None)]
            torch.cuda.empty_cache()
        rows.append(row)
        progress(row)

    gpu = torch.cuda.get_device_name()
    emit(f"TFLOP/s on visible FLOPs, {gpu}, PyTorch {torch.__version__}, D = {D}, H = 16, BF16 peers", header, rows, args.out)


if __name__ == "__main__":
    main()
