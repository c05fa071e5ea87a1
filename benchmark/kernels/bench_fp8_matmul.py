"""FP8 matmuls of a Llama-3-8B decode step at 1-256 rows: bf16 cuBLAS, the default FP8 paths
(one-row GEMV, `_scaled_mm` with per-token activation quant) and the Triton FP8 x FP8 kernel
(srt/layers/quantization/fp8_gemm.py, activation quant included) over a sweep of tiles, plus the
block-scaled (128 x 128) kernel of FP8 checkpoints. Timed as 16 back-to-back calls in one CUDA
graph over rotating weight copies (nothing served from L2); every variant is checked against the
fp32 product of the dequantized weights first.

    python benchmark/kernels/bench_fp8_matmul.py [--m 1 8 64 256] [--out fp8_gemm_configs.json]

Prints us per call and the ratio to the floor (the fp8 weight bytes at --bw); --out writes the
best Triton config per (N, K, BLOCK_M) where it beat the default FP8 path (the format fp8_gemm.py
reads from SGLANG_FP8_GEMM_CONFIGS).
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path
from typing import Callable, List, Tuple

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_gemv import SHAPES, graph_time_us, rotating_fp8_weights

from sglang.srt.layers.quantization.fp8_cuda import (
    blockwise_matmul,
    channelwise_matmul,
    scaled_mm_rowwise,
)
from sglang.srt.layers.quantization.fp8_gemm import block_m_for, fp8_matmul
from sglang.srt.layers.quantization.fp8_gemv import fp8_gemv
from sglang.srt.layers.quantization.fp8_kernels import (
    per_token_group_quant_fp8,
    per_token_quant_fp8,
)
from sglang.srt.layers.quantization.fp8_math import (
    dequantize,
)
from sglang.srt.layers.triton_ops.gemv import gemv

TILES = [
    dict(BLOCK_N=bn, BLOCK_K=bk, num_warps=4, num_stages=st)
    for bn, bk, st in itertools.product((32, 64, 128), (128, 256), (3, 5))
]


def _check(label: str, out: torch.Tensor, ref: torch.Tensor) -> None:
    err = float((out.float() - ref).norm() / ref.norm())
    if not err < 3e-2:
        raise SystemExit(f"{label}: rel err {err:.3g} against the dequantized reference")


def _sweep(x, ws, m: int, n: int, k: int, block=None) -> List[Tuple[float, dict]]:
    """(us, config) of the Triton kernel (channel scales, or block scales when block is given:
    BLOCK_K is then the block width), activation quant included, fastest first."""
    res = []
    tiles = TILES if block is None else [t for t in TILES if t["BLOCK_K"] == 128]
    for tile in tiles:
        for bm in sorted({block_m_for(m), 16 if m <= 64 else 64}):
            cfg = dict(tile, BLOCK_M=bm)
            if bm == 128:
                cfg["num_warps"] = 8

            def call(wq, cfg=cfg):
                if block is not None:
                    xq, xs = per_token_group_quant_fp8(x, block[1])
                else:
                    xq, xs = per_token_quant_fp8(x, m)
                return fp8_matmul(xq, xs, wq[0], wq[1], x.dtype, block=block, config=cfg)

            try:
                res.append((graph_time_us(call, ws), cfg))
            except Exception:  # noqa: BLE001 - a tile that does not build (shared memory) is skipped
                torch.cuda.synchronize()
    return sorted(res, key=lambda r: r[0])


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--m", type=int, nargs="+", default=[1, 8, 64, 256])
    ap.add_argument("--shapes", nargs="+", default=["qkv", "o_proj", "gate_up", "down"])
    ap.add_argument("--bw", type=float, default=4.21e12, help="copy bandwidth for the floor (B/s)")
    ap.add_argument("--no-sweep", action="store_true", help="default tiles only")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    rows, adopted = [], {}
    for name in args.shapes:
        n, k = SHAPES[name]
        floor_us = n * k / args.bw * 1e6
        pc = rotating_fp8_weights(n, k)
        bl = rotating_fp8_weights(n, k, (128, 128))
        w16 = [dequantize(q, s).to(torch.bfloat16) for q, s in pc[:2]]
        for m in args.m:
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            ref_pc = x.float() @ dequantize(*pc[0]).t()
            ref_bl = x.float() @ dequantize(*bl[0], (128, 128)).t()
            variants: List[Tuple[str, Callable, list, torch.Tensor]] = [
                ("bf16 cuBLAS (2 copies)", lambda w: torch.nn.functional.linear(x, w), w16, None),
                ("fp8 _scaled_mm", lambda w: scaled_mm_rowwise(x, w[0], w[1]), pc, ref_pc),
                ("fp8 triton default", lambda w: channelwise_matmul(x, w[0], w[1]), pc, ref_pc),
                (
                    "fp8 block triton",
                    lambda w: blockwise_matmul(x, w[0], w[1], (128, 128)),
                    bl,
                    ref_bl,
                ),
            ]
            if m == 1:
                variants.append(
                    ("fp8 gemv", lambda w: gemv(x, w[0], None, w_scale=w[1]), pc, ref_pc)
                )
                variants.append(
                    (
                        "fp8 block gemv",
                        lambda w: gemv(x, w[0], None, w_scale=w[1], scale_block=(128, 128)),
                        bl,
                        ref_bl,
                    )
                )
                variants.append(("fp8 word gemv", lambda w: fp8_gemv(x, w[0], w[1]), pc, ref_pc))
                variants.append(
                    (
                        "fp8 block word gemv",
                        lambda w: fp8_gemv(x, w[0], w[1], (128, 128)),
                        bl,
                        ref_bl,
                    )
                )
            times = {}
            for label, fn, ws, ref in variants:
                if ref is not None:
                    _check(f"{name} M{m} {label}", fn(ws[0]), ref)
                times[label] = graph_time_us(fn, ws)
            default = times["fp8 gemv"] if m == 1 else times["fp8 _scaled_mm"]
            if not args.no_sweep:
                swept = _sweep(x, pc, m, n, k)
                if swept:
                    t, cfg = swept[0]
                    _check(
                        f"{name} M{m} {cfg}",
                        fp8_matmul(*per_token_quant_fp8(x, m), *pc[0], x.dtype, config=cfg),
                        ref_pc,
                    )
                    times["fp8 triton best"] = t
                    if t < 0.98 * default:
                        adopted[f"{n}x{k}x{block_m_for(m)}"] = {kk: v for kk, v in cfg.items()}
                    times["best config"] = cfg
            if not args.no_sweep and m > 1:
                swept = _sweep(x, bl, m, n, k, block=(128, 128))
                if swept:
                    t, cfg = swept[0]
                    times["fp8 block triton best"] = t
                    if t < 0.98 * times["fp8 block triton"]:
                        adopted[f"{n}x{k}x{block_m_for(m)}x128"] = dict(cfg)
                    times["best block config"] = cfg
            rows.append((name, m, floor_us, times))
        del pc, bl, w16
        torch.cuda.empty_cache()
    extra = ["fp8 gemv", "fp8 block gemv", "fp8 word gemv", "fp8 block word gemv"]
    extra.append("fp8 block triton best")
    labels = [lab for lab in rows[0][3] if "config" not in lab] + extra
    labels = list(dict.fromkeys(labels))
    print(f"floor: fp8 weight bytes at {args.bw / 1e12:.2f} TB/s; cells: us (ratio to floor)")
    print(f"{'matrix':8} {'M':>3} {'floor':>6}  " + "  ".join(f"{lab:>22}" for lab in labels))
    for name, m, floor_us, t in rows:
        cells = [
            f"{t[lab]:9.1f} ({t[lab] / floor_us:4.2f}x)    " if lab in t else f"{'-':>22}"
            for lab in labels
        ]
        print(
            f"{name:8} {m:>3} {floor_us:6.1f}  "
            + "  ".join(cells)
            + f"  {t.get('best config', '')} {t.get('best block config', '')}"
        )
    if args.out:
        with open(args.out, "w") as f:
            json.dump(adopted, f, indent=1)
        print(f"wrote {args.out}: {sorted(adopted)}")


if __name__ == "__main__":
    main()
