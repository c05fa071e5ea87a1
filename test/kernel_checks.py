"""Triton kernels vs their torch twins, run on the CPU through the Triton interpreter.

Run as a script (it sets TRITON_INTERPRET=1 before triton is imported, which is why it is a
separate process and not a pytest module):
    python test/kernel_checks.py decode extend fused       # quick cases
    python test/kernel_checks.py --full decode             # more / bigger cases
Exits nonzero on any mismatch, NaN left in a poisoned output, or exception.

Each case draws fresh random inputs, scatters every request's tokens over random pool slots (row
indices shuffled too), fills unused pool slots (including dummy slot 0) with NaN so a read of any
position outside the request shows up, and fills the output with NaN so a row the kernel forgot
to write shows up. The same module also serves the CUDA tests (make_* builders, device argument).
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__":
    os.environ["TRITON_INTERPRET"] = "1"  # must precede the first `import triton`

import argparse
import math
import time
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence

import torch

from sglang.srt.layers.attention.triton_ops.decode_attention import (
    compute_num_kv_splits,
    decode_attention_fwd,
    decode_attention_ref,
)
from sglang.srt.layers.attention.triton_ops.decode_prologue import decode_prologue
from sglang.srt.layers.attention.triton_ops.extend_attention import (
    extend_attention_fwd,
    extend_attention_ref,
)
from sglang.srt.layers.sampler import race_argmax_torch
from sglang.srt.layers.triton_ops import (
    apply_rotary_emb_,
    apply_rotary_emb_ref,
    build_cos_sin_cache,
    fused_add_rmsnorm,
    fused_add_rmsnorm_ref,
    rmsnorm,
    rmsnorm_ref,
    silu_and_mul,
    silu_and_mul_ref,
    store_kv,
    store_kv_ref,
)
from sglang.srt.layers.triton_ops.gemv import gemv, gemv_ref
from sglang.srt.layers.triton_ops.rotary import apply_rotary_emb_and_store_
from sglang.srt.layers.triton_ops.sampling import greedy_argmax, race_argmax
from sglang.srt.layers.triton_ops.small_m_gemm import small_m_matmul


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """||out - ref|| / ||ref|| in fp64; inf if out has any NaN/inf."""
    out, ref = out.double(), ref.double()
    if not torch.isfinite(out).all():
        return math.inf
    return ((out - ref).norm() / ref.norm().clamp_min(1e-30)).item()


# ---------------------------------------------------------------------------------------------
# Paged batch builder
# ---------------------------------------------------------------------------------------------
@dataclass
class PagedBatch:
    k_buffer: torch.Tensor
    v_buffer: torch.Tensor
    req_to_token: torch.Tensor
    req_pool_indices: torch.Tensor
    seq_lens: torch.Tensor
    slots: List[torch.Tensor]  # per request, slot of each position


def make_paged_batch(
    seq_lens: Sequence[int],
    num_kv_heads: int,
    head_dim: int,
    v_dim: int,
    dtype: torch.dtype,
    device: str,
    gen: torch.Generator,
    extra_slots: int = 17,
    extra_rows: int = 3,
    cached_lens: Optional[Sequence[int]] = None,
) -> PagedBatch:
    """A pool where request i owns seq_lens[i] random slots. Only the first cached_lens[i] positions
    (default: all) get real K/V; every other slot, dummy slot 0 included, holds NaN."""
    total = sum(seq_lens)
    num_slots = total + extra_slots + 1
    perm = torch.randperm(num_slots - 1, generator=gen) + 1
    num_rows = len(seq_lens) + extra_rows + 1
    rows = (torch.randperm(num_rows - 1, generator=gen) + 1)[: len(seq_lens)]
    max_ctx = max(list(seq_lens) + [1]) + 5
    # Positions past seq_len point far outside the pool: reading them would fault or return junk.
    req_to_token = torch.full((num_rows, max_ctx), num_slots + 10**6, dtype=torch.int32)
    k_buffer = torch.full((num_slots, num_kv_heads, head_dim), float("nan"), dtype=dtype)
    v_buffer = torch.full((num_slots, num_kv_heads, v_dim), float("nan"), dtype=dtype)
    slots, at = [], 0
    for i, n in enumerate(seq_lens):
        s = perm[at : at + n]
        at += n
        slots.append(s)
        req_to_token[rows[i], :n] = s.to(torch.int32)
        c = n if cached_lens is None else cached_lens[i]
        k_buffer[s[:c]] = torch.randn((c, num_kv_heads, head_dim), generator=gen).to(dtype)
        v_buffer[s[:c]] = torch.randn((c, num_kv_heads, v_dim), generator=gen).to(dtype)
    to = lambda t: t.to(device)
    return PagedBatch(
        to(k_buffer),
        to(v_buffer),
        to(req_to_token),
        to(rows.to(torch.int64)),
        to(torch.tensor(seq_lens, dtype=torch.int64)),
        [to(s) for s in slots],
    )


# ---------------------------------------------------------------------------------------------
# Individual checks: each returns (relative error, description)
# ---------------------------------------------------------------------------------------------
def check_decode(
    seq_lens: Sequence[int],
    num_heads: int,
    num_kv_heads: int,
    head_dim: int,
    *,
    v_dim: Optional[int] = None,
    max_kv_splits: int = 4,
    splits: str = "auto",
    logit_cap: float = 0.0,
    grouped: Optional[bool] = None,
    q_view: bool = False,
    config: Optional[dict] = None,
    dtype: torch.dtype = torch.float32,
    device: str = "cpu",
    k_scale: float = 1.0,
    v_scale: float = 1.0,
    seed: int = 0,
) -> float:
    gen = torch.Generator().manual_seed(seed)
    v_dim = v_dim or head_dim
    bs = len(seq_lens)
    pb = make_paged_batch(seq_lens, num_kv_heads, head_dim, v_dim, dtype, device, gen)
    if q_view:  # q as a strided slice of a wider projection, like q out of a fused qkv
        wide = torch.randn((bs, num_heads + 2, head_dim), generator=gen).to(dtype).to(device)
        q = wide[:, 1 : num_heads + 1]
    else:
        q = torch.randn((bs, num_heads, head_dim), generator=gen).to(dtype).to(device)
    o = torch.full((bs, num_heads, v_dim), float("nan"), dtype=dtype, device=device)
    attn_logits = torch.full(
        (bs, num_heads, max_kv_splits, v_dim), float("nan"), dtype=torch.float32, device=device
    )
    attn_lse = torch.full(
        (bs, num_heads, max_kv_splits), float("nan"), dtype=torch.float32, device=device
    )
    if splits == "auto":
        # On the CPU pretend to have 4 SMs so that the small test batches still get several splits.
        small = dict(num_sms=4, min_split_len=8) if device == "cpu" else {}
        nks = compute_num_kv_splits(pb.seq_lens, num_heads, num_kv_heads, max_kv_splits, **small)
    elif splits == "random":  # includes values > max (clamped) and > seq_len (empty splits)
        nks = torch.randint(0, max_kv_splits + 3, (bs,), generator=gen).to(torch.int32).to(device)
    else:
        nks = torch.full((bs,), int(splits), dtype=torch.int32, device=device)
    sm_scale = 1.0 / math.sqrt(head_dim)
    decode_attention_fwd(
        q,
        pb.k_buffer,
        pb.v_buffer,
        o,
        pb.req_to_token,
        pb.req_pool_indices,
        pb.seq_lens,
        attn_logits,
        attn_lse,
        nks,
        max_kv_splits,
        sm_scale,
        logit_cap,
        grouped=grouped,
        config=config,
        k_scale=k_scale,
        v_scale=v_scale,
    )
    ref = decode_attention_ref(
        q,
        pb.k_buffer,
        pb.v_buffer,
        pb.req_to_token,
        pb.req_pool_indices,
        pb.seq_lens,
        sm_scale,
        logit_cap,
        k_scale=k_scale,
        v_scale=v_scale,
    )
    return rel_err(o, ref)


def check_extend(
    prefix_lens: Sequence[int],
    extend_lens: Sequence[int],
    num_heads: int,
    num_kv_heads: int,
    head_dim: int,
    *,
    v_dim: Optional[int] = None,
    logit_cap: float = 0.0,
    config: Optional[dict] = None,
    dtype: torch.dtype = torch.float32,
    device: str = "cpu",
    k_scale: float = 1.0,
    v_scale: float = 1.0,
    seed: int = 0,
) -> float:
    gen = torch.Generator().manual_seed(seed)
    v_dim = v_dim or head_dim
    seq_lens = [p + e for p, e in zip(prefix_lens, extend_lens)]
    # New tokens' pool slots stay NaN: the kernel must take their K/V from k_extend / v_extend.
    pb = make_paged_batch(
        seq_lens, num_kv_heads, head_dim, v_dim, dtype, device, gen, cached_lens=prefix_lens
    )
    n_tok = sum(extend_lens)
    q = torch.randn((n_tok, num_heads, head_dim), generator=gen).to(dtype).to(device)
    k = torch.randn((n_tok, num_kv_heads, head_dim), generator=gen).to(dtype).to(device)
    v = torch.randn((n_tok, num_kv_heads, v_dim), generator=gen).to(dtype).to(device)
    o = torch.full((n_tok, num_heads, v_dim), float("nan"), dtype=dtype, device=device)
    ext = torch.tensor(extend_lens, dtype=torch.int64)
    start = (torch.cumsum(ext, 0) - ext).to(device)
    ext = ext.to(device)
    sm_scale = 1.0 / math.sqrt(head_dim)
    extend_attention_fwd(
        q,
        k,
        v,
        o,
        pb.k_buffer,
        pb.v_buffer,
        pb.req_to_token,
        pb.req_pool_indices,
        pb.seq_lens,
        ext,
        start,
        max(extend_lens),
        sm_scale,
        logit_cap,
        config=config,
    )
    ref = extend_attention_ref(
        q,
        k,
        v,
        pb.k_buffer,
        pb.v_buffer,
        pb.req_to_token,
        pb.req_pool_indices,
        pb.seq_lens,
        ext,
        start,
        sm_scale,
        logit_cap,
    )
    return rel_err(o, ref)


def check_rmsnorm(
    n: int,
    hidden: int,
    *,
    residual: bool,
    dtype: torch.dtype = torch.float32,
    device: str = "cpu",
    seed: int = 0,
) -> float:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn((n, hidden), generator=gen).to(dtype).to(device)
    w = (1 + 0.1 * torch.randn(hidden, generator=gen)).to(dtype).to(device)
    out = torch.full_like(x, float("nan"))
    if not residual:
        rmsnorm(x, w, 1e-6, out=out)
        return rel_err(out, rmsnorm_ref(x, w, 1e-6))
    r = torch.randn((n, hidden), generator=gen).to(dtype).to(device)
    r_ref = r.clone()
    fused_add_rmsnorm(x, r, w, 1e-6, out=out)
    ref = fused_add_rmsnorm_ref(x, r_ref, w, 1e-6)
    return max(rel_err(out, ref), rel_err(r, r_ref))


def check_silu_and_mul(
    n: int, inter: int, *, dtype: torch.dtype = torch.float32, device: str = "cpu", seed: int = 0
) -> float:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn((n, 2 * inter), generator=gen).to(dtype).to(device)
    out = torch.full((n, inter), float("nan"), dtype=dtype, device=device)
    silu_and_mul(x, out=out)
    return rel_err(out, silu_and_mul_ref(x))


def _qkv_rows(
    n: int,
    n_q: int,
    n_k: int,
    head_size: int,
    dtype: torch.dtype,
    device: str,
    gen: torch.Generator,
):
    """q, k, v as strided column slices of one fused qkv projection, and random positions < 4096."""
    qkv = torch.randn((n, (n_q + 2 * n_k) * head_size), generator=gen).to(dtype).to(device)
    q = qkv[:, : n_q * head_size]
    k = qkv[:, n_q * head_size : (n_q + n_k) * head_size]
    v = qkv[:, (n_q + n_k) * head_size :]
    return q, k, v, torch.randint(0, 4096, (n,), generator=gen).to(device)


def _head_norm_weights(head_size: int, dtype, device, gen) -> tuple:
    """Random q / k norm weights near 1 and Qwen3's eps."""
    q_w, k_w = (1 + 0.3 * torch.randn(head_size, generator=gen) for _ in range(2))
    return q_w.to(dtype).to(device), k_w.to(dtype).to(device), 1e-6


