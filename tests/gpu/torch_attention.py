#!/usr/bin/env python3
"""torch's scaled_dot_product_attention (its flash kernel, bf16, causal) forward and backward
at one shape: the baseline tests/gpu/run.sh sets ftc's attention kernels beside.

    python3 tests/gpu/torch_attention.py --shape 1,2048,28,4,128 --iters 20

--shape is B,S,H,HKV,D (batch, sequence, query heads, key and value heads, head dim), q as
[B, H, S, D] and k, v as [B, HKV, S, D] with enable_gqa (grouped queries without copying, as
ftc's kernels read them). Prints one JSON line: the mean milliseconds of a forward and of a
backward over --iters runs after as many warm-up runs (CUDA events), and the TFLOP/s each
reaches counting the causal half of the scores (forward 4·B·H·S²·D/2, backward 2.5 times it).

--dry-run checks the arguments and prints what it would time, without importing torch.
"""
import argparse
import json
import sys


def parse():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", required=True, help="B,S,H,HKV,D")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--dry-run", action="store_true")
    a = ap.parse_args()
    try:
        a.dims = [int(x) for x in a.shape.split(",")]
    except ValueError:
        ap.error(f"--shape {a.shape}: five whole numbers B,S,H,HKV,D")
    if len(a.dims) != 5 or min(a.dims) < 1:
        ap.error(f"--shape {a.shape}: five whole numbers B,S,H,HKV,D, each at least 1")
    if a.dims[2] % a.dims[3]:
        ap.error(f"--shape {a.shape}: the query heads are a multiple of the key heads")
    if a.iters < 1:
        ap.error("--iters must be at least 1")
    return a


def main():
    a = parse()
    B, S, H, HKV, D = a.dims
    fwd_flops = 4 * B * H * S * S * D / 2
    what = {"shape": {"B": B, "S": S, "H": H, "HKV": HKV, "D": D}, "causal": True, "iters": a.iters}
    if a.dry_run:
        print(json.dumps({"dry_run": True, **what}))
        return

    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    torch.manual_seed(0)
    q = torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(B, HKV, S, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn(B, HKV, S, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16)

    def timed(fn):
        for _ in range(a.iters):   # warm-up
            fn()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        total = 0.0
        for _ in range(a.iters):
            fn(start, end)
            torch.cuda.synchronize()
            total += start.elapsed_time(end)
        return total / a.iters

    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        def forward(start=None, end=None):
            if start:
                start.record()
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=HKV != H)
            if end:
                end.record()
            return y

        def backward(start=None, end=None):
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=HKV != H)
            if start:
                start.record()
            torch.autograd.grad(y, (q, k, v), dy)
            if end:
                end.record()

        fwd_ms, bwd_ms = timed(forward), timed(backward)
    print(json.dumps({**what, "fwd_ms": fwd_ms, "bwd_ms": bwd_ms,
                      "fwd_tflops": fwd_flops / fwd_ms * 1e-9, "bwd_tflops": 2.5 * fwd_flops / bwd_ms * 1e-9,
                      "device": torch.cuda.get_device_name(), "torch": torch.__version__}))


if __name__ == "__main__":
    sys.exit(main())
