"""Matmuls of a Llama-3-8B decode step at 2-64 rows: cuBLAS (F.linear) vs the tensor-core small-M
kernel (srt/layers/triton_ops/small_m_gemm.py) over a sweep of tile configs. Each is timed as 16
back-to-back calls inside one CUDA graph (PDL on where the device has it), rotating weight copies so
nothing is served from L2, and every config is checked against an fp32 reference first.

    python benchmark/kernels/bench_small_m.py [--m 8 64] [--out configs.json]

Prints us per call and TB/s of weight bytes; --out writes, per (N, K, BLOCK_M), the best config
of each shape where it beat cuBLAS by more than 2% (the format small_m_gemm.py reads from
SGLANG_SMALL_M_CONFIGS). Shapes where cuBLAS wins stay out, so `--skinny-matmul auto` keeps them.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_gemv import SHAPES, rotating_weights, sweep_configs

from sglang.srt.layers.triton_ops.small_m_gemm import block_m_for, small_m_matmul

LOOPS = [
    dict(PREFETCH=0, num_stages=3),
    dict(PREFETCH=0, num_stages=4),
    dict(PREFETCH=0, num_stages=5),
    dict(PREFETCH=1, num_stages=1),
    dict(PREFETCH=1, num_stages=3),
]
CONFIGS = [
    dict(BLOCK_N=bn, BLOCK_K=bk, num_warps=4, **loop)
    for bn, bk, loop in itertools.product((16, 32, 64), (64, 128, 256), LOOPS)
]
MARGIN = 0.98  # adopt a config only when it is at least 2% faster than cuBLAS


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--m", type=int, nargs="+", default=[8, 64])
    ap.add_argument("--shapes", nargs="+", default=["qkv", "o_proj", "gate_up", "down"])
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    adopted, rows = {}, []
    for name in args.shapes:
        n, k = SHAPES[name]
        ws = rotating_weights(n, k)
        for m in args.m:
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            t_cublas, results = sweep_configs(
                f"small-M {name} M{m}", small_m_matmul, x, ws, CONFIGS
            )
            t_best, cfg = results[0]
            if t_best < MARGIN * t_cublas:
                adopted[f"{n}x{k}x{block_m_for(m)}"] = cfg
            gb = n * k * 2 / 1e9
            rows.append(
                (
                    name,
                    m,
                    t_cublas,
                    gb / t_cublas * 1e3,
                    t_best,
                    gb / t_best * 1e3,
                    cfg,
                    [f"{t:.1f}" for t, _ in results[1:5]],
                )
            )
        del ws
        torch.cuda.empty_cache()
    print(
        f"{'matrix':8} {'M':>3} {'cuBLAS us':>9} {'TB/s':>5} {'ours us':>8} {'TB/s':>5} {'ratio':>6}  best config (next 4 us)"
    )
    for r in rows:
        print(
            f"{r[0]:8} {r[1]:>3} {r[2]:9.2f} {r[3]:5.2f} {r[4]:8.2f} {r[5]:5.2f} {r[2] / r[4]:5.2f}x  {r[6]} {r[7]}"
        )
    if args.out:
        with open(args.out, "w") as f:
            json.dump(adopted, f, indent=1)
        print(f"wrote {args.out}: {sorted(adopted)}")


if __name__ == "__main__":
    main()
