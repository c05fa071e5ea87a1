"""Skinny matrix products (M <= 4 rows): y = x @ W^T (+ bias), for small-batch decode.

At batch 1-4 a decode step is one pass over the weights; each program streams a [BLOCK_N, K]
slice of W once, with 16-byte loads along K, and keeps one fp32 accumulator per row of x.

Why not cuBLAS: on the H200 its M = 1 kernels reach ~74% of copy bandwidth on the 4096-wide
matrices (profiled qkv 16.2 us, o_proj 10.8 + a 1.6 us split-K reduce) and cannot take part in
programmatic dependent launch. Here the first weight tile is loaded *before* `gdc_wait` (weights
never depend on the previous kernel), so with PDL each GEMV's weight stream starts while the
previous kernel drains; everything that reads x or writes y comes after the wait.

Tile configs per (N, K) come from `benchmark/kernels/bench_gemv.py` on the H200 (CONFIGS below);
SGLANG_GEMV_CONFIGS=<json file> overrides them (the sweep writes that file). The layers bind it for
single-row inputs only (batch-1 decode): at 4 rows these M = 1 tiles made a Llama-3-8B step 9.4 ms
against cuBLAS's 4.9 ms (four fp32 accumulators per tile), so M = 2..4 stay on cuBLAS until tuned.
"""

from __future__ import annotations

import json
import os
from typing import Dict, Optional, Tuple

import torch
import triton
import triton.language as tl

from sglang.srt.layers.triton_ops.pdl import pdl_args, pdl_wait

MAX_M = 4