def check_rotary_store(
    n: int,
    n_q: int,
    n_k: int,
    head_size: int,
    *,
    dtype: torch.dtype = torch.float32,
    kv_dtype: Optional[torch.dtype] = None,
    k_scale: float = 1.0,
    v_scale: float = 1.0,
    qk_norm: bool = False,
    device: str = "cpu",
    seed: int = 0,
) -> float:
    """Fused rotary + KV store == rotary, then store_kv of the rotated k (q, k in place; pool rows at
    loc; every other pool row untouched). q / k / v are strided slices of one qkv row. qk_norm:
    each head RMS-normalised first (Qwen3), against the torch twin."""
    gen = torch.Generator().manual_seed(seed)
    kv_dtype = kv_dtype or dtype
    cache = build_cos_sin_cache(4096, head_size, device=device)
    q, k, v, pos = _qkv_rows(n, n_q, n_k, head_size, dtype, device, gen)
    norm = _head_norm_weights(head_size, dtype, device, gen) if qk_norm else None
    slots = 3 * n + 5
    loc = torch.randperm(slots, generator=gen)[:n].to(device)
    kb = torch.randn((slots, n_k, head_size), generator=gen).to(kv_dtype).to(device)
    vb = torch.randn((slots, n_k, head_size), generator=gen).to(kv_dtype).to(device)
    q_ref, k_ref = apply_rotary_emb_ref(pos, q, k, head_size, cache, norm)
    kb_ref, vb_ref = kb.clone(), vb.clone()
    store_kv_ref(
        kb_ref,
        vb_ref,
        loc,
        k_ref.view(n, n_k, head_size),
        v.view(n, n_k, head_size),
        k_scale,
        v_scale,
    )
    apply_rotary_emb_and_store_(
        pos, q, k, v, head_size, cache, kb, vb, loc, k_scale, v_scale, qk_norm=norm
    )
    return max(
        rel_err(q, q_ref),
        rel_err(k, k_ref),
        rel_err(kb.float(), kb_ref.float()),
        rel_err(vb.float(), vb_ref.float()),
    )


