"""Torch-native attention over the token-slot pool: the CPU path, and the reference for the kernels.

Extend: per request, the new queries attend to [cached prefix + new tokens] gathered through
req_to_token, with a bottom-right causal mask. Decode: requests are padded to a common length and
attended in one batched product per group, which on the CPU is far cheaper than a per-request loop.
"""

from __future__ import annotations

from typing import List

import torch
import torch.nn.functional as F

from sglang.srt.layers.attention.base_attn_backend import AttentionBackend
from sglang.srt.layers.attention.invariant_attention import tiled_attention

# Bound on padded elements (bs * max_len) per decode group, to cap the gathered K/V memory.
_DECODE_GROUP_ELEMS = 1 << 16
# Deterministic mode: queries of one request's extend attended together (bounds the tile products).
_INVARIANT_QUERY_CHUNK = 64


class TorchNativeAttnBackend(AttentionBackend):
    def __init__(self, model_runner=None, deterministic: bool = False):
        self.model_runner = model_runner
        # --enable-deterministic-inference: every query through invariant_attention's tiles.
        self.deterministic = deterministic

    @staticmethod
    def _store_and_buffers(k, v, layer, forward_batch, save_kv_cache: bool):
        """Write this pass's K/V into the pool; return the pool, and the layer's K and V buffers."""
        pool = forward_batch.token_to_kv_pool
        if save_kv_cache:
            pool.set_kv_buffer(layer.layer_id, forward_batch.out_cache_loc, k, v)
        return pool, pool.get_key_buffer(layer.layer_id), pool.get_value_buffer(layer.layer_id)

    def forward_extend(self, q, k, v, layer, forward_batch, save_kv_cache=True):
        pool, k_buf, v_buf = self._store_and_buffers(k, v, layer, forward_batch, save_kv_cache)
        H, D, Dv = layer.tp_q_head_num, layer.head_dim, layer.v_head_dim
        if self.deterministic:
            return self._extend_invariant(q, layer, forward_batch, pool, k_buf, v_buf)
        q = q.view(-1, H, D)
        out = torch.empty((q.shape[0], H, Dv), dtype=q.dtype, device=q.device)
        r2t = forward_batch.req_to_token_pool.req_to_token
        rows = forward_batch.req_pool_indices.tolist()
        seq_lens = forward_batch.seq_lens_cpu.tolist()
        start = 0
        for i, ext in enumerate(forward_batch.extend_seq_lens_cpu):
            if ext == 0:
                continue
            seq = seq_lens[i]
            prefix = seq - ext
            slots = r2t[rows[i], :seq].long()
            kk = _kv_dtype(k_buf[slots], q.dtype, pool.k_scale[layer.layer_id]).transpose(0, 1)
            vv = _kv_dtype(v_buf[slots], q.dtype, pool.v_scale[layer.layer_id]).transpose(0, 1)
            qq = q[start : start + ext].transpose(0, 1)
            mask = torch.ones((ext, seq), dtype=torch.bool, device=q.device).tril(diagonal=prefix)
            o = F.scaled_dot_product_attention(
                qq.unsqueeze(0),
                kk.unsqueeze(0),
                vv.unsqueeze(0),
                attn_mask=mask,
                scale=layer.scaling,
                enable_gqa=kk.shape[0] != qq.shape[0],
            )
            out[start : start + ext] = o.squeeze(0).transpose(0, 1)
            start += ext
        return out.view(-1, H * Dv)

    def forward_decode(self, q, k, v, layer, forward_batch, save_kv_cache=True):
        pool, k_buf, v_buf = self._store_and_buffers(k, v, layer, forward_batch, save_kv_cache)
        H, D, Dv = layer.tp_q_head_num, layer.head_dim, layer.v_head_dim
        Hkv = layer.tp_k_head_num
        bs = q.shape[0]
        q = q.view(bs, Hkv, H // Hkv, D)
        out = torch.empty((bs, Hkv, H // Hkv, Dv), dtype=q.dtype, device=q.device)
        r2t = forward_batch.req_to_token_pool.req_to_token
        seq_lens_cpu = forward_batch.seq_lens_cpu
        for sel in _decode_groups(seq_lens_cpu.tolist()):
            idx = torch.tensor(sel, device=q.device)
            L = int(seq_lens_cpu[sel].max())
            lens = forward_batch.seq_lens[idx]
            valid = torch.arange(L, device=q.device)[None, :] < lens[:, None]
            # Entries past a row's length are whatever the row held before (another pool's
            # scratch slots, for a tree search's rows): read the dummy slot there instead.
            slots = r2t[forward_batch.req_pool_indices[idx], :L].long().masked_fill(~valid, 0)
            kk = _kv_dtype(k_buf[slots], q.dtype, pool.k_scale[layer.layer_id])  # [g, L, Hkv, D]
            vv = _kv_dtype(v_buf[slots], q.dtype, pool.v_scale[layer.layer_id])
            if self.deterministic:
                o = tiled_attention(q[idx], kk, vv, lens - 1, layer.scaling, layer.logit_cap)
                out[idx] = o.to(q.dtype)
                continue
            s = torch.einsum("bkgd,blkd->bkgl", q[idx].float(), kk.float()) * layer.scaling
            if layer.logit_cap > 0:
                s = layer.logit_cap * torch.tanh(s / layer.logit_cap)
            s = s.masked_fill(~valid[:, None, None, :], float("-inf"))
            p = torch.softmax(s, dim=-1)
            out[idx] = torch.einsum("bkgl,blkd->bkgd", p, vv.float()).to(q.dtype)
        return out.view(bs, H * Dv)

    def _extend_invariant(self, q, layer, fb, pool, k_buf, v_buf) -> torch.Tensor:
        H, Hkv, D, Dv = layer.tp_q_head_num, layer.tp_k_head_num, layer.head_dim, layer.v_head_dim
        q = q.view(-1, Hkv, H // Hkv, D)
        out = torch.empty((q.shape[0], Hkv, H // Hkv, Dv), dtype=q.dtype, device=q.device)
        r2t = fb.req_to_token_pool.req_to_token
        rows, seq_lens = fb.req_pool_indices.tolist(), fb.seq_lens_cpu.tolist()
        ks, vs = pool.k_scale[layer.layer_id], pool.v_scale[layer.layer_id]
        start = 0
        for i, ext in enumerate(fb.extend_seq_lens_cpu):
            seq = seq_lens[i]
            slots = r2t[rows[i], :seq].long()
            kk = _kv_dtype(k_buf[slots], q.dtype, ks)[None]
            vv = _kv_dtype(v_buf[slots], q.dtype, vs)[None]
            for c in range(0, ext, _INVARIANT_QUERY_CHUNK):
                n = min(_INVARIANT_QUERY_CHUNK, ext - c)
                pos = torch.arange(seq - ext + c, seq - ext + c + n, device=q.device)
                sl = slice(start + c, start + c + n)
                o = tiled_attention(q[sl], kk, vv, pos, layer.scaling, layer.logit_cap)
                out[sl] = o.to(q.dtype)
            start += ext
        return out.view(-1, H * Dv)


def _kv_dtype(x: torch.Tensor, dtype: torch.dtype, scale: float) -> torch.Tensor:
    if x.dtype == dtype:
        return x
    x = x.to(dtype)
    return x * scale if scale != 1.0 else x


def _decode_groups(seq_lens: List[int]) -> List[List[int]]:
    """Group requests of similar length so padding stays small and memory bounded."""
    order = sorted(range(len(seq_lens)), key=lambda i: seq_lens[i])
    groups: List[List[int]] = []
    cur: List[int] = []
    for i in order:
        if cur and (len(cur) + 1) * seq_lens[i] > _DECODE_GROUP_ELEMS:
            groups.append(cur)
            cur = []
        cur.append(i)
    if cur:
        groups.append(cur)
    return groups
