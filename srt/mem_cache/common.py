"""Allocation and release of a request's KV slots, shared by prefill, decode, retraction and abort.

Every slot a request owns is accounted in one of three ranges of its req_to_token row:
[0, cache_protected_len) belongs to the tree (locked), [protected, kv_committed_len) holds
computed KV the request owns, [committed, kv_allocated_len) is allocated ahead (overlap loop).
release_kv_cache returns all three to their owners.
"""

from __future__ import annotations

from typing import List

import torch

from sglang.srt.core.req import Req


class OutOfMemoryError(RuntimeError):
    pass


def alloc_token_slots(tree_cache, allocator, n: int) -> torch.Tensor:
    if n == 0:
        return torch.empty(0, dtype=torch.int64)
    if allocator.available_size() < n:
        tree_cache.evict(n - allocator.available_size())
    out = allocator.alloc(n)
    if out is None:
        raise OutOfMemoryError(
            f"Out of KV slots: need {n}, available {allocator.available_size()}, "
            f"evictable {tree_cache.evictable_size()}"
        )
    return out


def alloc_paged(
    tree_cache, allocator, prefix_lens: List[int], last_locs: List[int], extend_lens: List[int]
) -> torch.Tensor:
    """Paged allocation continuing each request's last page; evicts whole pages as needed."""
    ps = allocator.page_size
    worst = sum(extend_lens) + len(extend_lens) * ps
    if allocator.available_size() < worst:
        tree_cache.evict(worst - allocator.available_size())
    out = allocator.alloc_extend(prefix_lens, last_locs, extend_lens)
    if out is None:
        raise OutOfMemoryError(
            f"Out of KV pages: need about {worst} slots, available {allocator.available_size()}"
        )
    return out


def release_kv_cache(
    req: Req, tree_cache, req_to_token_pool, allocator, is_insert: bool = True
) -> None:
    """Give back everything the request holds: tree insert (or free), over-allocation, and its row."""
    if req.req_pool_idx is None:
        return
    committed, allocated = req.kv_committed_len, req.kv_allocated_len
    tree_cache.cache_finished_req(req, is_insert=is_insert)
    ps = getattr(allocator, "page_size", 1)
    start = (committed + ps - 1) // ps * ps if ps > 1 else committed
    if allocated > start:
        allocator.free(req_to_token_pool.read(req.req_pool_idx, start, allocated))
    req_to_token_pool.free(req.req_pool_idx)
    req.req_pool_idx = None
    req.kv_committed_len = 0
    req.kv_allocated_len = 0


def evict_for(tree_cache, allocator, need: int) -> bool:
    if allocator.available_size() < need:
        tree_cache.evict(need - allocator.available_size())
    return allocator.available_size() >= need


def last_loc_of(req_to_token_pool, row: int, length: int) -> int:
    return int(req_to_token_pool.req_to_token_cpu[row, length - 1]) if length > 0 else -1


def page_need(seq_lens: List[int], page_size: int) -> int:
    """Slots a decode step must find: a new page for every request whose last page is full."""
    if page_size == 1:
        return len(seq_lens)
    return sum(page_size for s in seq_lens if s % page_size == 0)
