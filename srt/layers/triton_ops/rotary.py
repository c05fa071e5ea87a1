"""Rotary position embedding (neox / rotate-half layout), applied in place to q and k.

cos_sin_cache [max_pos, R] holds cos(pos * f_i) in columns [0, R/2) and sin(pos * f_i) in
[R/2, R); R is the rotary dim (<= head_size; head dims past R are left untouched). For each head:
    x1, x2 = x[:R/2], x[R/2:R]
    x1' = x1 * cos - x2 * sin
    x2' = x2 * cos + x1 * sin
One program per token rotates all its q and k heads, so cos/sin are loaded once per token.
With qk_norm weights (Qwen3), each head is first RMS-normalised over its head_size in fp32 and
rounded to the activation dtype, as a separate RMSNorm kernel would have written it (full-width
rotary only): the two norm launches per layer fold into the rotary one.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch
import triton
import triton.language as tl

from sglang.srt.layers.triton_ops.kv_store import store_head_rows
from sglang.srt.layers.triton_ops.pdl import pdl_args, pdl_wait


@triton.jit
def _rotate_heads(
    X,
    stride_x,
    tok,
    cos,
    sin,
    n_heads,
    W,
    eps,
    HEAD_SIZE: tl.constexpr,
    HALF: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_HALF: tl.constexpr,
    NORM: tl.constexpr,
):
    offs_h = tl.arange(0, BLOCK_H)
    offs_r = tl.arange(0, BLOCK_HALF)
    mask = (offs_h[:, None] < n_heads) & (offs_r[None, :] < HALF)
    p1 = X + tok * stride_x + offs_h[:, None] * HEAD_SIZE + offs_r[None, :]
    p2 = p1 + HALF
    x1 = tl.load(p1, mask=mask, other=0.0)
    x2 = tl.load(p2, mask=mask, other=0.0)
    x1f = x1.to(tl.float32)
    x2f = x2.to(tl.float32)
    if NORM:  # the halves are the whole head (full-width rotary)
        ss = tl.sum(x1f * x1f, axis=1) + tl.sum(x2f * x2f, axis=1)
        rstd = tl.rsqrt(ss / HEAD_SIZE + eps)[:, None]
        mask_r = offs_r < HALF
        w1 = tl.load(W + offs_r, mask=mask_r, other=0.0).to(tl.float32)[None, :]
        w2 = tl.load(W + HALF + offs_r, mask=mask_r, other=0.0).to(tl.float32)[None, :]
        x1f = (x1f * rstd * w1).to(x1.dtype).to(tl.float32)
        x2f = (x2f * rstd * w2).to(x2.dtype).to(tl.float32)
    r1 = (x1f * cos[None, :] - x2f * sin[None, :]).to(x1.dtype)
    r2 = (x2f * cos[None, :] + x1f * sin[None, :]).to(x2.dtype)
    tl.store(p1, r1, mask=mask)
    tl.store(p2, r2, mask=mask)
    return r1, r2  # the rounded halves [BLOCK_H, BLOCK_HALF], as stored


@triton.jit
def _rotary_kernel(
    Pos,
    Q,
    K,
    Cache,
    QW,
    KW,
    eps,
    stride_q,
    stride_k,
    stride_c,
    n_q_heads,
    n_k_heads,
    HEAD_SIZE: tl.constexpr,
    HALF: tl.constexpr,
    BLOCK_HQ: tl.constexpr,
    BLOCK_HK: tl.constexpr,
    BLOCK_HALF: tl.constexpr,
    NORM: tl.constexpr,
    PDL: tl.constexpr,
):
    tok = tl.program_id(0).to(tl.int64)
    pdl_wait(PDL)
    pos = tl.load(Pos + tok).to(tl.int64)
    offs_r = tl.arange(0, BLOCK_HALF)
    mask_r = offs_r < HALF
    cos = tl.load(Cache + pos * stride_c + offs_r, mask=mask_r, other=0.0).to(tl.float32)
    sin = tl.load(Cache + pos * stride_c + HALF + offs_r, mask=mask_r, other=0.0).to(tl.float32)
    _rotate_heads(
        Q, stride_q, tok, cos, sin, n_q_heads, QW, eps, HEAD_SIZE, HALF, BLOCK_HQ, BLOCK_HALF, NORM
    )
    _rotate_heads(
        K, stride_k, tok, cos, sin, n_k_heads, KW, eps, HEAD_SIZE, HALF, BLOCK_HK, BLOCK_HALF, NORM
    )


def apply_rotary_emb_(
    positions: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    head_size: int,
    cos_sin_cache: torch.Tensor,
    qk_norm: Optional[Tuple[torch.Tensor, torch.Tensor, float]] = None,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Rotate q [N, Hq*head_size] and k [N, Hk*head_size] in place (rows may be strided views, e.g.
    slices of a fused qkv output; each row's heads must be contiguous). qk_norm (q weight, k weight
    [head_size], eps): RMS-normalise each head first (full-width rotary only). Returns (q, k)."""
    n = positions.shape[0]
    assert q.shape[0] == n and k.shape[0] == n and q.stride(-1) == 1 and k.stride(-1) == 1
    assert q.shape[-1] % head_size == 0 and k.shape[-1] % head_size == 0
    rot = cos_sin_cache.shape[-1]
    assert rot % 2 == 0 and rot <= head_size and cos_sin_cache.stride(-1) == 1
    assert qk_norm is None or rot == head_size, "the fused q / k norm needs a full-width rotary"
    if n == 0:
        return q, k
    n_q, n_k = q.shape[-1] // head_size, k.shape[-1] // head_size
    half = rot // 2
    block_half = triton.next_power_of_2(half)
    block_hq = triton.next_power_of_2(n_q)
    num_warps = 1 if not q.is_cuda else min(8, max(1, block_hq * block_half // 256))
    qw, kw, eps = qk_norm if qk_norm is not None else (q, k, 0.0)
    _rotary_kernel[(n,)](
        positions,
        q,
        k,
        cos_sin_cache,
        qw,
        kw,
        eps,
        q.stride(0),
        k.stride(0),
        cos_sin_cache.stride(0),
        n_q,
        n_k,
        HEAD_SIZE=head_size,
        HALF=half,
        BLOCK_HQ=block_hq,
        BLOCK_HK=triton.next_power_of_2(n_k),
        BLOCK_HALF=block_half,
        NORM=qk_norm is not None,
        num_warps=num_warps,
        **pdl_args(q),
    )
    return q, k


@triton.jit
def _rotary_store_kernel(
    Pos,
    Q,
    K,
    V,
    Cache,
    KBuf,
    VBuf,
    Loc,
    QW,
    KW,
    eps,
    stride_q,
    stride_k,
    stride_v,
    stride_c,
    stride_kbt,
    stride_kbh,
    stride_vbt,
    stride_vbh,
    inv_k_scale,
    inv_v_scale,
    n_q_heads,
    n_k_heads,
    HEAD_SIZE: tl.constexpr,
    HALF: tl.constexpr,
    DV: tl.constexpr,
    BLOCK_HQ: tl.constexpr,
    BLOCK_HK: tl.constexpr,
    BLOCK_HALF: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    SCALED: tl.constexpr,
    NORM: tl.constexpr,
    PDL: tl.constexpr,
):
    """Full-width rotary of one token's q (in place) and k (in place and into the pool slot), and its
    v into the pool: the decode step's rotary and KV store in one launch."""
    tok = tl.program_id(0).to(tl.int64)
    pdl_wait(PDL)
    pos = tl.load(Pos + tok).to(tl.int64)
    slot = tl.load(Loc + tok).to(tl.int64)
    offs_r = tl.arange(0, BLOCK_HALF)
    mask_r = offs_r < HALF
    cos = tl.load(Cache + pos * stride_c + offs_r, mask=mask_r, other=0.0).to(tl.float32)
    sin = tl.load(Cache + pos * stride_c + HALF + offs_r, mask=mask_r, other=0.0).to(tl.float32)
    _rotate_heads(
        Q, stride_q, tok, cos, sin, n_q_heads, QW, eps, HEAD_SIZE, HALF, BLOCK_HQ, BLOCK_HALF, NORM
    )
    r1, r2 = _rotate_heads(
        K, stride_k, tok, cos, sin, n_k_heads, KW, eps, HEAD_SIZE, HALF, BLOCK_HK, BLOCK_HALF, NORM
    )
    # The pool gets the rounded rotated k from registers (a re-read of K here could race with other
    # threads' in-place stores), exactly what a separate store of k would have written.
    offs_h = tl.arange(0, BLOCK_HK)
    mask = (offs_h[:, None] < n_k_heads) & mask_r[None, :]
    if SCALED:
        r1 = r1.to(tl.float32) * inv_k_scale
        r2 = r2.to(tl.float32) * inv_k_scale
    d1 = KBuf + slot * stride_kbt + offs_h[:, None] * stride_kbh + offs_r[None, :]
    tl.store(d1, r1.to(KBuf.dtype.element_ty), mask=mask)
    tl.store(d1 + HALF, r2.to(KBuf.dtype.element_ty), mask=mask)
    store_head_rows(
        V + tok * stride_v,
        DV,
        VBuf + slot * stride_vbt,
        stride_vbh,
        inv_v_scale,
        n_k_heads,
        DV,
        BLOCK_HK,
        BLOCK_DV,
        SCALED,
    )


def apply_rotary_emb_and_store_(
    positions: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    head_size: int,
    cos_sin_cache: torch.Tensor,
    k_buffer: torch.Tensor,
    v_buffer: torch.Tensor,
    loc: torch.Tensor,
    k_scale: float = 1.0,
    v_scale: float = 1.0,
    qk_norm: Optional[Tuple[torch.Tensor, torch.Tensor, float]] = None,
) -> None:
    """apply_rotary_emb_ on q and k (in place; qk_norm as there), then k_buffer[loc] = k / k_scale and
    v_buffer[loc] = v / v_scale, in one kernel. Full-width rotary only (rotary dim == head_size).
    q [N, Hq*D], k [N, Hk*D], v [N, Hk*Dv] (strided rows allowed); buffers [slots, Hk, D / Dv]."""
    n = positions.shape[0]
    rot = cos_sin_cache.shape[-1]
    assert rot == head_size, "the fused rotary + store needs a full-width rotary"
    assert q.shape[0] == n and k.shape[0] == n and v.shape[0] == n and loc.shape == (n,)
    for t in (q, k, v, cos_sin_cache, k_buffer, v_buffer):
        assert t.stride(-1) == 1, "last dimension must be contiguous"
    n_q, n_k = q.shape[-1] // head_size, k.shape[-1] // head_size
    dv = v_buffer.shape[2]
    assert (
        k_buffer.shape[1:] == (n_k, head_size)
        and v_buffer.shape[1] == n_k
        and v.shape[-1] == n_k * dv
    )
    if n == 0:
        return
    half = rot // 2
    block_hq = triton.next_power_of_2(n_q)
    block_half = triton.next_power_of_2(half)
    scaled = (
        k_scale != 1.0
        or v_scale != 1.0
        or k_buffer.element_size() == 1
        or v_buffer.element_size() == 1
    )
    qw, kw, eps = qk_norm if qk_norm is not None else (q, k, 0.0)
    _rotary_store_kernel[(n,)](
        positions,
        q,
        k,
        v,
        cos_sin_cache,
        k_buffer,
        v_buffer,
        loc,
        qw,
        kw,
        eps,
        q.stride(0),
        k.stride(0),
        v.stride(0),
        cos_sin_cache.stride(0),
        k_buffer.stride(0),
        k_buffer.stride(1),
        v_buffer.stride(0),
        v_buffer.stride(1),
        1.0 / k_scale,
        1.0 / v_scale,
        n_q,
        n_k,
        HEAD_SIZE=head_size,
        HALF=half,
        DV=dv,
        BLOCK_HQ=block_hq,
        BLOCK_HK=triton.next_power_of_2(n_k),
        BLOCK_HALF=block_half,
        BLOCK_DV=triton.next_power_of_2(dv),
        SCALED=scaled,
        NORM=qk_norm is not None,
        num_warps=1 if not q.is_cuda else min(8, max(1, block_hq * block_half // 256)),
        **pdl_args(q),
    )


def build_cos_sin_cache(
    max_pos: int,
    rotary_dim: int,
    base: float = 10000.0,
    dtype: torch.dtype = torch.float32,
    device=None,
) -> torch.Tensor:
    """[max_pos, rotary_dim] = cat(cos, sin) of pos * base^(-2i/rotary_dim) (no RoPE scaling)."""
    inv_freq = base ** (
        -torch.arange(0, rotary_dim, 2, dtype=torch.float64, device=device) / rotary_dim
    )
    freqs = torch.arange(max_pos, dtype=torch.float64, device=device)[:, None] * inv_freq[None, :]
    return torch.cat([freqs.cos(), freqs.sin()], dim=-1).to(dtype)


def _rotate_ref(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, head_size: int
) -> torch.Tensor:
    n = x.shape[0]
    xh = x.reshape(n, -1, head_size).float()
    half = cos.shape[-1]
    x1, x2 = xh[..., :half], xh[..., half : 2 * half]
    c, s = cos[:, None, :], sin[:, None, :]
    rotated = torch.cat([x1 * c - x2 * s, x2 * c + x1 * s, xh[..., 2 * half :]], dim=-1)
    return rotated.reshape(n, -1).to(x.dtype)


def apply_rotary_emb_ref(
    positions: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    head_size: int,
    cos_sin_cache: torch.Tensor,
    qk_norm: Optional[Tuple[torch.Tensor, torch.Tensor, float]] = None,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Out-of-place torch twin of apply_rotary_emb_."""
    cs = cos_sin_cache[positions.long()].float()
    half = cs.shape[-1] // 2
    cos, sin = cs[:, :half], cs[:, half:]
    if qk_norm is not None:
        qw, kw, eps = qk_norm
        q, k = head_rms_norm(q, qw, eps, head_size), head_rms_norm(k, kw, eps, head_size)
    return _rotate_ref(q, cos, sin, head_size), _rotate_ref(k, cos, sin, head_size)


def head_rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float, head_size: int) -> torch.Tensor:
    """RMSNorm of each head of x [N, H*head_size] over its head_size, fp32 math, rounded once."""
    n = x.shape[0]
    xf = x.reshape(n, -1, head_size).float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()
    return y.to(x.dtype).reshape(n, -1)
