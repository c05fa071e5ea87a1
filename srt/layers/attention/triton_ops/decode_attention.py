"""Paged split-KV decode attention (flash-decoding) over the token-slot KV pool.

One query token per request attends to positions [0, seq_len) of that request, whose K/V live in
scattered slots of k_buffer / v_buffer; req_to_token[row, pos] gives the slot.

Stage 1 cuts each request's positions into num_kv_splits[b] chunks and gives every
(request, head block, split) its own program, so one long request still fills the GPU. Each program
writes a normalised partial output and its log-sum-exp into fp32 workspaces. Stage 2 merges the
splits of each (request, head) with a log-sum-exp weighted sum. A request with a single split (large
batches, short contexts) is finished by stage 1, which writes o itself; its stage-2 programs only wait.

CUDA-graph safety: the launch never reads device values on the host. Both grids depend only on
bs, the head counts and max_kv_splits; the per-request split count is read inside the kernels from a
device tensor (clamped to [1, max_kv_splits]), so a captured graph replays correctly whatever the
sequence lengths are. A row with seq_len == 0 (a padded graph row) gets an all-zero output.

Workspace contract: attn_logits[b, h, s] holds split s's softmax-normalised output and
attn_lse[b, h, s] its natural-log sum-exp of the scaled (and capped) logits; entries of splits that
are out of range or empty, and all entries of single-split requests, are left untouched and never read.
"""

from __future__ import annotations

import os
from typing import Optional

import torch
import triton
import triton.language as tl

from sglang.srt.layers.triton_ops.pdl import pdl_args, pdl_wait

# Query heads of one kv head are packed into a block of this many rows so that tl.dot can be used
# (tensor-core MMAs need M >= 16). The padding rows cost MMA work, which decode has plenty of spare.
_GROUP_BLOCK_H = 16


@triton.jit
def _soft_cap(x, logit_cap, HAS_CAP: tl.constexpr):
    # cap * tanh(x / cap); tanh written with sigmoid so it needs no libdevice (triton 3.6 + interpreter).
    if HAS_CAP:
        x = logit_cap * (2.0 * tl.sigmoid(2.0 * x / logit_cap) - 1.0)
    return x


@triton.jit
def _split_bounds(SeqLens, NumSplits, b, split, MAX_SPLITS: tl.constexpr):
    """([start, end) of split `split` of request b, its clamped split count); start >= end means
    the split is empty."""
    seq_len = tl.load(SeqLens + b).to(tl.int32)
    n_splits = tl.minimum(tl.maximum(tl.load(NumSplits + b).to(tl.int32), 1), MAX_SPLITS)
    split_len = tl.cdiv(seq_len, n_splits)
    start = split * split_len
    end = tl.minimum(start + split_len, seq_len)
    return start, end, n_splits


