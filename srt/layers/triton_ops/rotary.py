"""Rotary position embedding (neox / rotate-half layout), applied in place to q and k.

cos_sin_cache [max_pos, R] holds cos(pos * f_i) in columns [0, R/2) and sin(pos * f_i) in
[R/2, R); R is the rotary dim (<= head_size; head dims past R are left untouched). For each head:
    x1, x2 = x[:R/2], x[R/2:R]
    x1' = x1 * cos - x2 * sin
    x2' = x2 * cos + x1 * sin
One program per token rotates all its q and k heads, so cos/sin are loaded once per token.
"""

from __future__ import annotations

from typing import Tuple

import torch
import triton
import triton.language as tl


@triton.jit
def _rotate_heads(X, stride_x, tok, cos, sin, n_heads, HEAD_SIZE: tl.constexpr, HALF: tl.constexpr,
                  BLOCK_H: tl.constexpr, BLOCK_HALF: tl.constexpr):
    offs_h = tl.arange(0, BLOCK_H)
    offs_r = tl.arange(0, BLOCK_HALF)
    mask = (offs_h[:, None] < n_heads) & (offs_r[None, :] < HALF)
    p1 = X + tok * stride_x + offs_h[:, None] * HEAD_SIZE + offs_r[None, :]
    p2 = p1 + HALF
    x1 = tl.load(p1, mask=mask, other=0.0)
    x2 = tl.load(p2, mask=mask, other=0.0)
    x1f = x1.to(tl.float32)
    x2f = x2.to(tl.float32)
    tl.store(p1, (x1f * cos[None, :] - x2f * sin[None, :]).to(x1.dtype), mask=mask)
    tl.store(p2, (x2f * cos[None, :] + x1f * sin[None, :]).to(x2.dtype), mask=mask)


@triton.jit
def _rotary_kernel(Pos, Q, K, Cache, stride_q, stride_k, stride_c, n_q_heads, n_k_heads,
                   HEAD_SIZE: tl.constexpr, HALF: tl.constexpr,
                   BLOCK_HQ: tl.constexpr, BLOCK_HK: tl.constexpr, BLOCK_HALF: tl.constexpr):
    tok = tl.program_id(0).to(tl.int64)
    pos = tl.load(Pos + tok).to(tl.int64)
    offs_r = tl.arange(0, BLOCK_HALF)
    mask_r = offs_r < HALF
    cos = tl.load(Cache + pos * stride_c + offs_r, mask=mask_r, other=0.0).to(tl.float32)
    sin = tl.load(Cache + pos * stride_c + HALF + offs_r, mask=mask_r, other=0.0).to(tl.float32)
    _rotate_heads(Q, stride_q, tok, cos, sin, n_q_heads, HEAD_SIZE, HALF, BLOCK_HQ, BLOCK_HALF)
    _rotate_heads(K, stride_k, tok, cos, sin, n_k_heads, HEAD_SIZE, HALF, BLOCK_HK, BLOCK_HALF)


def apply_rotary_emb_(positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, head_size: int,
                      cos_sin_cache: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """Rotate q [N, Hq*head_size] and k [N, Hk*head_size] in place (rows may be strided views, e.g.
    slices of a fused qkv output; each row's heads must be contiguous). Returns (q, k)."""
    n = positions.shape[0]
    assert q.shape[0] == n and k.shape[0] == n and q.stride(-1) == 1 and k.stride(-1) == 1
    assert q.shape[-1] % head_size == 0 and k.shape[-1] % head_size == 0
    rot = cos_sin_cache.shape[-1]
    assert rot % 2 == 0 and rot <= head_size and cos_sin_cache.stride(-1) == 1
    if n == 0:
        return q, k
    n_q, n_k = q.shape[-1] // head_size, k.shape[-1] // head_size
    half = rot // 2
    block_half = triton.next_power_of_2(half)
    block_hq = triton.next_power_of_2(n_q)
    num_warps = 1 if not q.is_cuda else min(8, max(1, block_hq * block_half // 256))
    _rotary_kernel[(n,)](
        positions, q, k, cos_sin_cache, q.stride(0), k.stride(0), cos_sin_cache.stride(0), n_q, n_k,
        HEAD_SIZE=head_size, HALF=half, BLOCK_HQ=block_hq, BLOCK_HK=triton.next_power_of_2(n_k),
        BLOCK_HALF=block_half, num_warps=num_warps)
    return q, k


def build_cos_sin_cache(max_pos: int, rotary_dim: int, base: float = 10000.0,
                        dtype: torch.dtype = torch.float32, device=None) -> torch.Tensor:
    """[max_pos, rotary_dim] = cat(cos, sin) of pos * base^(-2i/rotary_dim) (no RoPE scaling)."""
    inv_freq = base ** (-torch.arange(0, rotary_dim, 2, dtype=torch.float64, device=device) / rotary_dim)
    freqs = torch.arange(max_pos, dtype=torch.float64, device=device)[:, None] * inv_freq[None, :]
    return torch.cat([freqs.cos(), freqs.sin()], dim=-1).to(dtype)


def _rotate_ref(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, head_size: int) -> torch.Tensor:
    n = x.shape[0]
    xh = x.reshape(n, -1, head_size).float()
    half = cos.shape[-1]
    x1, x2 = xh[..., :half], xh[..., half:2 * half]
    c, s = cos[:, None, :], sin[:, None, :]
    rotated = torch.cat([x1 * c - x2 * s, x2 * c + x1 * s, xh[..., 2 * half:]], dim=-1)
    return rotated.reshape(n, -1).to(x.dtype)


def apply_rotary_emb_ref(positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, head_size: int,
                         cos_sin_cache: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """Out-of-place torch twin of apply_rotary_emb_."""
    cs = cos_sin_cache[positions.long()].float()
    half = cs.shape[-1] // 2
    cos, sin = cs[:, :half], cs[:, half:]
    return _rotate_ref(q, cos, sin, head_size), _rotate_ref(k, cos, sin, head_size)
