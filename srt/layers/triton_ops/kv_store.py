"""Scatter of one layer's new K/V rows into the token-slot pool: buffer[loc[i]] = row i.

The Triton kernel copies one token's K and V rows per program and casts to the buffer dtype on the
way (an fp8 pool stores K / k_scale and V / v_scale); store_kv_ref (index_put) is the twin and may
be just as fast (measure before choosing).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from sglang.srt.layers.triton_ops.pdl import pdl_args, pdl_wait


@triton.jit
def store_head_rows(
    src,
    stride_sh,
    dst,
    stride_dh,
    inv_scale,
    n_heads,
    D: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_D: tl.constexpr,
    SCALED: tl.constexpr,
):
    """dst[h, :D] = src[h, :D] for h < n_heads (src / dst point at one token's row), cast to dst's dtype;
    SCALED quantises through fp32 (x * inv_scale), as fp8 pools need."""
    offs_h = tl.arange(0, BLOCK_H)
    offs_d = tl.arange(0, BLOCK_D)
    m = (offs_h[:, None] < n_heads) & (offs_d[None, :] < D)
    x = tl.load(src + offs_h[:, None] * stride_sh + offs_d[None, :], mask=m)
    if SCALED:
        x = x.to(tl.float32) * inv_scale
    tl.store(
        dst + offs_h[:, None] * stride_dh + offs_d[None, :], x.to(dst.dtype.element_ty), mask=m
    )


@triton.jit
def _store_kv_kernel(
    KBuf,
    VBuf,
    Loc,
    K,
    V,
    stride_kbt,
    stride_kbh,
    stride_vbt,
    stride_vbh,
    stride_kt,
    stride_kh,
    stride_vt,
    stride_vh,
    inv_k_scale,
    inv_v_scale,
    H: tl.constexpr,
    D: tl.constexpr,
    DV: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    SCALED: tl.constexpr,
    PDL: tl.constexpr,
):
    i = tl.program_id(0).to(tl.int64)
    pdl_wait(PDL)
    slot = tl.load(Loc + i).to(tl.int64)
    store_head_rows(
        K + i * stride_kt,
        stride_kh,
        KBuf + slot * stride_kbt,
        stride_kbh,
        inv_k_scale,
        H,
        D,
        BLOCK_H,
        BLOCK_D,
        SCALED,
    )
    store_head_rows(
        V + i * stride_vt,
        stride_vh,
        VBuf + slot * stride_vbt,
        stride_vbh,
        inv_v_scale,
        H,
        DV,
        BLOCK_H,
        BLOCK_DV,
        SCALED,
    )


def store_kv(
    k_buffer: torch.Tensor,
    v_buffer: torch.Tensor,
    loc: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    k_scale: float = 1.0,
    v_scale: float = 1.0,
) -> None:
    """k_buffer[loc] = k / k_scale; v_buffer[loc] = v / v_scale (cast to the buffer dtype).
    k [N, H_kv, D], v [N, H_kv, Dv] (strided rows allowed, last dim contiguous); loc [N] int slot
    ids. Duplicate slots give an unspecified winner."""
    n, h, d = k.shape
    dv = v.shape[2]
    assert loc.shape == (n,) and v.shape[:2] == (n, h)
    assert k_buffer.shape[1:] == (h, d) and v_buffer.shape[1:] == (h, dv)
    for t in (k_buffer, v_buffer, k, v):
        assert t.stride(-1) == 1, "last dimension must be contiguous"
    if n == 0:
        return
    _store_kv_kernel[(n,)](
        k_buffer,
        v_buffer,
        loc,
        k,
        v,
        k_buffer.stride(0),
        k_buffer.stride(1),
        v_buffer.stride(0),
        v_buffer.stride(1),
        k.stride(0),
        k.stride(1),
        v.stride(0),
        v.stride(1),
        1.0 / k_scale,
        1.0 / v_scale,
        H=h,
        D=d,
        DV=dv,
        BLOCK_H=triton.next_power_of_2(h),
        BLOCK_D=triton.next_power_of_2(d),
        # fp8 destinations always go through fp32 (a direct bf16 -> fp8 cast is not on every target).
        BLOCK_DV=triton.next_power_of_2(dv),
        SCALED=k_scale != 1.0
        or v_scale != 1.0
        or k_buffer.element_size() == 1
        or v_buffer.element_size() == 1,
        num_warps=4 if k.is_cuda else 1,
        **pdl_args(k),
    )


def store_kv_ref(
    k_buffer: torch.Tensor,
    v_buffer: torch.Tensor,
    loc: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    k_scale: float = 1.0,
    v_scale: float = 1.0,
) -> None:
    if k_scale != 1.0 or v_scale != 1.0:
        k, v = k.float() / k_scale, v.float() / v_scale
    k_buffer[loc] = k.to(k_buffer.dtype)
    v_buffer[loc] = v.to(v_buffer.dtype)