@triton.jit
def _decode_stage1_grouped(
    Q,
    K,
    V,
    ReqToToken,
    ReqPoolIdx,
    SeqLens,
    NumSplits,
    Mid,
    MidLse,
    O,
    sm_scale,
    logit_cap,
    v_scale,
    stride_qb,
    stride_qh,
    stride_kt,
    stride_kh,
    stride_vt,
    stride_vh,
    stride_rt,
    stride_mb,
    stride_mh,
    stride_ms,
    stride_lb,
    stride_lh,
    stride_ob,
    stride_oh,
    GROUP: tl.constexpr,
    BLOCKS_PER_KV: tl.constexpr,
    KV_PACK: tl.constexpr,
    MAX_SPLITS: tl.constexpr,
    D: tl.constexpr,
    DV: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    HAS_CAP: tl.constexpr,
    SLOT_INT64: tl.constexpr,
    DOT_PREC: tl.constexpr,
    PDL: tl.constexpr,
):
    """One program = (request, block of query heads sharing one kv head, split): K/V read once.

    KV_PACK > 1 (BLOCKS_PER_KV == 1, GROUP x KV_PACK <= BLOCK_H): one program takes KV_PACK
    consecutive kv heads and their query heads. A tile's column c is token c // KV_PACK of kv head
    c % KV_PACK, and a query row only sees its own kv head's columns (the others are masked like
    positions past the end), so each program streams KV_PACK times the bytes for the same fixed
    cost per program (slot-row set-up, pipeline fill, epilogue), which dominates short contexts."""
    b = tl.program_id(0)
    hb = tl.program_id(1)
    split = tl.program_id(2)
    # The lengths, split counts and slot rows are written before the step's first kernel, never by
    # the kernel just before this one, so they are read before the PDL wait (off the critical path).
    start, end, n_splits = _split_bounds(SeqLens, NumSplits, b, split, MAX_SPLITS)
    slot_row = ReqToToken + tl.load(ReqPoolIdx + b).to(tl.int64) * stride_rt
    pdl_wait(PDL)
    kv_head = (hb // BLOCKS_PER_KV) * KV_PACK
    local = (hb % BLOCKS_PER_KV) * BLOCK_H + tl.arange(0, BLOCK_H)
    mask_h = local < GROUP * KV_PACK
    heads = kv_head * GROUP + local
    offs_d = tl.arange(0, BLOCK_D)
    offs_dv = tl.arange(0, BLOCK_DV)
    offs_n = tl.arange(0, BLOCK_N)
    mask_d = offs_d < D
    mask_dv = offs_dv < DV
    if KV_PACK > 1:
        col_kv = offs_n % KV_PACK
        # Padding rows follow the last kv head, so every row sees some position (no 0/0 softmax).
        row_kv = tl.minimum(tl.arange(0, BLOCK_H) // GROUP, KV_PACK - 1)
        own_head = row_kv[:, None] == col_kv[None, :]
        offs_n = offs_n // KV_PACK
        k_cols = col_kv[None, :] * stride_kh
        v_rows = col_kv[:, None] * stride_vh
    else:
        k_cols = 0
        v_rows = 0

    if start < end:
        k_base = K + kv_head * stride_kh + k_cols
        v_base = V + kv_head * stride_vh + v_rows
        q = tl.load(
            Q + b * stride_qb + heads[:, None] * stride_qh + offs_d[None, :],
            mask=mask_h[:, None] & mask_d[None, :],
            other=0.0,
        )
        m_i = tl.full([BLOCK_H], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_H], tl.float32)
        acc = tl.zeros([BLOCK_H, BLOCK_DV], tl.float32)
        # With num_stages >= 2 Triton's pipeliner issues the slot-id load and the K/V gathers of
        # later tiles ahead of this tile's math (checked in the sm_90 TTGIR), hiding the two
        # dependent memory round trips per tile.
        for n0 in range(start, end, BLOCK_N // KV_PACK):
            offs = n0 + offs_n
            mask_n = offs < end
            slot = tl.load(slot_row + offs, mask=mask_n, other=0)
            if (
                SLOT_INT64
            ):  # only for pools with >= 2^31 elements per buffer: 64-bit math costs registers
                slot = slot.to(tl.int64)
            # K^T tile [BLOCK_D, BLOCK_N]; masked lanes are never dereferenced (slot 0 may hold junk).
            k = tl.load(
                k_base + slot[None, :] * stride_kt + offs_d[:, None],
                mask=mask_d[:, None] & mask_n[None, :],
                other=0.0,
            )
            qk = tl.dot(q, k.to(q.dtype), input_precision=DOT_PREC) * sm_scale
            qk = _soft_cap(qk, logit_cap, HAS_CAP)
            # log2 domain (x log2(e)) so the softmax uses exp2; masked positions get -inf.
            seen = mask_n[None, :]
            if KV_PACK > 1:
                seen = seen & own_head
            qk = tl.where(seen, qk * 1.4426950408889634, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(qk, 1))
            alpha = tl.exp2(m_i - m_new)
            p = tl.exp2(qk - m_new[:, None])
            l_i = l_i * alpha + tl.sum(p, 1)
            v = tl.load(
                v_base + slot[:, None] * stride_vt + offs_dv[None, :],
                mask=mask_n[:, None] & mask_dv[None, :],
                other=0.0,
            )
            acc = acc * alpha[:, None] + tl.dot(
                p.to(q.dtype), v.to(q.dtype), input_precision=DOT_PREC
            )
            m_i = m_new
        # Every row saw at least one unmasked position (start < end), so l_i > 0.
        out = acc / l_i[:, None]
        mask_out = mask_h[:, None] & mask_dv[None, :]
        if n_splits == 1:  # the whole request in this program: final output, stage 2 skips it
            tl.store(
                O + b * stride_ob + heads[:, None] * stride_oh + offs_dv[None, :],
                (out * v_scale).to(O.dtype.element_ty),
                mask=mask_out,
            )
        else:
            tl.store(
                Mid
                + b * stride_mb
                + heads[:, None] * stride_mh
                + split * stride_ms
                + offs_dv[None, :],
                out,
                mask=mask_out,
            )
            lse = (m_i + tl.log2(l_i)) * 0.6931471805599453  # back to natural log (x ln 2)
            tl.store(MidLse + b * stride_lb + heads * stride_lh + split, lse, mask=mask_h)


@triton.jit
def _decode_stage1_per_head(
    Q,
    K,
    V,
    ReqToToken,
    ReqPoolIdx,
    SeqLens,
    NumSplits,
    Mid,
    MidLse,
    O,
    sm_scale,
    logit_cap,
    v_scale,
    stride_qb,
    stride_qh,
    stride_kt,
    stride_kh,
    stride_vt,
    stride_vh,
    stride_rt,
    stride_mb,
    stride_mh,
    stride_ms,
    stride_lb,
    stride_lh,
    stride_ob,
    stride_oh,
    GROUP: tl.constexpr,
    MAX_SPLITS: tl.constexpr,
    D: tl.constexpr,
    DV: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    HAS_CAP: tl.constexpr,
    SLOT_INT64: tl.constexpr,
    PDL: tl.constexpr,
):
    """One program = (request, query head, split); vector math, no MMA. Used when GROUP == 1."""
    b = tl.program_id(0)
    h = tl.program_id(1)
    split = tl.program_id(2)
    start, end, n_splits = _split_bounds(
        SeqLens, NumSplits, b, split, MAX_SPLITS
    )  # before the wait: see above
    slot_row = ReqToToken + tl.load(ReqPoolIdx + b).to(tl.int64) * stride_rt
    pdl_wait(PDL)
    kv_head = h // GROUP
    offs_d = tl.arange(0, BLOCK_D)
    offs_dv = tl.arange(0, BLOCK_DV)
    offs_n = tl.arange(0, BLOCK_N)
    mask_d = offs_d < D
    mask_dv = offs_dv < DV

    if start < end:
        k_base = K + kv_head * stride_kh
        v_base = V + kv_head * stride_vh
        q = tl.load(Q + b * stride_qb + h * stride_qh + offs_d, mask=mask_d, other=0.0).to(
            tl.float32
        )
        m_i = float("-inf")
        l_i = 0.0
        acc = tl.zeros([BLOCK_DV], tl.float32)
        for n0 in range(start, end, BLOCK_N):
            offs = n0 + offs_n
            mask_n = offs < end
            slot = tl.load(slot_row + offs, mask=mask_n, other=0)
            if SLOT_INT64:
                slot = slot.to(tl.int64)
            k = tl.load(
                k_base + slot[:, None] * stride_kt + offs_d[None, :],
                mask=mask_n[:, None] & mask_d[None, :],
                other=0.0,
            )
            qk = tl.sum(q[None, :] * k.to(tl.float32), 1) * sm_scale
            qk = _soft_cap(qk, logit_cap, HAS_CAP)
            qk = tl.where(mask_n, qk * 1.4426950408889634, float("-inf"))
            # Every tile has >= 1 unmasked position, so m_new is finite from the first tile on.
            m_new = tl.maximum(m_i, tl.max(qk, 0))
            alpha = tl.exp2(m_i - m_new)
            p = tl.exp2(qk - m_new)
            l_i = l_i * alpha + tl.sum(p, 0)
            v = tl.load(
                v_base + slot[:, None] * stride_vt + offs_dv[None, :],
                mask=mask_n[:, None] & mask_dv[None, :],
                other=0.0,
            )
            acc = acc * alpha + tl.sum(p[:, None] * v.to(tl.float32), 0)
            m_i = m_new
        if n_splits == 1:
            tl.store(
                O + b * stride_ob + h * stride_oh + offs_dv,
                (acc * (v_scale / l_i)).to(O.dtype.element_ty),
                mask=mask_dv,
            )
        else:
            tl.store(
                Mid + b * stride_mb + h * stride_mh + split * stride_ms + offs_dv,
                acc / l_i,
                mask=mask_dv,
            )
            tl.store(
                MidLse + b * stride_lb + h * stride_lh + split,
                (m_i + tl.log2(l_i)) * 0.6931471805599453,
            )


@triton.jit
def _merge_split(acc, e_sum, e_max, lse, o_s):
    """Fold one split (its lse and normalised output o_s) into the running log-sum-exp merge; the
    per-head values broadcast against acc ([DV] with scalars, or [HS, DV] with [HS, 1])."""
    new_max = tl.maximum(e_max, lse)
    rescale = tl.exp(e_max - new_max)
    w = tl.exp(lse - new_max)
    return acc * rescale + w * o_s, e_sum * rescale + w, new_max


@triton.jit
def _merged_out(acc, e_sum, v_scale):
    # e_sum >= 1 unless no split was written (then acc = 0: zeros, no NaN). v_scale dequantises an
    # fp8 V pool: sum_j p_j (s v_j) = s sum_j p_j v_j.
    return acc * (v_scale / tl.where(e_sum > 0.0, e_sum, 1.0))


@triton.jit
def _stage2_counts(SeqLens, NumSplits, b, MAX_SPLITS: tl.constexpr):
    """(seq_len, clamped split count, splits stage 1 wrote) of request b. Splits [0, n_written) are
    exactly the non-empty ones; seq_len 0 gives none."""
    seq_len = tl.load(SeqLens + b).to(tl.int32)
    n_splits = tl.minimum(tl.maximum(tl.load(NumSplits + b).to(tl.int32), 1), MAX_SPLITS)
    n_written = tl.cdiv(seq_len, tl.maximum(tl.cdiv(seq_len, n_splits), 1))
    return seq_len, n_splits, n_written


@triton.jit
def _decode_stage2(
    Mid,
    MidLse,
    O,
    SeqLens,
    NumSplits,
    v_scale,
    stride_mb,
    stride_mh,
    stride_ms,
    stride_lb,
    stride_lh,
    stride_ob,
    stride_oh,
    MAX_SPLITS: tl.constexpr,
    DV: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    PDL: tl.constexpr,
):
    """Merge the splits of one (request, head): out = sum_s exp(lse_s - M) o_s / sum_s exp(lse_s - M).
    Requests with one split were finished by stage 1; an empty request (seq_len 0) gets zeros."""
    b = tl.program_id(0)
    h = tl.program_id(1)
    seq_len, n_splits, n_written = _stage2_counts(SeqLens, NumSplits, b, MAX_SPLITS)
    # Every program waits, even one with nothing to merge: the next kernel's wait covers only this
    # grid, so this grid must not finish before stage 1 has.
    pdl_wait(PDL)
    if (n_splits > 1) | (seq_len == 0):
        offs_dv = tl.arange(0, BLOCK_DV)
        mask_dv = offs_dv < DV
        e_max = -1e30  # finite: an all-empty row ends with acc = 0 and e_sum = 0
        e_sum = 0.0
        acc = tl.zeros([BLOCK_DV], tl.float32)
        for s in range(0, n_written):
            lse = tl.load(MidLse + b * stride_lb + h * stride_lh + s)
            o_s = tl.load(
                Mid + b * stride_mb + h * stride_mh + s * stride_ms + offs_dv,
                mask=mask_dv,
                other=0.0,
            )
            acc, e_sum, e_max = _merge_split(acc, e_sum, e_max, lse, o_s)
        tl.store(
            O + b * stride_ob + h * stride_oh + offs_dv,
            _merged_out(acc, e_sum, v_scale).to(O.dtype.element_ty),
            mask=mask_dv,
        )


@triton.jit
def _decode_stage2_blocked(
    Mid,
    MidLse,
    O,
    SeqLens,
    NumSplits,
    v_scale,
    stride_mb,
    stride_mh,
    stride_ms,
    stride_lb,
    stride_lh,
    stride_ob,
    stride_oh,
    H: tl.constexpr,
    MAX_SPLITS: tl.constexpr,
    DV: tl.constexpr,
    BLOCK_HS: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    PDL: tl.constexpr,
):
    """_decode_stage2 for BLOCK_HS heads of one request per program, for large batches: one program
    per (request, head) was 2,048 programs at batch 64 that, with one split, only wait and exit."""
    b = tl.program_id(0)
    hb = tl.program_id(1)
    seq_len, n_splits, n_written = _stage2_counts(SeqLens, NumSplits, b, MAX_SPLITS)
    pdl_wait(PDL)  # in every program: see _decode_stage2
    if (n_splits > 1) | (seq_len == 0):
        heads = hb * BLOCK_HS + tl.arange(0, BLOCK_HS)
        mask_h = heads < H
        offs_dv = tl.arange(0, BLOCK_DV)
        mask = mask_h[:, None] & (offs_dv < DV)[None, :]
        e_max = tl.full([BLOCK_HS, 1], -1e30, tl.float32)
        e_sum = tl.zeros([BLOCK_HS, 1], tl.float32)
        acc = tl.zeros([BLOCK_HS, BLOCK_DV], tl.float32)
        for s in range(0, n_written):
            lse = tl.load(
                MidLse + b * stride_lb + heads[:, None] * stride_lh + s,
                mask=mask_h[:, None],
                other=-1e30,
            )
            o_s = tl.load(
                Mid + b * stride_mb + heads[:, None] * stride_mh + s * stride_ms + offs_dv[None, :],
                mask=mask,
                other=0.0,
            )
            acc, e_sum, e_max = _merge_split(acc, e_sum, e_max, lse, o_s)
        tl.store(
            O + b * stride_ob + heads[:, None] * stride_oh + offs_dv[None, :],
            _merged_out(acc, e_sum, v_scale).to(O.dtype.element_ty),
            mask=mask,
        )


# Stage 2 takes blocks of 8 heads from this batch size on (H200 runs 8 -> 10: 41.5 vs 43.6 us per
# layer at batch 64, ctx 528, one split), one head per program below it (blocks of 8 made batch 1
# slower: 7.2 vs 5.5 us at ctx 512, 16.2 vs 13.1 at ctx 4096, where each head merges 8-16 splits).
_STAGE2_BLOCK_HS = 8
_STAGE2_BLOCKED_MIN_BS = 32


def _stage1_config(block_d: int, grouped: bool, on_cuda: bool) -> dict:
    """Tile size / warps / pipeline depth for stage 1. Decode is bandwidth-bound: what matters is
    bytes in flight per SM (resident programs x BLOCK_N x head_dim x pipelined stages)."""
    if not on_cuda:
        # Triton interpreter: small tiles so multi-tile loops get exercised at test shapes.
        return dict(BLOCK_N=16, num_warps=1, num_stages=1)
    # From offline sm_90 compiles (triton 3.9, ptxas -v), untimed: grouped D128 BLOCK_N 64 / 4 warps /
    # 2 stages = 72 regs, 38 KB smem (K/V gathers become cp.async one tile ahead); per-head D128
    # BLOCK_N 64 / 4 warps = 88 regs (not pipelined: its loads do not feed a tl.dot).
    if grouped:
        return dict(BLOCK_N=64 if block_d <= 128 else 32, num_warps=4, num_stages=2)
    return dict(BLOCK_N=64 if block_d <= 128 else 32, num_warps=4, num_stages=1)


# Stage-1 programs wanted per SM before kv heads are packed into one program (KV_PACK); 0 turns
# packing off. Two heads per program at most, each keeping its tokens per tile: wider packs with the
# same tile give each head fewer tokens per step, and lose on ragged batches where the longest
# requests set the pace.
_PACK_PROGRAMS_PER_SM = int(os.environ.get("SGLANG_DECODE_KV_PACK_PROGRAMS", "4"))
_MAX_KV_PACK = 2


def kv_heads_per_program(bs: int, group: int, num_kv_heads: int, q: torch.Tensor) -> int:
    """KV heads one grouped stage-1 program takes on q's device (one on the CPU)."""
    if not q.is_cuda or _PACK_PROGRAMS_PER_SM <= 0:
        return 1
    sms = torch.cuda.get_device_properties(q.device).multi_processor_count
    return kv_pack_for(bs, group, num_kv_heads, sms, _PACK_PROGRAMS_PER_SM)


def kv_pack_for(bs: int, group: int, num_kv_heads: int, sms: int, programs_per_sm: int) -> int:
    """The largest power of two up to `_MAX_KV_PACK` whose query rows fit one head block and that
    still leaves `programs_per_sm` programs per SM at one split (large batches at short contexts,
    where a program's fixed cost is a large share of its bytes). A function of the batch size
    alone, so a captured graph keeps its grid."""
    pack = 1
    while (
        pack * 2 <= _MAX_KV_PACK
        and group * pack * 2 <= _GROUP_BLOCK_H
        and num_kv_heads % (pack * 2) == 0
        and bs * num_kv_heads // (pack * 2) >= programs_per_sm * sms
    ):
        pack *= 2
    return pack


def _dot_precision(dtype: torch.dtype) -> str:
    """fp32 models get IEEE fp32 dots (Triton's default for fp32 is tf32, ~1e-3 relative error,
    which would flip greedy near-ties against the CPU path); half types ignore it."""
    return "ieee" if dtype == torch.float32 else "tf32"


def decode_head_programs(num_heads: int, num_kv_heads: int, grouped: Optional[bool] = None) -> int:
    """Stage-1 programs per (request, split): kv heads x head blocks (grouped) or query heads."""
    group = num_heads // num_kv_heads
    if grouped is None:
        grouped = group > 1
    return num_kv_heads * triton.cdiv(group, _GROUP_BLOCK_H) if grouped else num_heads


def compute_num_kv_splits(
    seq_lens: torch.Tensor,
    num_heads: int,
    num_kv_heads: int,
    max_kv_splits: int,
    out: Optional[torch.Tensor] = None,
    num_sms: Optional[int] = None,
    waves: int = 3,
    min_split_len: int = 64,
) -> torch.Tensor:
    """Per-request split counts [bs] int32, computed on the device (no host sync, graph-capturable).

    The work of the whole batch (sum of seq_lens x stage-1 head programs) is spread over about
    `waves` x num_sms programs: the target split length is total_work / target_programs, never
    below `min_split_len` (a split also pays for a stage-2 read and a partial write). Long requests
    therefore get more splits than short ones, and large batches get 1 split each.
    waves = 3: enough programs to fill the device when a batch is small, few enough that a large
    batch (64 and up at typical contexts) keeps one split per request, where extra splits only add
    stage-2 work (benchmark/RESULTS.md has the forced-split tables).
    Pass `out` (a persistent int32 tensor) when capturing a CUDA graph. The Triton backend runs the
    same rule as one kernel (decode_prologue.py); this torch version is its reference and the benches'.
    """
    if num_sms is None:
        if seq_lens.is_cuda:
            num_sms = torch.cuda.get_device_properties(seq_lens.device).multi_processor_count
        else:
            num_sms = 132  # no device to ask (CPU references): an H100 / H200's count
    target_programs = max(1, num_sms * waves)
    head_programs = decode_head_programs(num_heads, num_kv_heads)
    lens = seq_lens.to(torch.int64)
    total_work = lens.sum() * head_programs
    split_len = torch.clamp(
        (total_work + target_programs - 1) // target_programs, min=min_split_len
    )
    n = torch.clamp((lens + split_len - 1) // split_len, min=1, max=max_kv_splits).to(torch.int32)
    if out is None:
        return n
    out.copy_(n)
    return out


def decode_attention_fwd(
    q: torch.Tensor,
    k_buffer: torch.Tensor,
    v_buffer: torch.Tensor,
    o: torch.Tensor,
    req_to_token: torch.Tensor,
    req_pool_indices: torch.Tensor,
    seq_lens: torch.Tensor,
    attn_logits: torch.Tensor,
    attn_lse: torch.Tensor,
    num_kv_splits: torch.Tensor,
    max_kv_splits: int,
    sm_scale: float,
    logit_cap: float = 0.0,
    grouped: Optional[bool] = None,
    config: Optional[dict] = None,
    k_scale: float = 1.0,
    v_scale: float = 1.0,
    deterministic: bool = False,
) -> None:
    """Decode attention; writes o [bs, H, Dv] in place.

    q [bs, H, D]; k_buffer [slots, H_kv, D]; v_buffer [slots, H_kv, Dv]; req_to_token [rows, ctx]
    int32; req_pool_indices [bs]; seq_lens [bs] (includes the new token, whose K/V must already be
    stored); attn_logits [bs, H, >=max_kv_splits, Dv] fp32 and attn_lse [bs, H, >=max_kv_splits]
    fp32 workspaces; num_kv_splits [bs] int32 (see compute_num_kv_splits). `grouped` forces or
    forbids the GQA head-block kernel (default: grouped when H > H_kv); `config` overrides the
    stage-1 launch config (BLOCK_N, num_warps, num_stages) for tuning sweeps.
    k_buffer / v_buffer may be float8_e4m3fn holding K / k_scale and V / v_scale: tiles are widened
    to q's dtype in registers, k_scale is folded into the logit scale and v_scale into the merge, so
    no dequantised copy of the pool is ever made.
    deterministic: one stage-2 kernel at every batch size (the blocked one for large batches is
    another compilation of the merge, whose float ops need not round alike) and one kv head per
    stage-1 program.
    """
    bs, num_heads, head_dim = q.shape
    num_kv_heads = k_buffer.shape[1]
    v_dim = v_buffer.shape[2]
    assert num_heads % num_kv_heads == 0, "query heads must be a multiple of kv heads"
    assert k_buffer.shape[2] == head_dim and o.shape == (bs, num_heads, v_dim)
    for t in (q, k_buffer, v_buffer, o, attn_logits, req_to_token):
        assert t.stride(-1) == 1, "last dimension must be contiguous"
    assert attn_lse.stride(-1) == 1
    assert attn_logits.shape[2] >= max_kv_splits and attn_lse.shape[2] >= max_kv_splits
    if bs == 0:
        return
    group = num_heads // num_kv_heads
    if grouped is None:
        grouped = group > 1
    block_d = triton.next_power_of_2(head_dim)
    block_dv = triton.next_power_of_2(v_dim)
    cfg = dict(_stage1_config(block_d, grouped, q.is_cuda), **(config or {}))
    # 32-bit slot offsets unless a buffer is too large for them (decided from shapes: no sync).
    slot_int64 = (
        max(k_buffer.shape[0] * k_buffer.stride(0), v_buffer.shape[0] * v_buffer.stride(0)) >= 2**31
    )
    common = (
        q,
        k_buffer,
        v_buffer,
        req_to_token,
        req_pool_indices,
        seq_lens,
        num_kv_splits,
        attn_logits,
        attn_lse,
        o,
        sm_scale * k_scale,
        logit_cap,
        v_scale,
        q.stride(0),
        q.stride(1),
        k_buffer.stride(0),
        k_buffer.stride(1),
        v_buffer.stride(0),
        v_buffer.stride(1),
        req_to_token.stride(0),
        attn_logits.stride(0),
        attn_logits.stride(1),
        attn_logits.stride(2),
        attn_lse.stride(0),
        attn_lse.stride(1),
        o.stride(0),
        o.stride(1),
    )
    if grouped:
        blocks_per_kv = triton.cdiv(group, _GROUP_BLOCK_H)
        # Deterministic runs keep one kv head per program: the pack follows the batch size and
        # sets how many positions each online-softmax step sums.
        kv_pack = cfg.get("KV_PACK") or (
            1 if deterministic else kv_heads_per_program(bs, group, num_kv_heads, q)
        )
        assert kv_pack == 1 or (blocks_per_kv == 1 and num_kv_heads % kv_pack == 0)
        # A packed tile holds kv_pack heads' tokens: widen the default so each head's step stays
        # as long as unpacked (a BLOCK_N passed in is taken as given).
        block_n = cfg["BLOCK_N"] * (kv_pack if "BLOCK_N" not in (config or {}) else 1)
        grid = (bs, num_kv_heads // kv_pack * blocks_per_kv, max_kv_splits)
        _decode_stage1_grouped[grid](
            *common,
            GROUP=group,
            BLOCKS_PER_KV=blocks_per_kv,
            KV_PACK=kv_pack,
            MAX_SPLITS=max_kv_splits,
            D=head_dim,
            DV=v_dim,
            BLOCK_H=_GROUP_BLOCK_H,
            BLOCK_N=block_n,
            BLOCK_D=block_d,
            BLOCK_DV=block_dv,
            HAS_CAP=logit_cap > 0,
            SLOT_INT64=slot_int64,
            DOT_PREC=_dot_precision(q.dtype),
            num_warps=cfg["num_warps"],
            num_stages=cfg["num_stages"],
            **pdl_args(q),
        )
    else:
        grid = (bs, num_heads, max_kv_splits)
        _decode_stage1_per_head[grid](
            *common,
            GROUP=group,
            MAX_SPLITS=max_kv_splits,
            D=head_dim,
            DV=v_dim,
            BLOCK_N=cfg["BLOCK_N"],
            BLOCK_D=block_d,
            BLOCK_DV=block_dv,
            HAS_CAP=logit_cap > 0,
            SLOT_INT64=slot_int64,
            num_warps=cfg["num_warps"],
            num_stages=cfg["num_stages"],
            **pdl_args(q),
        )
    stage2 = (
        attn_logits,
        attn_lse,
        o,
        seq_lens,
        num_kv_splits,
        v_scale,
        attn_logits.stride(0),
        attn_logits.stride(1),
        attn_logits.stride(2),
        attn_lse.stride(0),
        attn_lse.stride(1),
        o.stride(0),
        o.stride(1),
    )
    warps = 4 if q.is_cuda else 1
    if bs >= _STAGE2_BLOCKED_MIN_BS and not deterministic:
        block_hs = min(_STAGE2_BLOCK_HS, triton.next_power_of_2(num_heads))
        _decode_stage2_blocked[(bs, triton.cdiv(num_heads, block_hs))](
            *stage2,
            H=num_heads,
            MAX_SPLITS=max_kv_splits,
            DV=v_dim,
            BLOCK_HS=block_hs,
            BLOCK_DV=block_dv,
            num_warps=warps,
            **pdl_args(q),
        )
    else:
        _decode_stage2[(bs, num_heads)](
            *stage2,
            MAX_SPLITS=max_kv_splits,
            DV=v_dim,
            BLOCK_DV=block_dv,
            num_warps=warps,
            **pdl_args(q),
        )


def decode_attention_ref(
    q: torch.Tensor,
    k_buffer: torch.Tensor,
    v_buffer: torch.Tensor,
    req_to_token: torch.Tensor,
    req_pool_indices: torch.Tensor,
    seq_lens: torch.Tensor,
    sm_scale: float,
    logit_cap: float = 0.0,
    k_scale: float = 1.0,
    v_scale: float = 1.0,
) -> torch.Tensor:
    """Torch twin of decode_attention_fwd, computed in fp32; returns [bs, H, Dv] float32.

    A per-request loop (host reads of seq_lens): for tests and correctness checks only.
    """
    bs, num_heads, _ = q.shape
    group = num_heads // k_buffer.shape[1]
    out = torch.zeros((bs, num_heads, v_buffer.shape[2]), dtype=torch.float32, device=q.device)
    lens = seq_lens.tolist()
    rows = req_pool_indices.tolist()
    for i in range(bs):
        n = int(lens[i])
        if n == 0:
            continue
        slots = req_to_token[rows[i], :n].long()
        k = k_buffer[slots].float().repeat_interleave(group, dim=1) * k_scale  # [n, H, D]
        v = v_buffer[slots].float().repeat_interleave(group, dim=1) * v_scale
        s = torch.einsum("hd,nhd->hn", q[i].float(), k) * sm_scale
        if logit_cap > 0:
            s = logit_cap * torch.tanh(s / logit_cap)
        out[i] = torch.einsum("hn,nhd->hd", torch.softmax(s, dim=-1), v)
    return out
