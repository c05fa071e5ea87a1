"""The first kernel of a decode pass: split counts for decode attention and the new tokens' slots.

compute_num_kv_splits (torch) is about nine tiny kernels in every CUDA graph (a sum, divisions,
clamps, casts), and recording the new slots in req_to_token is two more (a cast and an index_put)
plus, when done by the scheduler, a pinned host copy per step. One single-program Triton kernel
does both: it sums seq_lens, derives each request's split count exactly as compute_num_kv_splits
does, and writes req_to_token[row, seq_len - 1] = slot.
"""

from __future__ import annotations

from typing import Optional

import torch
import triton
import triton.language as tl

from sglang.srt.layers.attention.triton_ops.decode_attention import decode_head_programs
from sglang.srt.layers.triton_ops.pdl import pdl_args, pdl_wait

# Requests per loop iteration of the single program (a 4,096-request batch takes four).
_MAX_BLOCK = 1024


@triton.jit
def _decode_prologue_kernel(
    SeqLens,
    Rows,
    Loc,
    ReqToToken,
    stride_rt,
    NumSplits,
    bs,
    head_programs,
    target_programs,
    min_split_len,
    max_splits,
    BLOCK: tl.constexpr,
    PDL: tl.constexpr,
):
    pdl_wait(PDL)
    acc = tl.zeros([BLOCK], dtype=tl.int64)
    for start in range(0, bs, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        acc += tl.load(SeqLens + offs, mask=offs < bs, other=0).to(tl.int64)
    work = tl.sum(acc, axis=0) * head_programs
    split_len = tl.maximum((work + target_programs - 1) // target_programs, min_split_len)
    for start in range(0, bs, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        m = offs < bs
        lens = tl.load(SeqLens + offs, mask=m, other=0).to(tl.int64)
        n = tl.minimum(tl.maximum((lens + split_len - 1) // split_len, 1), max_splits)
        tl.store(NumSplits + offs, n.to(tl.int32), mask=m)
        rows = tl.load(Rows + offs, mask=m, other=0).to(tl.int64)
        slot = tl.load(Loc + offs, mask=m, other=0)
        pos = tl.maximum(lens - 1, 0)
        tl.store(ReqToToken + rows * stride_rt + pos, slot.to(tl.int32), mask=m)


def decode_prologue(
    seq_lens: torch.Tensor,
    num_heads: int,
    num_kv_heads: int,
    max_kv_splits: int,
    num_kv_splits: torch.Tensor,
    num_sms: int,
    req_to_token: torch.Tensor,
    req_pool_indices: torch.Tensor,
    out_cache_loc: torch.Tensor,
    waves: int = 3,
    min_split_len: int = 64,
    fixed_split_len: Optional[int] = None,
) -> None:
    """num_kv_splits[:] = compute_num_kv_splits(seq_lens, ...) (same rule, same arguments) and
    req_to_token[req_pool_indices[i], seq_lens[i] - 1] = out_cache_loc[i] (a decode pass's seq_lens
    include its new token). Graph-capturable: no host sync. fixed_split_len: splits of that many
    tokens (up to max_kv_splits), from each request's own length alone, not the batch's work
    (deterministic inference: a request's split points must not depend on the other requests)."""
    head_programs = decode_head_programs(num_heads, num_kv_heads)
    if fixed_split_len is not None:
        head_programs, min_split_len = 0, fixed_split_len  # the batch's work counts as zero
    bs = seq_lens.shape[0]
    assert num_kv_splits.shape[0] >= bs and num_kv_splits.dtype == torch.int32
    assert req_to_token.stride(1) == 1 and req_to_token.dtype == torch.int32
    assert req_pool_indices.shape[0] == bs and out_cache_loc.shape[0] == bs
    if bs == 0:
        return
    _decode_prologue_kernel[(1,)](
        seq_lens,
        req_pool_indices,
        out_cache_loc,
        req_to_token,
        req_to_token.stride(0),
        num_kv_splits,
        bs,
        head_programs,
        max(1, num_sms * waves),
        min_split_len,
        max_kv_splits,
        BLOCK=min(triton.next_power_of_2(bs), _MAX_BLOCK),
        num_warps=4 if seq_lens.is_cuda else 1,
        **pdl_args(seq_lens),
    )
