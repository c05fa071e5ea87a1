"""Batch-invariance checks of the deterministic-inference kernels (kernel_checks.py's "invariant"
group on the CPU interpreter; the GPU tests call the same functions on CUDA).

Each returns the kernel's relative error against its torch reference, or inf when a row computed
in one batch is not bit-identical to the same row computed in another: a request alone and
batched, a query after a different cached prefix, a decode row beside other requests.
"""

from __future__ import annotations

import math

import torch
from kernel_checks import make_paged_batch, rel_err

from sglang.srt.layers.attention.triton_ops.decode_attention import (
    decode_attention_fwd,
    decode_attention_ref,
)
from sglang.srt.layers.attention.triton_ops.decode_prologue import decode_prologue
from sglang.srt.layers.attention.triton_ops.extend_attention import (
    extend_attention_fwd,
    extend_attention_ref,
)
from sglang.srt.layers.triton_ops.invariant_matmul import invariant_matmul


def check_invariant_matmul(
    m: int,
    n: int,
    k: int,
    *,
    bias: bool = False,
    dtype: torch.dtype = torch.float32,
    device: str = "cpu",
    seed: int = 0,
) -> float:
    """Row i of x @ w^T equals row i computed alone and inside a larger, reordered batch."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn((m, k), generator=gen).to(dtype).to(device)
    w = torch.randn((n, k), generator=gen).to(dtype).to(device)
    b = torch.randn((n,), generator=gen).to(dtype).to(device) if bias else None
    y = invariant_matmul(x, w, b)
    i = seed % m
    alone = invariant_matmul(x[i : i + 1], w, b)
    extra = torch.randn((m + 37, k), generator=gen).to(dtype).to(device)
    bigger = invariant_matmul(torch.cat([extra, x.flip(0)]), w, b)
    if not (torch.equal(y[i], alone[0]) and torch.equal(y[i], bigger[m + 37 + (m - 1 - i)])):
        return math.inf
    ref = x.float() @ w.float().T + (b.float() if b is not None else 0.0)
    return rel_err(y, ref)


def _extend(q, pb, rows, ext_lens, prefix_lens, k_buf, v_buf, sm_scale):
    """extend_attention_fwd with keys from the pool for requests `rows` of pb; q holds each
    request's new queries back to back. Returns o and the K/V rows it would be given."""
    dev = q.device
    ext = torch.tensor(ext_lens, dtype=torch.int64)
    start = (torch.cumsum(ext, 0) - ext).to(dev)
    slots = torch.cat([pb.slots[r][p : p + e] for r, p, e in zip(rows, prefix_lens, ext_lens)])
    k, v = k_buf[slots], v_buf[slots]
    o = torch.full((q.shape[0], q.shape[1], v.shape[2]), float("nan"), dtype=q.dtype, device=dev)
    idx = torch.tensor(rows, device=dev)
    extend_attention_fwd(
        q,
        k,
        v,
        o,
        k_buf,
        v_buf,
        pb.req_to_token,
        pb.req_pool_indices[idx],
        pb.seq_lens[idx],
        ext.to(dev),
        start,
        max(ext_lens),
        sm_scale,
        keys_from_pool=True,
    )
    return o, k, v, ext.to(dev), start


def check_extend_from_pool(
    seq_len: int,
    prefix: int,
    other_len: int,
    num_heads: int,
    num_kv_heads: int,
    head_dim: int,
    *,
    dtype: torch.dtype = torch.float32,
    device: str = "cpu",
    seed: int = 0,
) -> float:
    """A request's queries after a cached prefix of `prefix` tokens, batched with another request,
    equal the same queries of one prefill of the whole request (keys_from_pool)."""
    gen = torch.Generator().manual_seed(seed)
    pb = make_paged_batch(
        [seq_len, other_len], num_kv_heads, head_dim, head_dim, dtype, device, gen
    )
    q_all = torch.randn((seq_len, num_heads, head_dim), generator=gen).to(dtype).to(device)
    q_other = torch.randn((other_len, num_heads, head_dim), generator=gen).to(dtype).to(device)
    sm = 1.0 / math.sqrt(head_dim)
    kb, vb = pb.k_buffer, pb.v_buffer
    full, k, v, ext, start = _extend(q_all, pb, [0], [seq_len], [0], kb, vb, sm)
    q_split = torch.cat([q_other, q_all[prefix:]])
    split, *_ = _extend(q_split, pb, [1, 0], [other_len, seq_len - prefix], [0, prefix], kb, vb, sm)
    if not torch.equal(split[other_len:], full[prefix:]):
        return math.inf
    idx = torch.tensor([0], device=q_all.device)
    ref = extend_attention_ref(
        q_all,
        k,
        v,
        kb,
        vb,
        pb.req_to_token,
        pb.req_pool_indices[idx],
        pb.seq_lens[idx],
        ext,
        start,
        sm,
    )
    return rel_err(full, ref)