def check_gemv(
    m: int,
    n: int,
    k: int,
    *,
    bias: bool = False,
    config: Optional[dict] = None,
    dtype: torch.dtype = torch.float32,
    device: str = "cpu",
    seed: int = 0,
) -> float:
    """Skinny matmul vs fp32 torch; N and K off the tile sizes exercise the clamped rows and K mask,
    and x is a strided row view (a slice of a wider activation)."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn((m, k + 5), generator=gen).to(dtype).to(device)[:, 2 : k + 2]
    w = torch.randn((n, k), generator=gen).to(dtype).to(device)
    b = torch.randn((n,), generator=gen).to(dtype).to(device) if bias else None
    return rel_err(gemv(x, w, b, config=config), gemv_ref(x, w, b))


def check_small_m(
    m: int,
    n: int,
    k: int,
    *,
    bias: bool = False,
    config: Optional[dict] = None,
    dtype: torch.dtype = torch.float16,
    device: str = "cpu",
    seed: int = 0,
) -> float:
    """The tensor-core small-M matmul vs fp32 torch, same inputs as check_gemv (strided x rows,
    N and K off the tiles). fp16 on the CPU: the interpreter's bf16 tl.dot is wrong."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn((m, k + 5), generator=gen).to(dtype).to(device)[:, 2 : k + 2]
    w = torch.randn((n, k), generator=gen).to(dtype).to(device)
    b = torch.randn((n,), generator=gen).to(dtype).to(device) if bias else None
    return rel_err(small_m_matmul(x, w, b, config=config), gemv_ref(x, w, b))


def _fp8_operands(m: int, n: int, k: int, block: Optional[tuple], bias: bool, seed: int) -> tuple:
    """(x [m, k] fp32, bias or None, fp8 weight [n, k], its scales) for the FP8 matmul checks."""
    from sglang.srt.layers.quantization import fp8_math

    gen = torch.Generator().manual_seed(seed)
    x = torch.randn((m, k), generator=gen) * 3
    w = torch.randn((n, k), generator=gen)
    b = torch.randn((n,), generator=gen) if bias else None
    return (x, b, *fp8_math.quantize(w, block))


def check_fp8_matmul(
    m: int,
    n: int,
    k: int,
    *,
    block: Optional[tuple] = None,
    bias: bool = False,
    config: Optional[dict] = None,
    seed: int = 0,
) -> float:
    """FP8 x FP8 matmul (per-channel or 128-block scales, activations quantized by our kernels) vs
    fp32 torch on the same fp8 values and scales: only the summation order may differ."""
    from sglang.srt.layers.quantization import fp8_math
    from sglang.srt.layers.quantization.fp8_gemm import fp8_matmul
    from sglang.srt.layers.quantization.fp8_kernels import (
        per_token_group_quant_fp8,
        per_token_quant_fp8,
    )

    x, b, wq, ws = _fp8_operands(m, n, k, block, bias, seed)
    if block is None:
        xq, xs = per_token_quant_fp8(x, m)
        x_ref = xq.float() * xs
    else:
        xq, xs = per_token_group_quant_fp8(x, block[1])
        x_ref = xq.float() * xs.repeat_interleave(block[1], dim=1)[:, :k]
    y = fp8_matmul(xq, xs, wq, ws, torch.float32, block=block, bias=b, config=config)
    ref = x_ref @ fp8_math.dequantize(wq, ws, block, torch.float32).T
    return rel_err(y, ref + b if b is not None else ref)


