"""Attention whose output for a query depends only on that query and its keys (the CPU path of
--enable-deterministic-inference).

A query at position p attends keys [0, p] in tiles of KEY_TILE keys anchored at key 0, combined by
the online softmax in tile order. Prefill, a chunk after a cached prefix and a decode step all run
this same function, so a token's attention output is the same bits however the scheduler reached
it: alone or batched, in one prefill or after a radix hit, as a prompt token or as a decoded one.

Why the shapes are fixed: every reduction is over the contiguous last dimension of a fixed length
(head_dim for q.k, KEY_TILE for the softmax sum and for p.v), so its summation order is the same
for every query; a short last tile is padded to KEY_TILE with masked keys (they add exact zeros);
tiles past a query's position leave its state exactly as it was (the running max does not move, so
the rescale is exp(0) = 1 and the added terms are 0). exp runs over KEY_TILE-wide rows
(batch_invariant.PAD_TO) so no element falls in a vectorized loop's scalar tail.
"""

from __future__ import annotations

import torch

KEY_TILE = 64


def _exp_rows(x: torch.Tensor) -> torch.Tensor:
    """exp of a [..., KEY_TILE] tensor (contiguous, so the vectorized loop takes every element)."""
    return torch.exp(x.contiguous())


def tiled_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    q_pos: torch.Tensor,
    scale: float,
    logit_cap: float = 0.0,
) -> torch.Tensor:
    """q [n, Hkv, G, D]; k [B, L, Hkv, D] and v [B, L, Hkv, Dv] with B = 1 (every query reads the
    same keys: one request's extend) or B = n (each query its own: a decode batch); q_pos [n] the
    position of each query (it attends keys 0..q_pos). Returns [n, Hkv, G, Dv] float32."""
    n, hkv, g, _ = q.shape
    dv = v.shape[-1]
    length = k.shape[1]
    qf = q.float()
    dev = q.device
    m = torch.full((n, hkv, g), float("-inf"), device=dev)
    l_sum = torch.zeros((n, hkv, g), device=dev)
    acc = torch.zeros((n, hkv, g, dv), device=dev)
    key_idx = torch.arange(KEY_TILE, device=dev)
    for t0 in range(0, length, KEY_TILE):
        kt, vt = _tile(k, t0), _tile(v, t0)  # [B, T, Hkv, D]
        # q.k summed over head_dim: [n, Hkv, G, T]
        s = (qf[:, :, :, None, :] * kt.permute(0, 2, 1, 3)[:, :, None, :, :]).sum(-1) * scale
        if logit_cap > 0:
            s = logit_cap * torch.tanh(s / logit_cap)
        visible = (t0 + key_idx)[None, :] <= q_pos[:, None]  # [n, T]; also hides the padding
        s = s.masked_fill(~visible[:, None, None, :], float("-inf"))
        m_new = torch.maximum(m, s.amax(-1))
        # The rescale of the running state, as a KEY_TILE-wide row like the scores (see _exp_rows).
        alpha = _exp_rows((m - m_new)[..., None].expand(n, hkv, g, KEY_TILE))[..., 0]
        p = _exp_rows(s - m_new[..., None])
        l_sum = l_sum * alpha + p.sum(-1)
        # p.v summed over the tile's keys: v as [B, Hkv, Dv, T].
        vt_t = vt.permute(0, 2, 3, 1).contiguous()
        pv = (p[:, :, :, None, :] * vt_t[:, :, None, :, :]).sum(-1)
        acc = acc * alpha[..., None] + pv
        m = m_new
    return acc / l_sum[..., None]


def _tile(x: torch.Tensor, t0: int) -> torch.Tensor:
    """Keys [t0, t0 + KEY_TILE) of x [B, L, ...] as float32, zero-padded past L."""
    t = x[:, t0 : t0 + KEY_TILE].float()
    short = KEY_TILE - t.shape[1]
    if short:
        pad = t.new_zeros((t.shape[0], short, *t.shape[2:]))
        t = torch.cat([t, pad], dim=1)
    return t
