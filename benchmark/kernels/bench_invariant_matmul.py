"""The batch-invariant matmul's launch configs against cuBLAS on Llama-3-8B's linear shapes.

Deterministic inference runs every linear layer through one fixed config (invariant_matmul.py);
this table picks that config: us per product for each config at decode and prefill row counts,
the sum over one layer's four products, and cuBLAS (F.linear) in the same run as the peer. Each
config is also checked for row invariance (a row alone == the same row among 300).

    python benchmark/kernels/bench_invariant_matmul.py
"""

from __future__ import annotations

import argparse
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from sglang.srt.layers.triton_ops.invariant_matmul import (
    _CONFIG_CUDA,
    _CONFIG_CUDA_LARGE,
    _KEYS,
    LARGE_M,
    invariant_matmul,
)

# Llama-3-8B: qkv, o, gate_up, down as (N, K).
SHAPES = [(6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336)]
CONFIGS = [
    (64, 64, 128, 8, 4, 3),
    (64, 64, 64, 8, 4, 3),
    (128, 128, 64, 8, 8, 3),
    (128, 128, 128, 8, 8, 3),
    (128, 256, 64, 8, 8, 3),
    (64, 128, 128, 8, 4, 3),
    (32, 64, 128, 8, 4, 3),
    (16, 64, 128, 8, 4, 3),
]


def _time(fn, iters: int = 20) -> float:
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1000 / iters  # us


def _product(cfg: dict):
    g = torch.Generator(device="cuda").manual_seed(0)
    w = torch.randn(4096, 4096, device="cuda", generator=g).to(torch.bfloat16)
    x = torch.randn(300, 4096, device="cuda", generator=g).to(torch.bfloat16)
    return x, w, invariant_matmul(x, w, config=cfg)


def _invariant(cfg: dict) -> bool:
    x, w, full = _product(cfg)
    return all(
        torch.equal(full[i], invariant_matmul(x[i : i + 1], w, config=cfg)[0]) for i in (0, 77, 299)
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--m", type=int, nargs="+", default=[1, 8, 64, 512, 4096])
    ap.add_argument("--best-file", default=None, help="write the best invariant config here")
    args = ap.parse_args()
    dt = torch.bfloat16
    ws = {s: torch.randn(s, device="cuda").to(dt) * 0.02 for s in SHAPES}
    xs = {(m, k): torch.randn(m, k, device="cuda").to(dt) for m in args.m for _, k in SHAPES}
    rows = [("cublas", None)] + [(",".join(map(str, c)), dict(zip(_KEYS, c))) for c in CONFIGS]
    print(f"default config: {_CONFIG_CUDA}; above {LARGE_M} rows on sm_90: {_CONFIG_CUDA_LARGE}")
    first = dict(zip(_KEYS, CONFIGS[0]))
    print(f"same bits: each config's product against {CONFIGS[0]}'s")
    print(
        f"{'config':<22} {'invariant':>9} {'same bits':>9} "
        + " ".join(f"{'M=' + str(m) + ' us':>12}" for m in args.m)
    )
    scores = {}
    base = None
    for name, cfg in rows:
        per_m = []
        for m in args.m:
            total = 0.0
            for n, k in SHAPES:
                x, w = xs[(m, k)], ws[(n, k)]
                fn = (
                    (lambda: F.linear(x, w))
                    if cfg is None
                    else (lambda: invariant_matmul(x, w, config=cfg))
                )
                total += _time(fn)
            per_m.append(total)
        inv = "-" if cfg is None else str(_invariant(cfg))
        same = "-" if cfg is None else str(torch.equal(_product(cfg)[2], _product(first)[2]))
        print(f"{name:<22} {inv:>9} {same:>9} " + " ".join(f"{t:>12.1f}" for t in per_m))
        if cfg is None:
            base = per_m
        elif inv == "True":  # geometric mean of the slowdown against cuBLAS over the row counts
            ratios = [t / b for t, b in zip(per_m, base)]
            scores[name] = float(torch.tensor(ratios).log().mean().exp())
    best = min(scores, key=scores.get)
    print(
        "slowdown vs cuBLAS (geomean over M): "
        + ", ".join(f"{k} {v:.2f}x" for k, v in scores.items())
    )
    print(f"best: {best}")
    if args.best_file:
        with open(args.best_file, "w") as f:
            f.write(best)


if __name__ == "__main__":
    main()
