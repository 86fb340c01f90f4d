"""PyTorch SDPA timings at the shapes of BenchmarkFP32, for ratios measured in
the same device call as our kernels. Prints fwd/bwd TFLOP/s per backend."""
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from triton.testing import do_bench

for d, n, causal in [(128, 8192, False), (128, 8192, True), (64, 2048, False)]:
    b, h = 16384 // n, 2048 // d
    flops = 4 * b * h * n * n * d / (2 if causal else 1)
    for dtype, backends in [(torch.float32, [SDPBackend.EFFICIENT_ATTENTION]),
                            (torch.bfloat16, [SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION])]:
        q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=dtype, requires_grad=True) for _ in range(3))
        for be in backends:
            try:
                with sdpa_kernel([be]):
                    f = lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
                    o = f()
                    g = torch.randn_like(o)
                    fwd = do_bench(f, warmup=25, rep=200, return_mode="median")
                    bwd = do_bench(lambda: o.backward(g, retain_graph=True), warmup=25, rep=200, return_mode="median")
                print(f"D={d} N={n} causal={causal} {dtype} {be.name}: fwd {flops / fwd / 1e9:.1f} bwd {2.5 * flops / bwd / 1e9:.1f} TFLOP/s")
            except Exception as e:  # a backend may not support the shape or dtype
                print(f"D={d} N={n} causal={causal} {dtype} {be.name}: unavailable ({type(e).__name__})")
            torch.cuda.empty_cache()
