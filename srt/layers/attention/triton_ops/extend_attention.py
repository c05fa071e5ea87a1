"""Extend (prefill) attention over a cached prefix in the token-slot KV pool plus new tokens.

Request b has seq_len[b] tokens in total; its last extend_len[b] are new. Their q/k/v rows are
stored back to back in q_extend / k_extend / v_extend starting at extend_start_loc[b]. Each new
token attends to the whole cached prefix (positions [0, prefix_len), gathered from
k_buffer / v_buffer through req_to_token) and causally to the new tokens up to itself.

One program = (query head, block of BLOCK_M new tokens, request). The kernel runs two loops that
share one online softmax: first over the prefix (gathered slots), then over the new tokens
(contiguous rows). K/V of the new tokens are read from k_extend / v_extend, never from the pool,
so the caller may store them into the pool before or after this call.

keys_from_pool (deterministic inference): one loop over all of a request's keys, prefix and new
alike, read from the pool (which must hold the new tokens' K/V already) in BLOCK_N tiles from key 0,
each query seeing keys up to its own position. A query's output is then the same bits wherever the
prefix ends (a radix hit, a prompt chunk) and whatever block of queries it shares: tiles past its
position leave its running max, sum and accumulator exactly as they were.
"""

from __future__ import annotations

from typing import Optional

import torch
import triton
import triton.language as tl


@triton.jit
def _soft_cap(x, logit_cap, HAS_CAP: tl.constexpr):
    # cap * tanh(x / cap); tanh via sigmoid so it needs no libdevice (triton 3.6 + interpreter).
    if HAS_CAP:
        x = logit_cap * (2.0 * tl.sigmoid(2.0 * x / logit_cap) - 1.0)
    return x


