"""PyTorch CPU scaled_dot_product_attention on the shapes of cpu_test.go.

Prints one line per case in the format of `go test -bench`, so that its
output and the Go benchmark's can be read (or fed to benchstat) together:

    python3 torch_cpu_sdpa.py --threads 1

--shape runs only the cases whose name (as in the Go benchmark, e.g.
B1_H8_N512_D64_causal=false) matches a regular expression, so that a
script can alternate it with the Go binary shape by shape
(xeon_cpu_vs_torch.sh).

FLOPs follow cpu_test.go: 4·B·H·N²·D forward, 2.5× that backward, halved
when causal.
"""
import argparse
import re
import statistics
import time

import torch
import torch.nn.functional as F

SHAPES = [  # (B, H, N, D, causal), as in cpu_test.go
    (1, 8, 2048, 64, False),
    (1, 8, 2048, 64, True),
    (1, 8, 512, 64, False),
    (1, 8, 2048, 128, False),
]


def timed(fn, reps):
    fn()  # warm-up
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    ap.add_argument("--shape", default="", help="regular expression the case names must match")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    bits = 32 if dtype == torch.float32 else 64
    print(f"# torch {torch.__version__}, threads {torch.get_num_threads()}, {args.dtype}")
    for b, h, n, d, causal in SHAPES:
        name = f"B{b}_H{h}_N{n}_D{d}_causal={'true' if causal else 'false'}"
        if not re.search(args.shape, name):
            continue
        q, k, v = (torch.randn(b, h, n, d, dtype=dtype, requires_grad=True) for _ in range(3))
        do = torch.randn(b, h, n, d, dtype=dtype)
        fwd_flops = 4 * b * h * n * n * d / (2 if causal else 1)

        def forward():
            with torch.no_grad():
                F.scaled_dot_product_attention(q, k, v, is_causal=causal)

        out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)

        def backward():
            torch.autograd.grad(out, (q, k, v), do, retain_graph=True)

        for label, fn, flops in (("Forward", forward, fwd_flops), ("Backward", backward, 2.5 * fwd_flops)):
            t = timed(fn, args.reps)
            print(f"BenchmarkTorchSDPA{label}{bits}/{name}-{args.threads}\t1\t{t * 1e9:.0f} ns/op\t{flops / t / 1e9:.3f} GFLOP/s")


if __name__ == "__main__":
    main()
