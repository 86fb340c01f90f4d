"""How accurate PyTorch's float32 SDPA is, by the conformance suite's measure.

PyTorch's efficient SDPA backend runs float32 on tensor cores from sm80 on
(CUTLASS's fast-fp32 mma, 3xTF32). Our FP32 mode must keep every output
within 2 × the naive float32 computation's error against float64, plus two
float32 rounding units of the output's magnitude (kernels/conformance,
check32). This script applies that measure to PyTorch's kernel, on the GPU:
the float64 reference and the naive float32 baseline are plain
softmax(Q·Kᵀ·scale)·V with autograd, the latter with TF32 disabled, so
cuBLAS multiplies in true float32.

usage: python3 bench/torch_fp32_accuracy.py

It prints one line per output and shape: the kernel's max error, the naive
baseline's, and the ratio of the error to the suite's bound (≤ 1 passes).
"""
import math

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
UNIT = 2.0**-24  # float32's rounding unit


def naive(q, k, v, causal, scale):
    s = (q @ k.transpose(-1, -2)) * scale
    if causal:
        nq, nk = s.shape[-2:]
        # Bottom-right aligned, as the suite's causal mask.
        i = torch.arange(nq, device=s.device)[:, None] + (nk - nq)
        j = torch.arange(nk, device=s.device)[None, :]
        s = s.masked_fill(j > i, float("-inf"))
    return torch.softmax(s, dim=-1) @ v


def grads(fn, q, k, v, do):
    q, k, v = (x.detach().clone().requires_grad_(True) for x in (q, k, v))
    o = fn(q, k, v)
    o.backward(do)
    return [o.detach(), q.grad, k.grad, v.grad]


def main():
    gen = torch.Generator(device="cuda").manual_seed(2026)
    print(torch.__version__, torch.cuda.get_device_name())
    for b, h, nq, nk, d, causal in [(2, 2, 17, 113, 40, False), (2, 2, 17, 113, 64, True), (1, 4, 512, 512, 128, False),
                                    (1, 2, 4096, 4096, 64, False), (1, 2, 4096, 4096, 128, True)]:
        scale = 1 / math.sqrt(d)
        shape = lambda n: (b, h, n, d)
        q, k, v = (torch.randn(shape(n), device="cuda", generator=gen) for n in (nq, nk, nk))
        do = torch.randn(shape(nq), device="cuda", generator=gen)
        want = grads(lambda q, k, v: naive(q, k, v, causal, scale), q.double(), k.double(), v.double(), do.double())
        base = grads(lambda q, k, v: naive(q, k, v, causal, scale), q, k, v, do)
        # SDPA's causal mask is top-left aligned; bottom-right only differs when nq ≠ nk.
        if causal and nq != nk:
            mask = torch.ones(nq, nk, dtype=torch.bool, device="cuda").tril(diagonal=nk - nq)
            fn = lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
        else:
            fn = lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
        with sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION]):
            got = grads(fn, q, k, v, do)
        for name, g, n, w in zip(["O", "dQ", "dK", "dV"], got, base, want):
            err = (g.double() - w).abs().max().item()
            nerr = (n.double() - w).abs().max().item()
            bound = 2 * nerr + 2 * UNIT * w.abs().max().item()
            print(f"B{b} H{h} Nq{nq} Nk{nk} D{d} causal={causal} {name}: efficient fp32 error {err:.3g}, "
                  f"naive fp32 {nerr:.3g}, error/bound {err / bound:.2f}")


if __name__ == "__main__":
    main()
