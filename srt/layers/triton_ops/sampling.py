"""The sampler's exponential race in one pass: seeded noise, p / E and the argmax, fused; and the
greedy pick (argmax with the sampler's NaN / inf rules) in two small kernels.

The torch path materialises the [bs, vocab] counter hash in int64 (~10 elementwise passes) before
the division and the argmax: ~0.6 ms at batch 1 and ~2.9 ms at batch 256 for a 128k vocabulary on
an H200. Here each program hashes its slice of the vocabulary in registers (uint32 arithmetic wraps
exactly like the int64-and-mask reference) and keeps a per-lane running best; a split of the vocabulary
across programs keeps small batches from running on a handful of SMs.
"""

from __future__ import annotations

from typing import Tuple

import torch
import triton
import triton.language as tl

from sglang.srt.layers.triton_ops.pdl import pdl_args, pdl_wait


@triton.jit
def _fmix32(h):
    h ^= h >> 16
    h *= 0x85EBCA6B
    h ^= h >> 13
    h *= 0xC2B2AE35
    h ^= h >> 16
    return h


@triton.jit
def _first_max(vals, idxs, none_idx):
    """(max of vals, the smallest idx among the maxima); none_idx must exceed every real index."""
    top = tl.max(vals, 0)
    return top, tl.min(tl.where(vals == top, idxs, none_idx), 0)


@triton.jit
def _store_split_best(BestVal, BestIdx, r, s, lane_best, lane_idx, none_idx, num_splits):
    top, first = _first_max(lane_best, lane_idx, none_idx)
    tl.store(BestVal + r * num_splits + s, top)
    tl.store(BestIdx + r * num_splits + s, first)


# The split count is a runtime argument, not a constexpr: it follows the batch size, and each new
# value would compile a variant (a stall of ~0.2 s for the first prefill batch of an unseen size).
@triton.jit(do_not_specialize=["vocab", "span", "num_splits"])
def _race_kernel(
    Probs,
    RowHash,
    BestVal,
    BestIdx,
    stride_p,
    vocab,
    span,
    num_splits,
    BLOCK: tl.constexpr,
):
    r = tl.program_id(0)
    s = tl.program_id(1)
    row_h = tl.load(RowHash + r).to(tl.uint32)
    start = s * span
    end = tl.minimum(start + span, vocab)
    lane_best = tl.full([BLOCK], -1.0, tl.float32)
    lane_idx = tl.zeros([BLOCK], tl.int32)
    p_row = Probs + r.to(tl.int64) * stride_p
    for v0 in range(start, end, BLOCK):
        cols = v0 + tl.arange(0, BLOCK)
        mask = cols < end
        p = tl.load(p_row + cols, mask=mask, other=0.0).to(tl.float32)
        h = _fmix32((row_h ^ (cols.to(tl.uint32) * 0x27D4EB2F)) + 0x165667B1)
        # 23 bits: u stays strictly inside (0, 1) in float32 (see sampler.bits_to_uniform).
        u = ((h >> 9).to(tl.float32) + 0.5) * (1.0 / 8388608.0)
        score = tl.where(mask, p / (-tl.log(u)), -1.0)
        better = score > lane_best  # strict: each lane keeps its first maximum
        lane_best = tl.where(better, score, lane_best)
        lane_idx = tl.where(better, cols, lane_idx)
    _store_split_best(BestVal, BestIdx, r, s, lane_best, lane_idx, vocab, num_splits)


# Most vocabulary blocks one program walks. Each block is a dependent load: a program with many of
# them is latency-bound (at batch 64 with ~2 programs per SM the greedy pick took 36 us on an H200,
# for 16 MB of bf16 logits that take ~4 us to read).
MAX_BLOCKS_PER_SPLIT = 4


def race_num_splits(bs: int, vocab: int, block: int, num_sms: int = 132) -> int:
    """Vocabulary splits per row: at least two programs per SM in all and at most
    MAX_BLOCKS_PER_SPLIT blocks per program, but at least one block per split."""
    want = max(
        triton.cdiv(2 * num_sms, max(bs, 1)), triton.cdiv(vocab, MAX_BLOCKS_PER_SPLIT * block)
    )
    return max(1, min(want, triton.cdiv(vocab, block)))


def _split_workspace(x: torch.Tensor, block: int):
    """Vocabulary splits of x [bs, vocab] and the per-(row, split) best value / index buffers:
    (block, splits, span, best_val, best_idx). Splits hold increasing ids, span a multiple of block."""
    bs, vocab = x.shape
    if not x.is_cuda:
        block = min(
            block, 128
        )  # interpreter: keep the multi-block and multi-split paths at test sizes
    num_sms = torch.cuda.get_device_properties(x.device).multi_processor_count if x.is_cuda else 4
    splits = race_num_splits(bs, vocab, block, num_sms)
    span = triton.cdiv(triton.cdiv(vocab, splits), block) * block
    splits = triton.cdiv(vocab, span)
    best_val = torch.empty((bs, splits), dtype=torch.float32, device=x.device)
    best_idx = torch.empty((bs, splits), dtype=torch.int32, device=x.device)
    return block, splits, span, best_val, best_idx