@triton.jit
def _online_softmax_step(
    qk,
    v,
    m_i,
    l_i,
    acc,
    dot_dtype: tl.constexpr,
    v_mul,
    SCALE_V: tl.constexpr,
    DOT_PREC: tl.constexpr,
):
    """Fold one tile of log2-domain logits qk [M, N] (masked entries = -inf) and V [N, DV] into the
    running (max, sum, acc). Rows keep a finite max (they start at -1e30), so no -inf - -inf."""
    m_new = tl.maximum(m_i, tl.max(qk, 1))
    alpha = tl.exp2(m_i - m_new)
    p = tl.exp2(qk - m_new[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    pv = tl.dot(p.to(dot_dtype), v.to(dot_dtype), input_precision=DOT_PREC)
    if SCALE_V:  # an fp8 pool holds V / v_scale
        pv = pv * v_mul
    acc = acc * alpha[:, None] + pv
    return m_new, l_i, acc


# NUM_M_BLOCKS follows the batch's longest extend; specialising on it (== 1, divisible by 16) would
# compile new variants mid-serving for no gain (it only bounds the grid).
@triton.jit(do_not_specialize=["NUM_M_BLOCKS"])
def _extend_attention_kernel(
    Q,
    KExt,
    VExt,
    O,
    KBuf,
    VBuf,
    ReqToToken,
    ReqPoolIdx,
    SeqLens,
    ExtLens,
    ExtStart,
    sm_scale,
    logit_cap,
    prefix_k_scale,
    prefix_v_scale,
    stride_qt,
    stride_qh,
    stride_kt,
    stride_kh,
    stride_vt,
    stride_vh,
    stride_ot,
    stride_oh,
    stride_kbt,
    stride_kbh,
    stride_vbt,
    stride_vbh,
    stride_rt,
    NUM_M_BLOCKS,
    GROUP: tl.constexpr,
    D: tl.constexpr,
    DV: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    HAS_CAP: tl.constexpr,
    SLOT_INT64: tl.constexpr,
    SCALED_PREFIX: tl.constexpr,
    DOT_PREC: tl.constexpr,
    KEYS_FROM_POOL: tl.constexpr,
):
    h = tl.program_id(0)
    # Last query blocks see the most keys: launch them first so the tail of the grid is short.
    mb = NUM_M_BLOCKS - 1 - tl.program_id(1)
    b = tl.program_id(2)
    kv_head = h // GROUP

    ext_len = tl.load(ExtLens + b).to(tl.int32)
    m_start = mb * BLOCK_M
    if m_start < ext_len:
        seq_len = tl.load(SeqLens + b).to(tl.int32)
        prefix_len = seq_len - ext_len
        ext_start = tl.load(ExtStart + b).to(tl.int64)
        # 64-bit scalar bases per request; the per-tile offsets below stay 32-bit (fewer registers).
        slot_row = ReqToToken + tl.load(ReqPoolIdx + b).to(tl.int64) * stride_rt
        q_base = Q + ext_start * stride_qt + h * stride_qh
        o_base = O + ext_start * stride_ot + h * stride_oh
        kx_base = KExt + ext_start * stride_kt + kv_head * stride_kh
        vx_base = VExt + ext_start * stride_vt + kv_head * stride_vh
        kb_base = KBuf + kv_head * stride_kbh
        vb_base = VBuf + kv_head * stride_vbh

        offs_m = m_start + tl.arange(0, BLOCK_M)
        offs_n = tl.arange(0, BLOCK_N)
        offs_d = tl.arange(0, BLOCK_D)
        offs_dv = tl.arange(0, BLOCK_DV)
        mask_m = offs_m < ext_len
        mask_d = offs_d < D
        mask_dv = offs_dv < DV

        q = tl.load(
            q_base + offs_m[:, None] * stride_qt + offs_d[None, :],
            mask=mask_m[:, None] & mask_d[None, :],
            other=0.0,
        )
        m_i = tl.full([BLOCK_M], -1e30, tl.float32)
        l_i = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, BLOCK_DV], tl.float32)

        # Phase 1: the cached prefix, gathered slot by slot through req_to_token (keys_from_pool:
        # every key up to this block's last query, this pass's included, causally masked).
        pool_end = prefix_len
        if KEYS_FROM_POOL:
            pool_end = tl.minimum(seq_len, prefix_len + m_start + BLOCK_M)
        for n0 in range(0, pool_end, BLOCK_N):
            offs = n0 + offs_n
            mask_n = offs < pool_end
            slot = tl.load(slot_row + offs, mask=mask_n, other=0)
            if SLOT_INT64:  # only for pools with >= 2^31 elements per buffer
                slot = slot.to(tl.int64)
            k = tl.load(
                kb_base + slot[None, :] * stride_kbt + offs_d[:, None],
                mask=mask_d[:, None] & mask_n[None, :],
                other=0.0,
            )
            # prefix_k_scale = sm_scale * k_scale: an fp8 pool holds K / k_scale (1.0 otherwise).
            qk = tl.dot(q, k.to(q.dtype), input_precision=DOT_PREC) * prefix_k_scale
            qk = _soft_cap(qk, logit_cap, HAS_CAP)
            seen = mask_n[None, :]
            if KEYS_FROM_POOL:
                seen = seen & (offs[None, :] <= (prefix_len + offs_m)[:, None])
            # log2 domain (x log2(e)) so the softmax uses exp2; masked positions get -inf.
            qk = tl.where(seen, qk * 1.4426950408889634, float("-inf"))
            v = tl.load(
                vb_base + slot[:, None] * stride_vbt + offs_dv[None, :],
                mask=mask_n[:, None] & mask_dv[None, :],
                other=0.0,
            )
            m_i, l_i, acc = _online_softmax_step(
                qk, v, m_i, l_i, acc, q.dtype, prefix_v_scale, SCALED_PREFIX, DOT_PREC
            )

        if not KEYS_FROM_POOL:
            # Phase 2a: new-token keys entirely below this query block: no mask at all.
            full_end = (m_start // BLOCK_N) * BLOCK_N
            for n0 in range(0, full_end, BLOCK_N):
                offs = n0 + offs_n
                k = tl.load(
                    kx_base + offs[None, :] * stride_kt + offs_d[:, None],
                    mask=mask_d[:, None],
                    other=0.0,
                )
                qk = tl.dot(q, k.to(q.dtype), input_precision=DOT_PREC) * sm_scale
                qk = _soft_cap(qk, logit_cap, HAS_CAP) * 1.4426950408889634
                v = tl.load(
                    vx_base + offs[:, None] * stride_vt + offs_dv[None, :],
                    mask=mask_dv[None, :],
                    other=0.0,
                )
                m_i, l_i, acc = _online_softmax_step(
                    qk, v, m_i, l_i, acc, q.dtype, 1.0, False, DOT_PREC
                )

            # Phase 2b: the diagonal tiles, causal (key j <= query i) and clipped to the request.
            ext_end = tl.minimum(ext_len, m_start + BLOCK_M)
            for n0 in range(full_end, ext_end, BLOCK_N):
                offs = n0 + offs_n
                mask_n = offs < ext_end
                k = tl.load(
                    kx_base + offs[None, :] * stride_kt + offs_d[:, None],
                    mask=mask_d[:, None] & mask_n[None, :],
                    other=0.0,
                )
                qk = tl.dot(q, k.to(q.dtype), input_precision=DOT_PREC) * sm_scale
                qk = _soft_cap(qk, logit_cap, HAS_CAP)
                causal = mask_n[None, :] & (offs[None, :] <= offs_m[:, None])
                qk = tl.where(causal, qk * 1.4426950408889634, float("-inf"))
                v = tl.load(
                    vx_base + offs[:, None] * stride_vt + offs_dv[None, :],
                    mask=mask_n[:, None] & mask_dv[None, :],
                    other=0.0,
                )
                m_i, l_i, acc = _online_softmax_step(
                    qk, v, m_i, l_i, acc, q.dtype, 1.0, False, DOT_PREC
                )

        # Valid rows always include their own key, so l_i > 0 there; padded rows are not stored.
        out = acc / l_i[:, None]
        tl.store(
            o_base + offs_m[:, None] * stride_ot + offs_dv[None, :],
            out.to(O.dtype.element_ty),
            mask=mask_m[:, None] & mask_dv[None, :],
        )


def _extend_config(block_d: int, block_dv: int, on_cuda: bool) -> dict:
    """Tiles by head dim. Prefill is compute-bound: big BLOCK_M for MMA reuse, limited by registers
    (acc is BLOCK_M x BLOCK_DV fp32) and shared memory (K/V tiles x num_stages)."""
    if not on_cuda:
        # Triton interpreter: small tiles so multi-block and multi-tile paths run at test shapes.
        return dict(BLOCK_M=16, BLOCK_N=16, num_warps=1, num_stages=1)
    # Picked from offline sm_90 compiles (triton 3.9, ptxas -v): no register spills, and shared
    # memory low enough for 2 programs per SM where possible. Untimed: sweep on the H200.
    width = max(block_d, block_dv)
    if width <= 64:  # 128 regs, 64 KB smem
        return dict(BLOCK_M=128, BLOCK_N=64, num_warps=8, num_stages=3)
    if width <= 128:  # 220 regs, 96 KB smem
        return dict(BLOCK_M=128, BLOCK_N=64, num_warps=8, num_stages=2)
    return dict(BLOCK_M=64, BLOCK_N=32, num_warps=4, num_stages=2)  # 255 regs, 96 KB smem


def extend_attention_fwd(
    q_extend: torch.Tensor,
    k_extend: torch.Tensor,
    v_extend: torch.Tensor,
    o_extend: torch.Tensor,
    k_buffer: torch.Tensor,
    v_buffer: torch.Tensor,
    req_to_token: torch.Tensor,
    req_pool_indices: torch.Tensor,
    seq_lens: torch.Tensor,
    extend_seq_lens: torch.Tensor,
    extend_start_loc: torch.Tensor,
    max_len_extend: int,
    sm_scale: float,
    logit_cap: float = 0.0,
    config: Optional[dict] = None,
    k_scale: float = 1.0,
    v_scale: float = 1.0,
    keys_from_pool: bool = False,
) -> None:
    """Prefix + causal attention for the new tokens of a batch; writes o_extend [N, H, Dv] in place.

    q_extend [N, H, D], k_extend [N, H_kv, D], v_extend [N, H_kv, Dv]; k_buffer / v_buffer the
    pool's layer buffers; req_to_token [rows, ctx] int32; req_pool_indices, seq_lens,
    extend_seq_lens, extend_start_loc [bs] on the device; max_len_extend a host int >= every
    extend length (it only sizes the grid). `config` overrides the launch config (BLOCK_M, BLOCK_N,
    num_warps, num_stages) for tuning sweeps. k_buffer / v_buffer may be float8_e4m3fn holding
    K / k_scale and V / v_scale: prefix tiles are widened in registers and the scales applied to the
    logits and to P.V (new tokens come unscaled from k_extend / v_extend).
    """
    num_tokens, num_heads, head_dim = q_extend.shape
    num_kv_heads = k_extend.shape[1]
    v_dim = v_extend.shape[2]
    bs = seq_lens.shape[0]
    assert num_heads % num_kv_heads == 0, "query heads must be a multiple of kv heads"
    assert k_buffer.shape[1] == num_kv_heads and k_buffer.shape[2] == head_dim
    assert v_buffer.shape[2] == v_dim and o_extend.shape == (num_tokens, num_heads, v_dim)
    for t in (q_extend, k_extend, v_extend, o_extend, k_buffer, v_buffer, req_to_token):
        assert t.stride(-1) == 1, "last dimension must be contiguous"
    if bs == 0 or num_tokens == 0 or max_len_extend <= 0:
        return
    block_d = triton.next_power_of_2(head_dim)
    block_dv = triton.next_power_of_2(v_dim)
    cfg = dict(_extend_config(block_d, block_dv, q_extend.is_cuda), **(config or {}))
    # Per-request tile offsets are 32-bit: (token within the request) x (row stride) must fit.
    row_stride = max(q_extend.stride(0), k_extend.stride(0), v_extend.stride(0), o_extend.stride(0))
    assert (max_len_extend + cfg["BLOCK_M"]) * row_stride < 2**31, (
        "extend chunk too long for 32-bit offsets"
    )
    slot_int64 = (
        max(k_buffer.shape[0] * k_buffer.stride(0), v_buffer.shape[0] * v_buffer.stride(0)) >= 2**31
    )
    num_m_blocks = triton.cdiv(max_len_extend, cfg["BLOCK_M"])
    grid = (num_heads, num_m_blocks, bs)
    _extend_attention_kernel[grid](
        q_extend,
        k_extend,
        v_extend,
        o_extend,
        k_buffer,
        v_buffer,
        req_to_token,
        req_pool_indices,
        seq_lens,
        extend_seq_lens,
        extend_start_loc,
        sm_scale,
        logit_cap,
        sm_scale * k_scale,
        v_scale,
        q_extend.stride(0),
        q_extend.stride(1),
        k_extend.stride(0),
        k_extend.stride(1),
        v_extend.stride(0),
        v_extend.stride(1),
        o_extend.stride(0),
        o_extend.stride(1),
        k_buffer.stride(0),
        k_buffer.stride(1),
        v_buffer.stride(0),
        v_buffer.stride(1),
        req_to_token.stride(0),
        num_m_blocks,
        GROUP=num_heads // num_kv_heads,
        D=head_dim,
        DV=v_dim,
        BLOCK_M=cfg["BLOCK_M"],
        BLOCK_N=cfg["BLOCK_N"],
        BLOCK_D=block_d,
        BLOCK_DV=block_dv,
        HAS_CAP=logit_cap > 0,
        SLOT_INT64=slot_int64,
        SCALED_PREFIX=v_scale != 1.0,
        DOT_PREC="ieee" if q_extend.dtype == torch.float32 else "tf32",
        KEYS_FROM_POOL=keys_from_pool,
        num_warps=cfg["num_warps"],
        num_stages=cfg["num_stages"],
    )


def extend_attention_ref(
    q_extend: torch.Tensor,
    k_extend: torch.Tensor,
    v_extend: torch.Tensor,
    k_buffer: torch.Tensor,
    v_buffer: torch.Tensor,
    req_to_token: torch.Tensor,
    req_pool_indices: torch.Tensor,
    seq_lens: torch.Tensor,
    extend_seq_lens: torch.Tensor,
    extend_start_loc: torch.Tensor,
    sm_scale: float,
    logit_cap: float = 0.0,
    k_scale: float = 1.0,
    v_scale: float = 1.0,
) -> torch.Tensor:
    """Torch twin of extend_attention_fwd in fp32; returns [N, H, Dv] float32 (per-request loop)."""
    num_tokens, num_heads, _ = q_extend.shape
    group = num_heads // k_extend.shape[1]
    out = torch.zeros(
        (num_tokens, num_heads, v_extend.shape[2]), dtype=torch.float32, device=q_extend.device
    )
    for row, n, e, s in zip(
        req_pool_indices.tolist(),
        seq_lens.tolist(),
        extend_seq_lens.tolist(),
        extend_start_loc.tolist(),
    ):
        if e == 0:
            continue
        p = n - e
        slots = req_to_token[row, :p].long()
        k = torch.cat(
            [k_buffer[slots].float() * k_scale, k_extend[s : s + e].float()]
        ).repeat_interleave(group, dim=1)
        v = torch.cat(
            [v_buffer[slots].float() * v_scale, v_extend[s : s + e].float()]
        ).repeat_interleave(group, dim=1)
        logits = torch.einsum("mhd,nhd->hmn", q_extend[s : s + e].float(), k) * sm_scale
        if logit_cap > 0:
            logits = logit_cap * torch.tanh(logits / logit_cap)
        # query i (absolute position p + i) sees keys j <= p + i
        allowed = (
            torch.arange(p + e, device=k.device)[None, :]
            <= (p + torch.arange(e, device=k.device))[:, None]
        )
        logits = logits.masked_fill(~allowed[None], float("-inf"))
        out[s : s + e] = torch.einsum("hmn,nhd->mhd", torch.softmax(logits, dim=-1), v)
    return out