def check_fp8_matmul_fused(
    m: int,
    n: int,
    k: int,
    *,
    block: Optional[tuple] = None,
    bias: bool = False,
    config: Optional[dict] = None,
    seed: int = 0,
) -> float:
    """FP8 matmul that quantizes its activations per (row, K tile) itself vs fp32 torch on the
    same quantized values: torch quantizes each row's K tiles of the kernel's width with the same
    rule, so only the summation order may differ. Row 0 carries an outlier (|x| = 900) confined to
    one tile, which a per-token scale would spread over the row."""
    from sglang.srt.layers.quantization import fp8_math
    from sglang.srt.layers.quantization.fp8_gemm import _default_config, fp8_matmul_fused

    x, b, wq, ws = _fp8_operands(m, n, k, block, bias, seed)
    x[0, k // 3] = 900.0
    tile = block[1] if block else dict(_default_config(m, n, k, block), **(config or {}))["BLOCK_K"]
    x_ref = torch.cat(
        [
            (lambda q, s: q.float() * s)(*fp8_math.quantize_per_token(x[:, k0 : k0 + tile]))
            for k0 in range(0, k, tile)
        ],
        dim=1,
    )
    y = fp8_matmul_fused(x, wq, ws, block=block, bias=b, config=config)
    ref = x_ref @ fp8_math.dequantize(wq, ws, block, torch.float32).T
    return rel_err(y, ref + b if b is not None else ref)


def check_fp8_word_gemv(
    n: int,
    k: int,
    *,
    block: Optional[tuple] = None,
    bias: bool = False,
    config: Optional[dict] = None,
    seed: int = 0,
) -> float:
    """The one-row FP8 word GEMV vs fp32 torch on the dequantized weight. Some weights are tiny so
    their e4m3 bytes are subnormal or zero, which the integer widening must map exactly."""
    from sglang.srt.layers.quantization import fp8_math
    from sglang.srt.layers.quantization.fp8_gemv import fp8_gemv

    gen = torch.Generator().manual_seed(seed)
    x = torch.randn((1, k), generator=gen) * 3
    w = torch.randn((n, k), generator=gen)
    w[:, : k // 5] *= 1e-4
    b = torch.randn((n,), generator=gen) if bias else None
    wq, ws = fp8_math.quantize(w, block)
    ref = x @ fp8_math.dequantize(wq, ws, block, torch.float32).T
    y = fp8_gemv(x, wq, ws.contiguous(), block, b, config=config)
    return rel_err(y, ref + b if b is not None else ref)


def check_fp8_halves_gemv(
    n: int, k: int, *, bias: bool = False, config: Optional[dict] = None, seed: int = 0
) -> float:
    """The one-row f16x2 FP8 GEMV vs fp32 torch on the dequantized weight, with an activation
    outlier (|x| = 900: unscaled, its fp16 products with e4m3's 448 would overflow) and tiny
    weights (subnormal e4m3 bytes, which the hardware conversion widens exactly)."""
    from sglang.srt.layers.quantization import fp8_math
    from sglang.srt.layers.quantization.fp8_gemv import fp8_gemv_halves

    gen = torch.Generator().manual_seed(seed)
    x = torch.randn((1, k), generator=gen)
    x[0, k // 3] = 900.0
    w = torch.randn((n, k), generator=gen)
    w[:, : k // 5] *= 1e-4
    b = torch.randn((n,), generator=gen) if bias else None
    wq, ws = fp8_math.quantize(w, None)
    ref = x @ fp8_math.dequantize(wq, ws, None, torch.float32).T
    y = fp8_gemv_halves(x, wq, ws, b, config=config)
    return rel_err(y, ref + b if b is not None else ref)


def check_rotary(
    n: int,
    n_q: int,
    n_k: int,
    head_size: int,
    *,
    rotary_dim: Optional[int] = None,
    qk_norm: bool = False,
    dtype: torch.dtype = torch.float32,
    device: str = "cpu",
    seed: int = 0,
) -> float:
    gen = torch.Generator().manual_seed(seed)
    rotary_dim = rotary_dim or head_size
    cache = build_cos_sin_cache(4096, rotary_dim, device=device)
    q, k, v, pos = _qkv_rows(n, n_q, n_k, head_size, dtype, device, gen)
    norm = _head_norm_weights(head_size, dtype, device, gen) if qk_norm else None
    v_before = v.clone()
    q_ref, k_ref = apply_rotary_emb_ref(pos, q, k, head_size, cache, norm)
    apply_rotary_emb_(pos, q, k, head_size, cache, norm)
    untouched = torch.equal(v, v_before)
    return max(rel_err(q, q_ref), rel_err(k, k_ref)) if untouched else math.inf


def check_store_kv(
    n: int,
    num_kv_heads: int,
    head_dim: int,
    *,
    strided: bool = True,
    dtype: torch.dtype = torch.float32,
    device: str = "cpu",
    seed: int = 0,
) -> float:
    gen = torch.Generator().manual_seed(seed)
    slots = n * 2 + 3
    kb = torch.randn((slots, num_kv_heads, head_dim), generator=gen).to(dtype).to(device)
    vb = torch.randn((slots, num_kv_heads, head_dim), generator=gen).to(dtype).to(device)
    kb_ref, vb_ref = kb.clone(), vb.clone()
    loc = (torch.randperm(slots - 1, generator=gen)[:n] + 1).to(device)
    if strided:  # k, v as views into a fused [N, 2, H, D] tensor
        kv = torch.randn((n, 2, num_kv_heads, head_dim), generator=gen).to(dtype).to(device)
        k, v = kv[:, 0], kv[:, 1]
    else:
        k = torch.randn((n, num_kv_heads, head_dim), generator=gen).to(dtype).to(device)
        v = torch.randn((n, num_kv_heads, head_dim), generator=gen).to(dtype).to(device)
    store_kv(kb, vb, loc, k, v)
    store_kv_ref(kb_ref, vb_ref, loc, k, v)
    return 0.0 if torch.equal(kb, kb_ref) and torch.equal(vb, vb_ref) else math.inf


def check_decode_prologue(
    bs: int, *, max_len: int = 5000, num_sms: int = 132, device: str = "cpu", seed: int = 0
) -> float:
    """The decode prologue's split counts == compute_num_kv_splits, and it writes exactly
    req_to_token[row, seq_len - 1] = slot for every request and nothing else (0 or inf). Random
    lengths (some 1, so position 0), distinct rows of a NaN-free table filled with -1."""
    gen = torch.Generator().manual_seed(seed)
    lens = torch.randint(1, max_len, (bs,), generator=gen)
    lens[torch.rand(bs, generator=gen) < 0.1] = 1
    rows = torch.randperm(bs + 7, generator=gen)[:bs] + 1
    loc = torch.randint(1, 1 << 30, (bs,), generator=gen)
    table = torch.full((bs + 8, max_len), -1, dtype=torch.int32)
    expect = table.clone()
    expect[rows, lens - 1] = loc.to(torch.int32)
    splits = torch.full((bs + 3,), -7, dtype=torch.int32)
    dev = [t.to(device) for t in (lens, rows, loc, table, splits)]
    decode_prologue(dev[0], 32, 8, 16, dev[4], num_sms, dev[3], dev[1], dev[2])
    want = compute_num_kv_splits(lens, 32, 8, 16, num_sms=num_sms)
    ok = torch.equal(dev[4][:bs].cpu(), want) and bool((dev[4][bs:].cpu() == -7).all())
    return 0.0 if ok and torch.equal(dev[3].cpu(), expect) else math.inf


def check_race(
    bs: int, vocab: int, *, kind: str = "softmax", device: str = "cpu", seed: int = 0
) -> float:
    """The fused exponential race picks exactly the torch sampler's ids (0 or inf).
    kind: softmax rows; filtered (most ids zeroed, as after top-k / top-p); uniform (hash collisions
    give exact ties, which must go to the smallest id); strided (rows of a wider buffer)."""
    gen = torch.Generator().manual_seed(seed)
    width = vocab + 37 if kind == "strided" else vocab
    probs = torch.softmax(3 * torch.randn((bs, width), generator=gen), dim=-1)[:, :vocab]
    if kind == "filtered":
        keep = torch.rand((bs, vocab), generator=gen) < 0.05
        keep[:, 0] = True
        probs = probs * keep
        probs = probs / probs.sum(-1, keepdim=True)
    elif kind == "uniform":
        probs = torch.full((bs, vocab), 1.0 / vocab)
    elif kind == "zeros":  # every score ties at 0: torch's argmax answers id 0
        probs = torch.zeros((bs, vocab))
    rows = torch.randint(0, 2**32, (bs,), generator=gen, dtype=torch.int64)
    out = race_argmax(probs.to(device), rows.to(device)).cpu()
    return 0.0 if torch.equal(out, race_argmax_torch(probs.float(), rows)) else math.inf


def check_greedy(
    bs: int,
    vocab: int,
    *,
    kind: str = "random",
    dtype: torch.dtype = torch.float32,
    device: str = "cpu",
    seed: int = 0,
) -> float:
    """The fused greedy pick equals the sampler's torch rule exactly (ids and dead flags; 0 or inf).
    kind: random; ties (few distinct values: the first maximum must win across splits); special
    (NaN, +inf and -inf sprinkled in, one all -inf row, one all NaN row, one row whose max is +inf)."""
    from sglang.srt.layers.sampler import greedy_torch

    gen = torch.Generator().manual_seed(seed)
    x = torch.randn((bs, vocab), generator=gen)
    if kind == "ties":
        x = torch.randint(0, 3, (bs, vocab), generator=gen).float()
    elif kind == "special":
        r = torch.rand((bs, vocab), generator=gen)
        x[r < 0.05] = float("nan")
        x[(r >= 0.05) & (r < 0.1)] = float("-inf")
        x[0] = float("-inf")
        x[1 % bs] = float("nan")
        if bs > 2:
            x[2, vocab // 2] = float("inf")
            x[2, vocab - 1] = float("inf")
    x = x.to(dtype)
    ids, dead = greedy_argmax(x.to(device))
    ref_ids, ref_dead = greedy_torch(x.float())
    return (
        0.0 if torch.equal(ids.cpu(), ref_ids) and torch.equal(dead.cpu(), ref_dead) else math.inf
    )


# ---------------------------------------------------------------------------------------------
# Case lists (CPU, float32)
# ---------------------------------------------------------------------------------------------
# Lengths mix 1-token requests, tile-boundary lengths (interpreter tiles are 16 wide) and longer ones.
_LENS_A = [1, 16, 17, 40, 5]
_LENS_B = [33, 1, 70, 2]


def decode_cases(full: bool) -> List[tuple]:
    cases = [
        ("decode MHA ratio1 D64", lambda s: check_decode(_LENS_A, 4, 4, 64, seed=s)),
        (
            "decode GQA ratio3 D80 random-splits",
            lambda s: check_decode(_LENS_B, 6, 2, 80, splits="random", seed=s),
        ),
        (
            "decode GQA ratio4 D64 q-view",
            lambda s: check_decode(_LENS_A, 8, 2, 64, q_view=True, seed=s),
        ),
        (
            "decode GQA ratio4 D80 cap",
            lambda s: check_decode(_LENS_B, 4, 1, 80, logit_cap=5.0, seed=s),
        ),
        (
            "decode grouped-kernel ratio1",
            lambda s: check_decode(_LENS_B, 2, 2, 64, grouped=True, seed=s),
        ),
        ("decode seq_len0 row", lambda s: check_decode([0, 9, 3], 4, 2, 64, seed=s)),
        ("decode Dv!=D (D80, Dv64)", lambda s: check_decode(_LENS_A, 6, 2, 80, v_dim=64, seed=s)),
        (
            # A 32k-token context over the long-context split cap (64), as batch 1 runs it.
            "decode 32k context 64 splits",
            lambda s: check_decode([32768], 4, 1, 16, max_kv_splits=64, splits="64", seed=s),
        ),
        (
            "decode long 8 splits D128",
            lambda s: check_decode([300, 129, 7], 8, 2, 128, max_kv_splits=8, splits="8", seed=s),
        ),
        # Random split counts mix single-split requests (stage 1 writes o, scaled) with merged ones.
        (
            "decode scales, 1-split + merged rows",
            lambda s: check_decode(
                _LENS_B, 8, 2, 64, splits="random", k_scale=0.7, v_scale=1.9, seed=s
            ),
        ),
        (
            "decode per-head scales, random splits",
            lambda s: check_decode(
                _LENS_A, 3, 3, 64, splits="random", k_scale=1.3, v_scale=0.6, seed=s
            ),
        ),
        # 32+ requests: stage 2 merges a block of heads per program (12 heads: a full block of 8 and a masked one).
        (
            "decode bs33 head-blocked stage 2",
            lambda s: check_decode(
                list(range(1, 34)), 12, 3, 64, splits="random", v_scale=1.5, seed=s
            ),
        ),
        (
            "decode CUDA tiles (BLOCK_N 64)",
            lambda s: check_decode(
                [200, 64, 65, 1], 8, 2, 80, splits="random", config=dict(BLOCK_N=64), seed=s
            ),
        ),
        # Two / four kv heads per program: a row must see only its own kv head's columns.
        (
            "decode kv-pack 2, ratio4, random splits",
            lambda s: check_decode(
                _LENS_B, 8, 2, 64, splits="random", config=dict(KV_PACK=2), seed=s
            ),
        ),
        (
            "decode kv-pack 4, ratio2, cap, scales, seq_len0",
            lambda s: check_decode(
                [0, 70, 5, 33],
                8,
                4,
                80,
                logit_cap=5.0,
                k_scale=0.7,
                v_scale=1.9,
                config=dict(KV_PACK=4, BLOCK_N=32),
                seed=s,
            ),
        ),
        # Half precision exercises the casts before tl.dot. fp16, not bf16: the triton 3.9
        # interpreter computes tl.dot on bf16 inputs wrongly (a plain 16x16 bf16 dot is off by 1e10).
        (
            "decode fp16 GQA D128",
            lambda s: check_decode(_LENS_B, 8, 2, 128, dtype=torch.float16, seed=s),
            1e-2,
        ),
        (
            "decode fp16 MHA D64",
            lambda s: check_decode(_LENS_A, 3, 3, 64, dtype=torch.float16, seed=s),
            1e-2,
        ),
    ]
    if full:
        cases += [
            (
                "decode per-head-kernel ratio4",
                lambda s: check_decode(_LENS_A, 8, 2, 64, grouped=False, seed=s),
            ),
            (
                "decode ratio20 (2 head blocks)",
                lambda s: check_decode([3, 50], 20, 1, 64, splits="3", seed=s),
            ),
            (
                "decode ratio1 D80 random-splits cap",
                lambda s: check_decode(_LENS_B, 3, 3, 80, splits="random", logit_cap=3.0, seed=s),
            ),
            (
                "decode long 1 split",
                lambda s: check_decode([300, 129], 4, 1, 64, splits="1", seed=s),
            ),
            (
                "decode bs16 auto splits",
                lambda s: check_decode(list(range(1, 97, 6)), 4, 2, 64, max_kv_splits=8, seed=s),
            ),
        ]
    return cases


def extend_cases(full: bool) -> List[tuple]:
    cases = [
        (
            "extend ratio1 D64",
            lambda s: check_extend([0, 5, 33, 16], [1, 17, 20, 3], 2, 2, 64, seed=s),
        ),
        ("extend ratio3 D80", lambda s: check_extend([0, 18], [35, 1], 3, 1, 80, seed=s)),
        (
            "extend ratio4 D64 cap",
            lambda s: check_extend([7, 0, 40], [16, 33, 2], 4, 1, 64, logit_cap=4.0, seed=s),
        ),
        (
            "extend ratio4 D80 long",
            lambda s: check_extend([70, 0, 3], [45, 64, 1], 8, 2, 80, seed=s),
        ),
        # CUDA tile shapes: with BLOCK_M > BLOCK_N some rows of a diagonal tile see no key at all.
        (
            "extend CUDA tiles (M128 N64)",
            lambda s: check_extend(
                [70, 0],
                [130, 129],
                2,
                1,
                80,
                logit_cap=2.0,
                config=dict(BLOCK_M=128, BLOCK_N=64),
                seed=s,
            ),
        ),
        (
            "extend CUDA tiles (M64 N32)",
            lambda s: check_extend(
                [0, 40], [100, 1], 2, 2, 64, config=dict(BLOCK_M=64, BLOCK_N=32), seed=s
            ),
        ),
        (
            "extend fp16 ratio4 D128",
            lambda s: check_extend([30, 0], [20, 37], 4, 1, 128, dtype=torch.float16, seed=s),
            1e-2,
        ),
    ]
    if full:
        cases += [
            (
                "extend ratio3 D64 no-prefix",
                lambda s: check_extend([0, 0, 0], [1, 50, 17], 6, 2, 64, seed=s),
            ),
            (
                "extend Dv!=D (D80, Dv64)",
                lambda s: check_extend([20, 1], [30, 17], 4, 2, 80, v_dim=64, seed=s),
            ),
            ("extend D128 ratio1", lambda s: check_extend([33], [40], 2, 2, 128, seed=s)),
        ]
    return cases


def fused_cases(full: bool) -> List[tuple]:
    cases = [
        ("rmsnorm hidden 96", lambda s: check_rmsnorm(5, 96, residual=False, seed=s)),
        ("fused_add_rmsnorm hidden 576", lambda s: check_rmsnorm(3, 576, residual=True, seed=s)),
        # bf16 outputs differ from torch by up to 1 ulp here: the interpreter rounds fp32 -> bf16
        # toward zero where torch (and compiled triton) round to nearest even.
        (
            "fused_add_rmsnorm bf16 hidden 4096",
            lambda s: check_rmsnorm(4, 4096, residual=True, dtype=torch.bfloat16, seed=s),
            1e-2,
        ),
        (
            "silu_and_mul bf16",
            lambda s: check_silu_and_mul(3, 1000, dtype=torch.bfloat16, seed=s),
            1e-2,
        ),
        ("rotary bf16", lambda s: check_rotary(3, 8, 2, 128, dtype=torch.bfloat16, seed=s), 1e-2),
        ("store_kv bf16", lambda s: check_store_kv(5, 2, 128, dtype=torch.bfloat16, seed=s)),
        ("silu_and_mul I=80", lambda s: check_silu_and_mul(4, 80, seed=s)),
        ("silu_and_mul I=1500 (2 blocks)", lambda s: check_silu_and_mul(2, 1500, seed=s)),
        ("rotary H9/3 D64 strided", lambda s: check_rotary(5, 9, 3, 64, seed=s)),
        ("rotary H4/1 D80 partial 32", lambda s: check_rotary(3, 4, 1, 80, rotary_dim=32, seed=s)),
        ("rotary H6/2 D64 qk-norm", lambda s: check_rotary(4, 6, 2, 64, qk_norm=True, seed=s)),
        (
            "rotary bf16 H8/2 D128 qk-norm",
            lambda s: check_rotary(3, 8, 2, 128, qk_norm=True, dtype=torch.bfloat16, seed=s),
            1e-2,
        ),
        ("store_kv strided H3 D64", lambda s: check_store_kv(7, 3, 64, seed=s)),
        ("store_kv contiguous H2 D80", lambda s: check_store_kv(5, 2, 80, strided=False, seed=s)),
        ("rotary+store H8/2 D128", lambda s: check_rotary_store(5, 8, 2, 128, seed=s)),
        (
            "rotary+store H9/3 D64 scaled",
            lambda s: check_rotary_store(4, 9, 3, 64, k_scale=0.5, v_scale=2.0, seed=s),
        ),
        (
            "rotary+store H8/2 D128 qk-norm",
            lambda s: check_rotary_store(5, 8, 2, 128, qk_norm=True, seed=s),
        ),
        (
            "rotary+store bf16 H4/1 D80",
            lambda s: check_rotary_store(3, 4, 1, 80, dtype=torch.bfloat16, seed=s),
            1e-2,
        ),
        (
            "gemv M1 N37 K300 (K tail, row tail)",
            lambda s: check_gemv(
                1, 37, 300, seed=s, config=dict(BLOCK_N=8, BLOCK_K=128, num_warps=1)
            ),
        ),
        (
            "gemv M3 N16 K256 bias",
            lambda s: check_gemv(
                3, 16, 256, bias=True, seed=s, config=dict(BLOCK_N=4, BLOCK_K=64, num_warps=1)
            ),
        ),
        (
            "gemv M4 N9 K70 (one K tile)",
            lambda s: check_gemv(
                4, 9, 70, seed=s, config=dict(BLOCK_N=8, BLOCK_K=128, num_warps=1)
            ),
        ),
        (
            "gemv M2 bf16 default config",
            lambda s: check_gemv(2, 24, 600, dtype=torch.bfloat16, seed=s),
            1e-2,
        ),
        (
            "small-M M2 N37 K300 (tails)",
            lambda s: check_small_m(
                2,
                37,
                300,
                seed=s,
                config=dict(BLOCK_N=16, BLOCK_K=64, PREFETCH=0, num_warps=1, num_stages=1),
            ),
            1e-2,
        ),
        (
            "small-M M17 N40 K200 prefetch bias",
            lambda s: check_small_m(
                17,
                40,
                200,
                bias=True,
                seed=s,
                config=dict(BLOCK_N=16, BLOCK_K=64, PREFETCH=1, num_warps=1, num_stages=1),
            ),
            1e-2,
        ),
        (
            "small-M M64 N32 K128 prefetch one tile",
            lambda s: check_small_m(
                64,
                32,
                128,
                seed=s,
                config=dict(BLOCK_N=32, BLOCK_K=128, PREFETCH=1, num_warps=1, num_stages=1),
            ),
            1e-2,
        ),
        (
            "fp8 matmul M3 N200 K300 channel scales (tails)",
            lambda s: check_fp8_matmul(
                3,
                200,
                300,
                config=dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=64, num_warps=1, num_stages=1),
                seed=s,
            ),
        ),
        (
            "fp8 matmul M20 N130 K256 block 128 bias",
            lambda s: check_fp8_matmul(
                20,
                130,
                256,
                block=(128, 128),
                bias=True,
                config=dict(BLOCK_M=16, BLOCK_N=64, num_warps=1, num_stages=1),
                seed=s,
            ),
        ),
        (
            "fp8 matmul M1 N300 K200 block 128 (K tail)",
            lambda s: check_fp8_matmul(
                1,
                300,
                200,
                block=(128, 128),
                config=dict(BLOCK_N=128, num_warps=1, num_stages=1),
                seed=s,
            ),
        ),
        (
            "fp8 fused-quant matmul M1 N70 K300 channel (one row, tails)",
            lambda s: check_fp8_matmul_fused(
                1,
                70,
                300,
                config=dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=64, num_warps=1, num_stages=1),
                seed=s,
            ),
        ),
        (
            "fp8 fused-quant matmul M5 N40 K200 channel bias",
            lambda s: check_fp8_matmul_fused(
                5,
                40,
                200,
                bias=True,
                config=dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=64, num_warps=1, num_stages=1),
                seed=s,
            ),
        ),
        (
            "fp8 fused-quant matmul M1 / M3 N130 K300 block 128 (K tail)",
            lambda s: max(
                check_fp8_matmul_fused(
                    mm,
                    130,
                    300,
                    block=(128, 128),
                    config=dict(BLOCK_N=64, num_warps=1, num_stages=1),
                    seed=s,
                )
                for mm in (1, 3)
            ),
        ),
        (
            "fp8 word gemv N37 K300 channel (row and word tails)",
            lambda s: check_fp8_word_gemv(
                37, 300, config=dict(BLOCK_N=8, BLOCK_W=32, num_warps=1), seed=s
            ),
        ),
        (
            "fp8 word gemv N130 K384 block 128 bias",
            lambda s: check_fp8_word_gemv(
                130, 384, block=(128, 128), bias=True, config=dict(BLOCK_N=16, BLOCK_W=64), seed=s
            ),
        ),
        (
            "fp8 halves gemv N37 K300 (row and K tails, outlier, bias)",
            lambda s: check_fp8_halves_gemv(
                37, 300, bias=True, config=dict(BLOCK_N=8, BLOCK_K=32, GROUP=2, num_warps=1), seed=s
            ),
            1e-3,
        ),
        (
            "fp8 halves gemv N16 K512 (one group)",
            lambda s: check_fp8_halves_gemv(
                16, 512, config=dict(BLOCK_N=16, BLOCK_K=128, GROUP=4, num_warps=1), seed=s
            ),
            1e-3,
        ),
        ("decode prologue bs1", lambda s: check_decode_prologue(1, seed=s)),
        (
            "decode prologue bs70 (1,000 SMs: 1-16 splits)",
            lambda s: check_decode_prologue(70, num_sms=1000, seed=s),
        ),
        (
            "decode prologue bs1500 (two blocks)",
            lambda s: check_decode_prologue(1500, max_len=600, seed=s),
        ),
        ("greedy bs3 V1000 (splits)", lambda s: check_greedy(3, 1000, seed=s)),
        ("greedy ties bs4 V3000", lambda s: check_greedy(4, 3000, kind="ties", seed=s)),
        (
            "greedy NaN / inf / dead rows bs5 V900",
            lambda s: check_greedy(5, 900, kind="special", seed=s),
        ),
        ("greedy bf16 bs2 V513", lambda s: check_greedy(2, 513, dtype=torch.bfloat16, seed=s)),
        ("race argmax softmax bs3 V1000 (splits)", lambda s: check_race(3, 1000, seed=s)),
        ("race argmax filtered bs2 V777", lambda s: check_race(2, 777, kind="filtered", seed=s)),
        (
            "race argmax uniform ties bs4 V3000",
            lambda s: check_race(4, 3000, kind="uniform", seed=s),
        ),
        ("race argmax strided rows bs1 V300", lambda s: check_race(1, 300, kind="strided", seed=s)),
        ("race argmax all-zero rows bs2 V500", lambda s: check_race(2, 500, kind="zeros", seed=s)),
    ]
    if full:
        cases += [
            (
                "fused_add_rmsnorm hidden 4096",
                lambda s: check_rmsnorm(4, 4096, residual=True, seed=s),
            ),
            ("rotary H32/8 D128", lambda s: check_rotary(4, 32, 8, 128, seed=s)),
        ]
    return cases


def invariant_cases(full: bool) -> List[tuple]:
    """The deterministic-inference kernels (invariance_checks.py imports this module's builders)."""
    from invariance_checks import invariant_cases as cases

    return cases(full)


GROUPS: Dict[str, Callable[[bool], List[tuple]]] = {
    "decode": decode_cases,
    "extend": extend_cases,
    "fused": fused_cases,
    "invariant": invariant_cases,
}
TOL = 2e-5  # float32 on CPU: only summation order differs (cases may give their own tolerance)


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("groups", nargs="*", help=f"any of {sorted(GROUPS)} (default: all)")
    ap.add_argument("--full", action="store_true", help="also run the slower / bigger cases")
    ap.add_argument(
        "--seed", type=int, default=None, help="base seed (default: time-based, printed)"
    )
    args = ap.parse_args(argv)
    unknown = set(args.groups) - set(GROUPS)
    if unknown:
        ap.error(f"unknown group(s) {sorted(unknown)}")
    groups = args.groups or list(GROUPS)
    if os.environ.get("TRITON_INTERPRET") != "1":
        print(
            "kernel_checks must run with TRITON_INTERPRET=1 (run it as a script)", file=sys.stderr
        )
        return 2
    seed = args.seed if args.seed is not None else int(time.time()) % 100000
    print(f"seed {seed}")
    failures = 0
    for group in groups:
        for i, (name, fn, *tol) in enumerate(GROUPS[group](args.full)):
            t0 = time.perf_counter()
            try:
                err = fn(seed + i)
            except Exception as e:  # noqa: BLE001 - report and keep going so one run shows every failure
                err, name = math.inf, f"{name} raised {type(e).__name__}: {e}"
            ok = err <= (tol[0] if tol else TOL)
            failures += not ok
            print(
                f"{'ok  ' if ok else 'FAIL'} {name:<45} rel_err={err:.2e} ({time.perf_counter() - t0:.1f}s)"
            )
    print(f"{failures} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
