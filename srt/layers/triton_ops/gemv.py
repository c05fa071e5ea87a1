"""Skinny matrix products (M <= 4 rows): y = x @ W^T (+ bias), for small-batch decode.

At batch 1-4 a decode step is one pass over the weights; each program streams a [BLOCK_N, K]
slice of W once, with 16-byte loads along K, and keeps one fp32 accumulator per row of x.
"""

from __future__ import annotations

from typing import Optional

import torch
import triton
import triton.language as tl

MAX_M = 4


@triton.jit
def _gemv_kernel(x_ptr, w_ptr, b_ptr, y_ptr, N, K, sxm, swn, sym,
                 M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, HAS_BIAS: tl.constexpr):
    pid = tl.program_id(0)
    rn = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    mn = rn < N
    rk = tl.arange(0, BLOCK_K)
    acc0 = tl.zeros([BLOCK_N], dtype=tl.float32)
    acc1 = tl.zeros([BLOCK_N], dtype=tl.float32)
    acc2 = tl.zeros([BLOCK_N], dtype=tl.float32)
    acc3 = tl.zeros([BLOCK_N], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + rk
        mk = kk < K
        w = tl.load(w_ptr + rn[:, None] * swn + kk[None, :], mask=mn[:, None] & mk[None, :], other=0.0).to(tl.float32)
        x0 = tl.load(x_ptr + kk, mask=mk, other=0.0).to(tl.float32)
        acc0 += tl.sum(w * x0[None, :], axis=1)
        if M > 1:
            x1 = tl.load(x_ptr + sxm + kk, mask=mk, other=0.0).to(tl.float32)
            acc1 += tl.sum(w * x1[None, :], axis=1)
        if M > 2:
            x2 = tl.load(x_ptr + 2 * sxm + kk, mask=mk, other=0.0).to(tl.float32)
            acc2 += tl.sum(w * x2[None, :], axis=1)
        if M > 3:
            x3 = tl.load(x_ptr + 3 * sxm + kk, mask=mk, other=0.0).to(tl.float32)
            acc3 += tl.sum(w * x3[None, :], axis=1)
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


def gemv(x: torch.Tensor, w: torch.Tensor, bias: Optional[torch.Tensor] = None,
         config: Optional[dict] = None) -> torch.Tensor:
    """x [M, K] (M <= 4, rows contiguous in K), w [N, K] contiguous -> [M, N]."""
    m, k = x.shape
    n = w.shape[0]
    assert 1 <= m <= MAX_M and w.shape[1] == k and w.stride(1) == 1 and x.stride(1) == 1
    cfg = dict(DEFAULT_CONFIG, **(config or {}))
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    grid = (triton.cdiv(n, cfg["BLOCK_N"]),)
    _gemv_kernel[grid](x, w, bias if bias is not None else w, y, n, k, x.stride(0), w.stride(0), y.stride(0),
                       M=m, BLOCK_N=cfg["BLOCK_N"], BLOCK_K=cfg["BLOCK_K"], HAS_BIAS=bias is not None,
                       num_warps=cfg["num_warps"])
    return y


def gemv_ref(x: torch.Tensor, w: torch.Tensor, bias: Optional[torch.Tensor] = None) -> torch.Tensor:
    y = x.float() @ w.float().t()
    if bias is not None:
        y = y + bias.float()
    return y.to(x.dtype)
