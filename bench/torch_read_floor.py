"""How fast a plain read of a decode step's bytes is under the peers' timer.

decode_side_by_side.py times our steps with CUDA events after a memset
flush and the peers with triton's do_bench (L2 zeroed before each run), and
reports our own read floor (ReadCeiling of the step's bytes) beside them.
This script measures the floor on the peers' side: torch's sum over one
tensor holding a step's K and V (bf16, H = 32, Hkv = 8, D = 128, Nq = 1),
timed by do_bench, beside SDPA's cuDNN decode of the same cache in the
same run. Where cuDNN matches the sum, it runs at the read floor of its
own measurement.

usage: python3 bench/torch_read_floor.py
"""
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from triton.testing import do_bench

H, D = 32, 128
POINTS = [(1, 8, 16384), (1, 8, 65536), (1, 8, 131072), (8, 8, 65536), (64, 8, 1024)]


def main():
    print(f"{torch.cuda.get_device_name()}, PyTorch {torch.__version__}, bf16, H = {H}, D = {D}, Nq = 1\n")
    print("| B | Hkv | L | MB | sum µs | sum TB/s | cuDNN µs | cuDNN TB/s |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for b, hkv, l in POINTS:
        kv = torch.randn(2, b, hkv, l, D, device="cuda", dtype=torch.bfloat16)
        k, v = kv[0], kv[1]
        q = torch.randn(b, H, 1, D, device="cuda", dtype=torch.bfloat16)
        nbytes = kv.numel() * kv.element_size()
        read = do_bench(lambda: kv.sum(dtype=torch.float32), warmup=10, rep=50, return_mode="median")
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            run = lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=hkv != H)
            run()
            step = do_bench(run, warmup=10, rep=50, return_mode="median")
        print(f"| {b} | {hkv} | {l} | {nbytes / 1e6:.0f} | {read * 1e3:.1f} | {nbytes / read / 1e9:.2f} "
              f"| {step * 1e3:.1f} | {nbytes / step / 1e9:.2f} |")
        del kv, k, v, q
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
