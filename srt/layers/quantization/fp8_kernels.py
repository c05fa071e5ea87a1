"""Per-token FP8 quantization of activations in one kernel (the torch version is six kernels and a
padding copy, which cost more than the FP8 matmul saves at decode batch sizes).

One program per output row: a first pass over the row finds its largest |x|, a second writes
x / scale as float8_e4m3fn. Rows past M (the padding _scaled_mm needs) get zeros and a scale of 1.
"""

from __future__ import annotations

from typing import Tuple

import torch
import triton
import triton.language as tl

from sglang.srt.layers.quantization.fp8_math import FP8, FP8_MAX

_BLOCK = 1024


@triton.jit
def _per_token_quant_kernel(
    x_ptr,
    q_ptr,
    s_ptr,
    M,
    K,
    stride_xm,
    stride_qm,
    FP8_MAX_C: tl.constexpr,
    BLOCK: tl.constexpr,
):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    q_row = q_ptr + row.to(tl.int64) * stride_qm
    if row >= M:
        for k0 in range(0, K, BLOCK):
            kk = k0 + offs
            tl.store(
                q_row + kk, tl.zeros([BLOCK], tl.float32).to(q_ptr.dtype.element_ty), mask=kk < K
            )
        tl.store(s_ptr + row, 1.0)
        return
    x_row = x_ptr + row.to(tl.int64) * stride_xm
    amax = tl.zeros([BLOCK], tl.float32)
    for k0 in range(0, K, BLOCK):
        kk = k0 + offs
        x = tl.load(x_row + kk, mask=kk < K, other=0.0).to(tl.float32)
        amax = tl.maximum(amax, tl.abs(x))
    scale = tl.maximum(tl.max(amax, axis=0) / FP8_MAX_C, 1e-12)
    inv = 1.0 / scale
    for k0 in range(0, K, BLOCK):
        kk = k0 + offs
        x = tl.load(x_row + kk, mask=kk < K, other=0.0).to(tl.float32)
        q = tl.clamp(x * inv, -FP8_MAX_C, FP8_MAX_C)
        tl.store(q_row + kk, q.to(q_ptr.dtype.element_ty), mask=kk < K)
    tl.store(s_ptr + row, scale)


def per_token_quant_fp8(x: torch.Tensor, rows: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """x [M, K] -> (q [rows, K] fp8, s [rows, 1] float32) with rows >= M (padding rows are zero)."""
    m, k = x.shape
    assert rows >= m and x.stride(-1) == 1
    q = torch.empty(rows, k, dtype=FP8, device=x.device)
    s = torch.empty(rows, 1, dtype=torch.float32, device=x.device)
    if rows:
        _per_token_quant_kernel[(rows,)](
            x, q, s, m, k, x.stride(0), q.stride(0), FP8_MAX_C=FP8_MAX, BLOCK=_BLOCK, num_warps=4
        )
    return q, s


@triton.jit
def _per_group_quant_kernel(
    x_ptr,
    q_ptr,
    s_ptr,
    K,
    stride_xm,
    stride_qm,
    stride_sm,
    FP8_MAX_C: tl.constexpr,
    G: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    g = tl.program_id(1)
    kk = g * G + tl.arange(0, G)
    x = tl.load(x_ptr + row * stride_xm + kk, mask=kk < K, other=0.0).to(tl.float32)
    scale = tl.maximum(tl.max(tl.abs(x), axis=0) / FP8_MAX_C, 1e-12)
    q = tl.clamp(x / scale, -FP8_MAX_C, FP8_MAX_C)
    tl.store(q_ptr + row * stride_qm + kk, q.to(q_ptr.dtype.element_ty), mask=kk < K)
    tl.store(s_ptr + row * stride_sm + g, scale)


def per_token_group_quant_fp8(x: torch.Tensor, group: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """x [M, K] -> (q [M, K] fp8, s [M, ceil(K/group)] float32): one scale per token and K group,
    the activation side of a block-scaled matmul (group = the weight's block width)."""
    m, k = x.shape
    assert x.stride(-1) == 1 and group & (group - 1) == 0
    q = torch.empty(m, k, dtype=FP8, device=x.device)
    s = torch.empty(m, triton.cdiv(k, group), dtype=torch.float32, device=x.device)
    if m:
        _per_group_quant_kernel[(m, s.shape[1])](
            x,
            q,
            s,
            k,
            x.stride(0),
            q.stride(0),
            s.stride(0),
            FP8_MAX_C=FP8_MAX,
            G=group,
            num_warps=4,
        )
    return q, s