def check_decode_fixed_splits(
    seq_lens: list,
    num_heads: int,
    num_kv_heads: int,
    head_dim: int,
    *,
    split_len: int = 16,
    max_splits: int = 4,
    dtype: torch.dtype = torch.float32,
    device: str = "cpu",
    seed: int = 0,
) -> float:
    """Fixed-length decode splits (the prologue's fixed_split_len): request 0's output alone equals
    its output among the others, whose lengths would move the batch rule's split points."""
    gen = torch.Generator().manual_seed(seed)
    pb = make_paged_batch(seq_lens, num_kv_heads, head_dim, head_dim, dtype, device, gen)
    bs = len(seq_lens)
    q = torch.randn((bs, num_heads, head_dim), generator=gen).to(dtype).to(device)
    sm = 1.0 / math.sqrt(head_dim)

    def run(rows):
        idx = torch.tensor(rows, device=q.device)
        n = len(rows)
        splits = torch.empty(n, dtype=torch.int32, device=q.device)
        table = pb.req_to_token.clone()
        loc = table[pb.req_pool_indices[idx], pb.seq_lens[idx] - 1]
        decode_prologue(
            pb.seq_lens[idx],
            num_heads,
            num_kv_heads,
            max_splits,
            splits,
            132,
            table,
            pb.req_pool_indices[idx],
            loc,
            fixed_split_len=split_len,
        )
        want = torch.clamp((pb.seq_lens[idx] + split_len - 1) // split_len, 1, max_splits)
        if not torch.equal(splits.cpu().long(), want.cpu()):
            return None
        o = torch.full((n, num_heads, head_dim), float("nan"), dtype=dtype, device=q.device)
        logits = torch.empty((n, num_heads, max_splits, head_dim), device=q.device)
        lse = torch.empty((n, num_heads, max_splits), device=q.device)
        decode_attention_fwd(
            q[idx],
            pb.k_buffer,
            pb.v_buffer,
            o,
            pb.req_to_token,
            pb.req_pool_indices[idx],
            pb.seq_lens[idx],
            logits,
            lse,
            splits,
            max_splits,
            sm,
            deterministic=True,
        )
        return o

    alone, batched = run([0]), run(list(range(bs))[::-1])
    if alone is None or batched is None or not torch.equal(alone[0], batched[bs - 1]):
        return math.inf
    ref = decode_attention_ref(
        q, pb.k_buffer, pb.v_buffer, pb.req_to_token, pb.req_pool_indices, pb.seq_lens, sm
    )
    return rel_err(batched.flip(0), ref)


def invariant_cases(full: bool) -> list:
    cases = [
        ("invariant matmul M5 N70 K50", lambda s: check_invariant_matmul(5, 70, 50, seed=s)),
        (
            "invariant matmul M33 N40 K64 bias fp16",
            lambda s: check_invariant_matmul(33, 40, 64, bias=True, dtype=torch.float16, seed=s),
            2e-3,
        ),
        (
            "extend from pool, prefix 13 of 45 (H4/2 D16)",
            lambda s: check_extend_from_pool(45, 13, 20, 4, 2, 16, seed=s),
        ),
        (
            "extend from pool, prefix 44 of 45 (one query)",
            lambda s: check_extend_from_pool(45, 44, 7, 4, 4, 16, seed=s),
        ),
        (
            "decode fixed splits bs4 (H4/2 D16)",
            lambda s: check_decode_fixed_splits([50, 3, 90, 17], 4, 2, 16, seed=s),
        ),
    ]
    if full:
        cases.append(
            (
                "extend from pool, prefix 100 of 300 (H8/2 D32)",
                lambda s: check_extend_from_pool(300, 100, 50, 8, 2, 32, seed=s),
            )
        )
    return cases