def race_argmax(probs: torch.Tensor, row_hash: torch.Tensor, block: int = 1024) -> torch.Tensor:
    """argmax_v probs[r, v] / -log(u(row_hash[r], v)) per row r, first index on ties; [bs] int64.

    probs [bs, vocab] (float, rows may be strided, last dim contiguous); row_hash [bs] int64 holding
    the 32-bit per-row hash of sampler.row_hash. Rows without a positive probability return the
    smallest id (the caller overrides dead rows)."""
    bs, vocab = probs.shape
    assert probs.stride(-1) == 1 and row_hash.shape == (bs,)
    if bs == 0:
        return torch.zeros(0, dtype=torch.int64, device=probs.device)
    block, splits, span, best_val, best_idx = _split_workspace(probs, block)
    _race_kernel[(bs, splits)](
        probs,
        row_hash,
        best_val,
        best_idx,
        probs.stride(0),
        vocab,
        span,
        splits,
        BLOCK=block,
        num_warps=4 if probs.is_cuda else 1,
    )
    # Splits hold increasing ids, and argmax returns the first maximum: ties still go to the smallest id.
    pick = best_val.argmax(dim=1, keepdim=True)
    return best_idx.gather(1, pick).squeeze(1).to(torch.int64)


# ------------------------------------------------------------------------------------------ greedy
@triton.jit(do_not_specialize=["vocab", "span", "num_splits"])
def _greedy_partial_kernel(
    Logits,
    BestVal,
    BestIdx,
    stride_l,
    vocab,
    span,
    num_splits,
    BLOCK: tl.constexpr,
    PDL: tl.constexpr,
):
    """Per (row, vocabulary split): the max logit (NaN -> -inf, +inf -> FLT_MAX, as the torch path's
    nan_to_num) and its first index."""
    r = tl.program_id(0)
    s = tl.program_id(1)
    pdl_wait(PDL)
    start = s * span
    end = tl.minimum(start + span, vocab)
    lane_best = tl.full([BLOCK], float("-inf"), tl.float32)
    lane_idx = tl.full([BLOCK], 2147483647, tl.int32)
    row = Logits + r.to(tl.int64) * stride_l
    for v0 in range(start, end, BLOCK):
        cols = v0 + tl.arange(0, BLOCK)
        x = tl.load(row + cols, mask=cols < end, other=float("-inf")).to(tl.float32)
        x = tl.where(x != x, float("-inf"), tl.minimum(x, 3.4028234663852886e38))
        better = (x > lane_best) | ((x == lane_best) & (cols < lane_idx) & (cols < end))
        lane_best = tl.where(better, x, lane_best)
        lane_idx = tl.where(better, cols, lane_idx)
    _store_split_best(BestVal, BestIdx, r, s, lane_best, lane_idx, 2147483647, num_splits)


@triton.jit(do_not_specialize=["num_splits"])
def _greedy_final_kernel(
    BestVal, BestIdx, Ids, Dead, num_splits, BLOCK_S: tl.constexpr, PDL: tl.constexpr
):
    """Merge the splits of one row: first index among the maxima; a row whose max is -inf is dead (id 0)."""
    r = tl.program_id(0)
    pdl_wait(PDL)
    offs = tl.arange(0, BLOCK_S)
    m = offs < num_splits
    val = tl.load(BestVal + r * num_splits + offs, mask=m, other=float("-inf"))
    idx = tl.load(BestIdx + r * num_splits + offs, mask=m, other=2147483647)
    top, first = _first_max(val, idx, 2147483647)
    dead = top == float("-inf")
    tl.store(Ids + r, tl.where(dead, 0, first).to(tl.int64))
    tl.store(Dead + r, dead)


def greedy_argmax(logits: torch.Tensor, block: int = 1024) -> Tuple[torch.Tensor, torch.Tensor]:
    """(ids [bs] int64, dead [bs] bool) = the sampler's greedy rule on raw logits [bs, vocab]:
    NaN never wins, +inf counts as the largest float, the first maximum wins, and a row with no
    finite-or-+inf logit is dead with id 0. Equal to sampler.greedy_torch."""
    bs, vocab = logits.shape
    assert logits.stride(-1) == 1
    ids = torch.empty(bs, dtype=torch.int64, device=logits.device)
    dead = torch.empty(bs, dtype=torch.bool, device=logits.device)
    if bs == 0:
        return ids, dead
    block, splits, span, best_val, best_idx = _split_workspace(logits, block)
    warps = 4 if logits.is_cuda else 1
    _greedy_partial_kernel[(bs, splits)](
        logits,
        best_val,
        best_idx,
        logits.stride(0),
        vocab,
        span,
        splits,
        BLOCK=block,
        num_warps=warps,
        **pdl_args(logits),
    )
    _greedy_final_kernel[(bs,)](
        best_val,
        best_idx,
        ids,
        dead,
        splits,
        # Sized by the vocabulary alone (the most splits it can have): one variant per model.
        BLOCK_S=triton.next_power_of_2(triton.cdiv(vocab, block)),
        num_warps=1,
        **pdl_args(logits),
    )
    return ids, dead