@triton.jit
def _gemv_kernel(
    x_ptr,
    w_ptr,
    b_ptr,
    y_ptr,
    s_ptr,
    N,
    K,
    sxm,
    swn,
    sym,
    ssn,
    M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    PDL: tl.constexpr,
    SCALE: tl.constexpr = 0,
    SCALE_BN: tl.constexpr = 1,
    SCALE_BK: tl.constexpr = 1,
):
    pid = tl.program_id(0)
    rn = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    mn = rn < N
    # Rows past N read row N-1 (in bounds, never stored), so the weight loads need only the K mask.
    rows = tl.minimum(rn, N - 1).to(tl.int64)
    rk = tl.arange(0, BLOCK_K)
    w_rows = w_ptr + rows[:, None] * swn
    w = tl.load(w_rows + rk[None, :], mask=(rk < K)[None, :], other=0.0)
    pdl_wait(PDL)
    acc0 = tl.zeros([BLOCK_N], dtype=tl.float32)
    acc1 = tl.zeros([BLOCK_N], dtype=tl.float32)
    acc2 = tl.zeros([BLOCK_N], dtype=tl.float32)
    acc3 = tl.zeros([BLOCK_N], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + rk
        mk = kk < K
        wf = w.to(tl.float32)
        if SCALE == 2:  # fp8 weights with one scale per SCALE_BN x SCALE_BK block
            sb = tl.load(
                s_ptr + (rows // SCALE_BN)[:, None] * ssn + (kk // SCALE_BK)[None, :],
                mask=mk[None, :],
                other=0.0,
            )
            wf = wf * sb
        # Next tile issued before this tile's math (the last one is fully masked: no traffic).
        nk = kk + BLOCK_K
        w = tl.load(w_rows + nk[None, :], mask=(nk < K)[None, :], other=0.0)
        x0 = tl.load(x_ptr + kk, mask=mk, other=0.0).to(tl.float32)
        acc0 += tl.sum(wf * x0[None, :], axis=1)
        if M > 1:
            x1 = tl.load(x_ptr + sxm + kk, mask=mk, other=0.0).to(tl.float32)
            acc1 += tl.sum(wf * x1[None, :], axis=1)
        if M > 2:
            x2 = tl.load(x_ptr + 2 * sxm + kk, mask=mk, other=0.0).to(tl.float32)
            acc2 += tl.sum(wf * x2[None, :], axis=1)
        if M > 3:
            x3 = tl.load(x_ptr + 3 * sxm + kk, mask=mk, other=0.0).to(tl.float32)
            acc3 += tl.sum(wf * x3[None, :], axis=1)
    if SCALE == 1:  # fp8 weights with one scale per output row: applied once, to the sums
        srow = tl.load(s_ptr + rows)
        acc0 *= srow
        acc1 *= srow
        acc2 *= srow
        acc3 *= srow
    if HAS_BIAS:
        b = tl.load(b_ptr + rn, mask=mn, other=0.0).to(tl.float32)
        acc0 += b
        acc1 += b
        acc2 += b
        acc3 += b
    out_ty = y_ptr.dtype.element_ty
    tl.store(y_ptr + rn, acc0.to(out_ty), mask=mn)
    if M > 1:
        tl.store(y_ptr + sym + rn, acc1.to(out_ty), mask=mn)
    if M > 2:
        tl.store(y_ptr + 2 * sym + rn, acc2.to(out_ty), mask=mn)
    if M > 3:
        tl.store(y_ptr + 3 * sym + rn, acc3.to(out_ty), mask=mn)


DEFAULT_CONFIG = {"BLOCK_N": 8, "BLOCK_K": 512, "num_warps": 4}
# (N, K) -> launch config: the best of 27 at M = 1 in `bench_gemv.py` on the H200 (2026-12-03, graph-timed
# with PDL; us per call vs cuBLAS: qkv 13.8 vs 15.3, o_proj 9.6 vs 12.7, gate_up 53.5 vs 61.0,
# down 29.8 vs 31.3, lm_head 231 vs 240). Shapes not listed use DEFAULT_CONFIG.
CONFIGS: Dict[Tuple[int, int], dict] = {
    (6144, 4096): {"BLOCK_N": 16, "BLOCK_K": 512, "num_warps": 4},  # Llama-3-8B qkv
    (4096, 4096): {"BLOCK_N": 4, "BLOCK_K": 1024, "num_warps": 4},  # o_proj
    (28672, 4096): {"BLOCK_N": 16, "BLOCK_K": 256, "num_warps": 4},  # gate_up
    (4096, 14336): {"BLOCK_N": 4, "BLOCK_K": 1024, "num_warps": 4},  # down
    (128256, 4096): {"BLOCK_N": 4, "BLOCK_K": 512, "num_warps": 2},  # lm_head
}


def load_config_override(env_var: str, configs: dict) -> None:
    """Add the tile configs of the JSON file named by env_var (if set) to `configs`; its keys are
    the integer tuple joined by "x" (e.g. "4096x14336"), as the sweep scripts write them."""
    path = os.environ.get(env_var)
    if path and os.path.exists(path):
        with open(path) as f:
            for key, cfg in json.load(f).items():
                configs[tuple(int(v) for v in key.split("x"))] = cfg


load_config_override("SGLANG_GEMV_CONFIGS", CONFIGS)


def config_for(n: int, k: int) -> dict:
    return CONFIGS.get((n, k), DEFAULT_CONFIG)


def gemv(
    x: torch.Tensor,
    w: torch.Tensor,
    bias: Optional[torch.Tensor] = None,
    config: Optional[dict] = None,
    w_scale: Optional[torch.Tensor] = None,
    scale_block: Optional[Tuple[int, int]] = None,
) -> torch.Tensor:
    """x [M, K] (M <= 4, rows contiguous in K), w [N, K] contiguous -> [M, N].

    FP8 weights carry w_scale: [N] float32 per output row, or [ceil(N/bn), ceil(K/bk)] per block
    with scale_block = (bn, bk); the product is x @ (w * scale)^T."""
    m, k = x.shape
    n = w.shape[0]
    assert 1 <= m <= MAX_M and w.shape[1] == k and w.stride(1) == 1 and x.stride(1) == 1
    mode = 0 if w_scale is None else (2 if scale_block is not None else 1)
    if mode:
        assert w_scale.dtype == torch.float32 and w_scale.is_contiguous()
    cfg = dict(config_for(n, k), **(config or {}))
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    grid = (triton.cdiv(n, cfg["BLOCK_N"]),)
    launch = {"num_warps": cfg["num_warps"]}
    if "num_stages" in cfg:
        launch["num_stages"] = cfg["num_stages"]
    _gemv_kernel[grid](
        x,
        w,
        bias if bias is not None else w,
        y,
        w_scale if w_scale is not None else w,
        n,
        k,
        x.stride(0),
        w.stride(0),
        y.stride(0),
        w_scale.stride(0) if mode == 2 else 0,
        M=m,
        BLOCK_N=cfg["BLOCK_N"],
        BLOCK_K=cfg["BLOCK_K"],
        HAS_BIAS=bias is not None,
        SCALE=mode,
        SCALE_BN=scale_block[0] if mode == 2 else 1,
        SCALE_BK=scale_block[1] if mode == 2 else 1,
        **launch,
        **pdl_args(x),
    )
    return y


def gemv_ref(x: torch.Tensor, w: torch.Tensor, bias: Optional[torch.Tensor] = None) -> torch.Tensor:
    """w may be a dequantized fp8 weight (fp8_math.dequantize) for the scaled modes."""
    y = x.float() @ w.float().t()
    if bias is not None:
        y = y + bias.float()
    return y.to(x.dtype)
