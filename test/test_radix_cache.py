"""Tests for the prefix caches: RadixCache (tree ops, locks, eviction, req-level caching) and ChunkCache.

Besides unit tests, two hypothesis suites drive the caches against simple models:
- TreeMachine: random inserts / matches / locks / unlocks / evictions on a bare tree, checked against
  a dict {(extra_key, token prefix): slot}.
- test_request_lifecycles: random requests going through admission, chunked prefill, decode,
  finish and retraction with a real ReqToTokenPool and allocator; a fake KV store records which
  token prefix each slot was computed for, so a slot reused while still referenced is caught.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Set, Tuple

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from sglang.srt.core.req import Req
from sglang.srt.core.sampling_params import SamplingParams
from sglang.srt.mem_cache.allocator import PagedTokenToKVPoolAllocator, TokenToKVPoolAllocator
from sglang.srt.mem_cache.chunk_cache import ChunkCache
from sglang.srt.mem_cache.evict_policy import POLICIES, get_eviction_key
from sglang.srt.mem_cache.memory_pool import ReqToTokenPool
from sglang.srt.mem_cache.radix_cache import _CMP_BLOCK, RadixCache, TreeNode, common_prefix_len


# ---------------------------------------------------------------------------- helpers
def make_allocator(size: int, page_size: int):
    return (
        TokenToKVPoolAllocator(size)
        if page_size == 1
        else PagedTokenToKVPoolAllocator(size, page_size)
    )


def free_pages(alloc) -> List[int]:
    """Free units of the allocator (slots for page size 1, pages otherwise), duplicates kept."""
    if isinstance(alloc, TokenToKVPoolAllocator):
        parts = [alloc.free_slots] + alloc._release + alloc._group
    else:
        parts = [alloc.free_pages] + alloc._release + alloc._group
    return torch.cat(parts).tolist() if parts else []


def pages_of(slots: torch.Tensor, page_size: int) -> List[int]:
    return sorted(set((slots // page_size).tolist()))


def node_path(node: TreeNode) -> List[int]:
    parts = []
    while node.parent is not None:
        parts.append(node.key)
        node = node.parent
    return [t for part in reversed(parts) for t in part]


PageKey = Tuple[Optional[str], Tuple[int, ...]]


def tree_map(cache: RadixCache) -> Dict[PageKey, Tuple[int, ...]]:
    """{(extra_key, token prefix ending at a page end): that page's slots}, by walking the tree.

    Keyed per page, not per token: with pages, sibling nodes may share a partial first page.
    """
    ps = cache.page_size
    out = {}
    stack = [(c, ()) for c in cache.root.children.values()]
    while stack:
        node, prefix = stack.pop()
        values = node.value.tolist()
        for i in range(0, len(node.key), ps):
            prefix = prefix + tuple(node.key[i : i + ps])
            out[(node.extra_key, prefix)] = tuple(values[i : i + ps])
        stack.extend((c, prefix) for c in node.children.values())
    return out


def check_tree_structure(cache: RadixCache) -> None:
    ev, pr = cache._recompute_sizes()
    assert (ev, pr) == (cache.evictable_size(), cache.protected_size())
    leaves = set()
    for node, _ in cache._iter_nodes():
        assert len(node.key) == len(node.value) > 0
        assert len(node.key) % cache.page_size == 0
        for child in node.children.values():
            assert child.parent is node and child.extra_key == node.extra_key
            assert child.lock_ref <= node.lock_ref  # a lock on a child also holds its ancestors
        if node.lock_ref == 0 and not node.children:
            leaves.add(node)
    assert leaves == cache.evictable_leaves


def check_paged_values(cache: RadixCache) -> None:
    """With pages, each node's slots are whole pages laid out in order."""
    ps = cache.page_size
    for node, _ in cache._iter_nodes():
        v = node.value.view(-1, ps)
        assert torch.equal(v, v[:, :1] + torch.arange(ps)), node


def make_req(
    rid: str, ids: List[int], extra_key: Optional[str] = None, priority: Optional[int] = None
) -> Req:
    return Req(rid, ids, SamplingParams(), extra_key=extra_key, priority=priority)


# ---------------------------------------------------------------------------- tree unit tests
def test_insert_match_split():
    c = RadixCache(None, None)
    assert c.insert([1, 2, 3, 4, 5]) == 0
    r = c.match_prefix([1, 2, 3, 9])
    assert r.device_indices.tolist() == [1, 2, 3]
    assert r.last_node.key == [1, 2, 3] and r.last_node.parent is c.root
    (lower,) = r.last_node.children.values()
    assert lower.key == [4, 5] and lower.value.tolist() == [4, 5]
    assert c.match_prefix([1, 2, 3, 4, 5, 6]).device_indices.tolist() == [1, 2, 3, 4, 5]
    assert c.match_prefix([7]).device_indices.numel() == 0
    assert c.match_prefix([7]).last_node is c.root
    assert c.match_prefix([]).last_node is c.root
    assert c.evictable_size() == 5 and c.total_size() == 5
    check_tree_structure(c)


def test_insert_returns_already_present_length():
    c = RadixCache(None, None)
    assert c.insert([1, 2, 3], torch.tensor([10, 11, 12])) == 0
    assert c.insert([1, 2, 3], torch.tensor([20, 21, 22])) == 3
    assert c.insert([1, 2, 3, 4, 5], torch.tensor([30, 31, 32, 33, 34])) == 3
    assert c.insert([1, 2, 7], torch.tensor([40, 41, 42])) == 2
    assert c.insert([1], torch.tensor([50])) == 1
    # The tree keeps its first slots; the caller's duplicates were never adopted.
    assert c.match_prefix([1, 2, 3, 4, 5]).device_indices.tolist() == [10, 11, 12, 33, 34]
    assert c.match_prefix([1, 2, 7]).device_indices.tolist() == [10, 11, 42]
    assert c.evictable_size() == 6
    check_tree_structure(c)


def test_extra_key_isolation():
    c = RadixCache(None, None)
    c.insert([1, 2, 3], torch.tensor([1, 2, 3]))
    c.insert([1, 2, 3], torch.tensor([4, 5, 6]), extra_key="lora-a")
    assert c.insert([1, 2], torch.tensor([7, 8]), extra_key="lora-b") == 0
    assert c.match_prefix([1, 2, 3]).device_indices.tolist() == [1, 2, 3]
    assert c.match_prefix([1, 2, 3], extra_key="lora-a").device_indices.tolist() == [4, 5, 6]
    assert c.match_prefix([1, 2, 3], extra_key="lora-b").device_indices.tolist() == [7, 8]
    assert c.match_prefix([1, 2, 3], extra_key="other").device_indices.numel() == 0
    assert len(c.root.children) == 3
    check_tree_structure(c)


def test_cached_continuation_follows_the_most_recent_path():
    c = RadixCache(None, None)
    c.insert([1, 2, 3, 4, 5, 6])
    c.insert([1, 2, 7, 8])  # the newer branch at position 2
    m = c.match_prefix([1, 2, 9])
    assert len(m.device_indices) == 2
    assert c.cached_continuation(m.last_node, None, 8) == [7, 8]
    c.match_prefix([1, 2, 3, 4])  # touching the older branch makes it the recent one
    m = c.match_prefix([1, 2, 9])
    assert c.cached_continuation(m.last_node, None, 3) == [3, 4, 5]
    assert c.cached_continuation(m.last_node, "other-key", 3) == []
    assert c.cached_continuation(c.match_prefix([1, 2, 3, 4, 5, 6]).last_node, None, 3) == []
    assert ChunkCache(None, None).cached_continuation(c.root, None, 3) == []


@settings(max_examples=150, deadline=None)
@given(
    seqs=st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=8), min_size=1, max_size=6),
    query=st.lists(st.integers(0, 3), max_size=8),
    limit=st.integers(1, 6),
)
def test_cached_continuation_is_a_cached_path_that_leaves_the_query(seqs, query, limit):
    c = RadixCache(None, None)
    for s in seqs:
        c.insert(s)
    m = c.match_prefix(query)
    pos = len(m.device_indices)
    nxt = c.cached_continuation(m.last_node, None, limit)
    assert len(nxt) <= limit
    # What it reports was cached: the matched prefix plus it starts some inserted sequence.
    assert any(s[: pos + len(nxt)] == query[:pos] + nxt for s in seqs)
    longer = any(len(s) > pos and s[:pos] == query[:pos] for s in seqs)
    assert bool(nxt) == longer
    if nxt and pos < len(query):
        assert nxt[0] != query[pos]  # otherwise the match would have gone on


def test_lock_unlock_accounting():
    c = RadixCache(None, None)
    c.insert([1, 2, 3, 4])
    c.insert([1, 2, 5, 6, 7])
    node = c.match_prefix([1, 2, 5, 6, 7]).last_node
    assert c.inc_lock_ref(node) == -5
    assert (c.evictable_size(), c.protected_size()) == (2, 5)
    # A second lock through the shared part moves only the new node.
    other = c.match_prefix([1, 2, 3, 4]).last_node
    assert c.inc_lock_ref(other) == -2
    assert (c.evictable_size(), c.protected_size()) == (0, 7)
    # Splitting a locked node keeps the accounting exact.
    mid = c.match_prefix([1, 2, 5, 6]).last_node
    assert mid.lock_ref == 1 and mid.key == [5, 6]
    check_tree_structure(c)
    assert c.dec_lock_ref(node) == 3
    assert (c.evictable_size(), c.protected_size()) == (3, 4)
    assert c.dec_lock_ref(other) == 4
    assert (c.evictable_size(), c.protected_size()) == (7, 0)
    assert c.inc_lock_ref(c.root) == 0 and c.dec_lock_ref(c.root) == 0
    assert c.inc_lock_ref(None) == 0
    check_tree_structure(c)


def test_dec_lock_below_zero_asserts():
    c = RadixCache(None, None)
    c.insert([1, 2])
    with pytest.raises(AssertionError):
        c.dec_lock_ref(c.match_prefix([1, 2]).last_node)


def test_lru_order_and_lock_protection():
    alloc = TokenToKVPoolAllocator(32)
    c = RadixCache(None, alloc)
    a, b, d = (alloc.alloc(2) for _ in range(3))
    c.insert([1, 1], a)
    c.insert([2, 2], b)
    c.insert([3, 3], d)
    c.match_prefix([1, 1])  # touch A: B is now the least recently used
    assert c.evict(1) == 2
    assert c.match_prefix([2, 2]).device_indices.numel() == 0
    c.inc_lock_ref(c.match_prefix([3, 3]).last_node)
    assert c.evict(100) == 2  # only A is unlocked
    assert c.match_prefix([3, 3]).device_indices.tolist() == d.tolist()
    assert alloc.available_size() == 32 - 2
    assert c.evictable_size() == 0 and c.protected_size() == 2


def test_parents_evicted_after_children():
    alloc = TokenToKVPoolAllocator(32)
    c = RadixCache(None, alloc)
    c.insert([1, 2, 3], alloc.alloc(3))
    c.insert([1, 2, 3, 4, 5], torch.cat([c.match_prefix([1, 2, 3]).device_indices, alloc.alloc(2)]))
    c.insert([1, 2, 3, 6], torch.cat([c.match_prefix([1, 2, 3]).device_indices, alloc.alloc(1)]))
    # The parent is the most recently used node, but only leaves are candidates: [4, 5] goes first.
    c.match_prefix([1, 2, 3])
    assert c.evict(1) == 2
    assert c.match_prefix([1, 2, 3, 6]).device_indices.numel() == 4
    assert c.match_prefix([1, 2, 3]).device_indices.numel() == 3
    check_tree_structure(c)
    assert c.evict(100) == 4
    assert not c.root.children and c.total_size() == 0 and not c.evictable_leaves
    assert alloc.available_size() == 32


def test_evict_continues_into_parent_in_one_call():
    alloc = TokenToKVPoolAllocator(16)
    c = RadixCache(None, alloc)
    c.insert([1, 2, 3, 4], alloc.alloc(4))
    c.match_prefix([1, 2])  # split into [1,2] -> [3,4]
    assert c.evict(3) == 4
    assert c.total_size() == 0 and alloc.available_size() == 16


@pytest.mark.parametrize(
    "policy,victim",
    [
        ("lru", "a"),
        ("mru", "b"),
        ("fifo", "a"),
        ("filo", "b"),
        ("lfu", "b"),
        ("priority", "b"),
    ],
)
def test_policies(policy, victim):
    # A: created first, priority 5, reused twice. B: created second, priority 0, touched last.
    alloc = TokenToKVPoolAllocator(16)
    c = RadixCache(None, alloc, eviction_policy=policy)
    keys = {"a": [1, 1], "b": [2, 2]}
    c.insert(keys["a"], alloc.alloc(2), priority=5)
    c.insert(keys["b"], alloc.alloc(2), priority=0)
    for _ in range(2):
        dup = alloc.alloc(2)
        assert c.insert(keys["a"], dup, priority=5) == 2
        alloc.free(dup)
    c.match_prefix(keys["b"])
    assert c.evict(1) == 2
    gone = [name for name, k in keys.items() if c.match_prefix(k).device_indices.numel() == 0]
    assert gone == [victim]


def test_unknown_policy_rejected():
    with pytest.raises(ValueError):
        RadixCache(None, None, eviction_policy="random")
    assert set(POLICIES) == {"lru", "lfu", "fifo", "mru", "filo", "priority"}
    assert get_eviction_key("LRU") is POLICIES["lru"]


def test_page_size_4():
    alloc = PagedTokenToKVPoolAllocator(64, 4)
    c = RadixCache(None, alloc, page_size=4)
    slots = alloc.alloc(8)
    key = list(range(10))
    assert c.insert(key, slots) == 0  # truncated to 8 tokens
    assert c.total_size() == 8
    assert c.match_prefix(key).device_indices.tolist() == slots.tolist()
    # A mismatch inside the second page matches only the first page, and splits there.
    r = c.match_prefix([0, 1, 2, 3, 4, 99, 6, 7])
    assert r.device_indices.tolist() == slots[:4].tolist() and r.last_node.key == [0, 1, 2, 3]
    assert c.match_prefix([0, 1, 2]).device_indices.numel() == 0
    assert c.match_prefix([0, 1, 2, 99]).device_indices.numel() == 0
    # Children are keyed by whole first pages: [4..7] and [4,5,6,100] are siblings.
    more = alloc.alloc(4)
    assert c.insert([0, 1, 2, 3, 4, 5, 6, 100], torch.cat([slots[:4], more])) == 4
    assert len(r.last_node.children) == 2
    check_tree_structure(c)
    check_paged_values(c)
    assert c.evict(1) == 4
    assert alloc.available_size() + c.total_size() == 64


def test_disabled_tree():
    c = RadixCache(None, None, disable=True)
    assert c.insert([1, 2, 3]) == 0
    r = c.match_prefix([1, 2, 3])
    assert r.device_indices.numel() == 0 and r.last_node is c.root
    assert c.total_size() == 0 and c.evict(10) == 0


def test_reset_and_pretty_print():
    c = RadixCache(None, None)
    c.insert(list(range(20)), extra_key="x")
    c.insert([0, 1, 5], extra_key="x")
    text = c.pretty_print()
    assert "evictable=21" in text and "extra='x'" in text and "..." in text
    c.reset()
    assert c.total_size() == 0 and not c.root.children and not c.evictable_leaves


@pytest.mark.parametrize("page_size", [1, 4])
def test_common_prefix_len_matches_naive(page_size):
    def naive(a, b):
        n = 0
        while n < min(len(a), len(b)) and a[n] == b[n]:
            n += 1
        return n - n % page_size

    node_key = list(range(300))
    for miss in [0, 1, 3, 4, 5, 63, 64, 65, 127, 128, 200, 299]:
        for length in [miss + 1, 150, 300, 320]:
            key = [-9] * 7 + node_key[:length]
            if miss < len(key) - 7:
                key[7 + miss] = -1
            assert common_prefix_len(node_key, key, 7, page_size) == naive(node_key, key[7:]), (
                miss,
                length,
            )
    assert common_prefix_len(node_key, node_key[:10], 0, page_size) == 10 - 10 % page_size


class CountingKey(list):
    """A query key that counts how it is read: single-token reads vs block (slice) reads."""

    def __init__(self, *a):
        super().__init__(*a)
        self.token_reads = 0
        self.slice_reads = 0

    def __getitem__(self, i):
        if isinstance(i, slice):
            self.slice_reads += 1
        else:
            self.token_reads += 1
        return super().__getitem__(i)


def test_match_long_key_reads_blocks_not_tokens():
    """Matching compares runs a block at a time: work grows with blocks and nodes, not with tokens."""
    c = RadixCache(None, None)
    base = list(range(4096))
    c.insert(base)
    for cut in range(64, 4096, 64):  # 63 branch points: the path has 64 nodes
        c.insert(base[:cut] + [-1, -2])
    full = CountingKey(base)
    assert len(c.match_prefix(full).device_indices) == 4096
    assert (
        full.token_reads <= 64 and full.slice_reads <= 2 * 64
    )  # one child lookup, one compare per node
    miss_late = CountingKey(base[:4000] + [-5] * 96)
    assert len(c.match_prefix(miss_late).device_indices) == 4000
    assert miss_late.token_reads <= 64 + _CMP_BLOCK and miss_late.slice_reads <= 2 * 64 + 4
    # One long node with a mismatch near its end: a block scan, then at most one block of single tokens.
    c2 = RadixCache(None, None)
    c2.insert(base)
    key = CountingKey(base[:4090] + [-1])
    assert len(c2.match_prefix(key).device_indices) == 4090
    assert key.slice_reads <= 2 + 4096 // _CMP_BLOCK + 1
    assert key.token_reads <= 1 + _CMP_BLOCK


# ---------------------------------------------------------------------------- request simulation
class Sim:
    """A miniature scheduler: rows, slot allocation, chunked prefill, decode, finish, retraction.

    `content[slot]` records which (extra_key, token prefix) the slot's KV was computed for, so
    the checks can tell whether every slot the tree or a request points at holds the right KV.
    """

    def __init__(
        self,
        page_size: int = 1,
        size: int = 256,
        rows: int = 8,
        ctx: int = 96,
        chunk_cache: bool = False,
        policy: str = "lru",
    ):
        self.ps = page_size
        self.size = size
        self.alloc = make_allocator(size, page_size)
        self.pool = ReqToTokenPool(rows, ctx, "cpu")
        if chunk_cache:
            self.cache = ChunkCache(self.pool, self.alloc, page_size=page_size)
        else:
            self.cache = RadixCache(
                self.pool, self.alloc, page_size=page_size, eviction_policy=policy
            )
        self.active: List[Req] = []
        self.content: Dict[int, Tuple[Optional[str], Tuple[int, ...]]] = {}

    # -- scheduler steps
    def admit(self, req: Req) -> bool:
        rows = self.pool.alloc(1)
        if rows is None:
            return False
        ids = req.all_ids()
        m = self.cache.match_prefix(ids[: len(ids) - 1], extra_key=req.extra_key)
        self.cache.inc_lock_ref(m.last_node)
        req.req_pool_idx = rows[0]
        req.prefix_indices, req.last_node = m.device_indices, m.last_node
        req.cache_protected_len = len(m.device_indices)
        self.pool.write(req.req_pool_idx, 0, m.device_indices)
        req.kv_committed_len = req.kv_allocated_len = len(m.device_indices)
        req.fill_ids = ids[: req.kv_committed_len]
        self.active.append(req)
        return True

    def _alloc(self, req: Req, n: int) -> Optional[torch.Tensor]:
        start = req.kv_allocated_len
        if self.ps == 1:
            return self.alloc.alloc(n)
        last = int(self.pool.read(req.req_pool_idx, start - 1, start)[0]) if start else -1
        return self.alloc.alloc_extend([start], [last], [n])

    def extend_allocation(self, req: Req, n: int) -> bool:
        if n == 0:
            return True
        slots = self._alloc(req, n)
        if slots is None:
            self.cache.evict(n + self.ps)
            slots = self._alloc(req, n)
            if slots is None:
                return False
        self.pool.write(req.req_pool_idx, req.kv_allocated_len, slots)
        req.kv_allocated_len += n
        return True

    def compute(self, req: Req, end: int) -> bool:
        """Run the forward for positions [committed, end); False if slots ran out."""
        start = req.kv_committed_len
        if not self.extend_allocation(req, max(0, end - req.kv_allocated_len)):
            return False
        ids = req.all_ids()
        slots = self.pool.read(req.req_pool_idx, start, end).tolist()
        for pos, slot in zip(range(start, end), slots):
            self.content[slot] = (req.extra_key, tuple(ids[: pos + 1]))
        req.kv_committed_len = end
        return True

    def prefill_chunk(self, req: Req, n: int, next_token: int) -> bool:
        """Prefill up to n more prompt tokens; the last chunk samples a token."""
        total = len(req.all_ids())
        end = min(req.kv_committed_len + max(n, 1), total)
        if not self.compute(req, end):
            return False
        req.fill_ids = req.all_ids()[:end]
        if end < total:
            self.cache.cache_unfinished_req(req, chunked=True)
        else:
            req.output_ids.append(next_token)
            self.cache.cache_unfinished_req(req)
        return True

    def in_prefill(self, req: Req) -> bool:
        return req.kv_committed_len < len(req.all_ids()) - 1 or not req.output_ids

    def decode(self, req: Req, token: int) -> bool:
        if not self.compute(req, len(req.all_ids())):
            return False
        req.output_ids.append(token)
        return True

    def release(self, req: Req, is_insert: bool = True) -> None:
        """Finish (or retract) a request the way the scheduler does: cache, then free the rest."""
        self.cache.cache_finished_req(req, is_insert=is_insert)
        start = -(-req.kv_committed_len // self.ps) * self.ps
        if start < req.kv_allocated_len:
            self.alloc.free(self.pool.read(req.req_pool_idx, start, req.kv_allocated_len))
        self.pool.free(req.req_pool_idx)
        req.req_pool_idx = None
        req.kv_committed_len = req.kv_allocated_len = 0
        self.active.remove(req)

    # -- checks
    def check(self) -> None:
        ps, cache = self.ps, self.cache
        free = free_pages(self.alloc)
        assert len(free) == len(set(free)), "a slot was freed twice"
        owners: Dict[int, str] = {p: "free" for p in free}

        def claim(pages: List[int], who: str) -> None:
            for p in pages:
                assert p not in owners, f"page {p} owned by {owners[p]} and {who}"
                owners[p] = who

        tree_vals = (
            cache.all_values()
            if isinstance(cache, RadixCache)
            else torch.empty(0, dtype=torch.int64)
        )
        assert len(tree_vals) == len(set(tree_vals.tolist())), "a slot appears twice in the tree"
        claim(pages_of(tree_vals, ps), "tree")
        for req in self.active:
            row = self.pool.read(req.req_pool_idx, 0, req.kv_allocated_len)
            cpl = req.cache_protected_len
            assert set(row[:cpl].tolist()) <= set(tree_vals.tolist())
            claim(pages_of(row[cpl:], ps), req.rid)
            ids = req.all_ids()
            for pos, slot in enumerate(row[: req.kv_committed_len].tolist()):
                assert self.content.get(slot) == (req.extra_key, tuple(ids[: pos + 1])), (req, pos)
        num_units = self.size // ps
        assert set(owners) == set(range(1, num_units + 1)), "slots leaked or invented"
        if isinstance(cache, RadixCache):
            check_tree_structure(cache)
            for (extra, prefix), slots in tree_map(cache).items():
                start = len(prefix) - ps
                for j, slot in enumerate(slots):
                    assert self.content.get(slot) == (extra, prefix[: start + j + 1])
        owned = sum(1 for who in owners.values() if who not in ("free", "tree")) * ps
        assert (
            self.alloc.available_size() + cache.evictable_size() + cache.protected_size() + owned
            == self.size
        )
        if not self.active:
            assert cache.protected_size() == 0


@pytest.mark.parametrize("page_size", [1, 4])
def test_req_chunked_prefill_decode_finish(page_size):
    sim = Sim(page_size=page_size)
    prompt = list(range(100, 113))  # 13 tokens: not page aligned
    req = make_req("a", prompt)
    assert sim.admit(req) and req.cache_protected_len == 0
    while sim.in_prefill(req):
        assert sim.prefill_chunk(req, 5, next_token=7)
        assert req.cache_protected_len == len(req.fill_ids) // page_size * page_size
        assert len(req.prefix_indices) == len(req.fill_ids)
        sim.check()
    for tok in (8, 9, 10):
        assert sim.decode(req, tok)
    sim.check()
    sim.release(req)
    sim.check()
    cached = (prompt + [7, 8, 9])[: 16 // page_size * page_size]
    assert sim.cache.match_prefix(prompt + [7, 8, 9, 10]).device_indices.numel() == len(cached)
    assert (
        req.last_node is None and req.cache_protected_len == 0 and req.prefix_indices.numel() == 0
    )
    # A second request with the same prompt reuses the prefix, then drops its duplicate tail.
    b = make_req("b", prompt + [7, 8, 9, 10, 11])
    assert sim.admit(b) and b.cache_protected_len == len(cached)
    assert sim.cache.protected_size() == len(cached)
    while sim.in_prefill(b):
        assert sim.prefill_chunk(b, 64, next_token=1)
    sim.check()
    sim.release(b)
    sim.check()


@pytest.mark.parametrize("page_size", [1, 4])
def test_req_concurrent_duplicates_adopt_tree_slots(page_size):
    sim = Sim(page_size=page_size)
    prompt = list(range(50, 61))
    a, b = make_req("a", prompt), make_req("b", prompt)
    assert sim.admit(a) and sim.admit(b)  # both miss: neither is cached yet
    assert sim.prefill_chunk(a, 64, next_token=3) and sim.prefill_chunk(b, 64, next_token=4)
    aligned = len(prompt) // page_size * page_size
    row_a = sim.pool.read(a.req_pool_idx, 0, aligned)
    row_b = sim.pool.read(b.req_pool_idx, 0, aligned)
    assert torch.equal(row_a, row_b), "b's row must now point at the tree's (a's) slots"
    assert b.cache_protected_len == aligned and b.last_node is a.last_node
    sim.check()
    assert sim.decode(a, 5) and sim.decode(b, 6)
    sim.release(a)
    sim.check()
    sim.release(b)
    sim.check()
    assert sim.cache.protected_size() == 0


@pytest.mark.parametrize("page_size", [1, 4])
def test_req_retraction_frees_only_own_slots(page_size):
    sim = Sim(page_size=page_size)
    a = make_req("a", list(range(12)))
    assert sim.admit(a) and sim.prefill_chunk(a, 64, 1) and sim.decode(a, 2)
    sim.release(a)
    b = make_req("b", list(range(12)) + [1, 2, 3, 4, 5])
    assert sim.admit(b) and b.cache_protected_len > 0
    assert sim.prefill_chunk(b, 3, 9)
    tree_before = tree_map(sim.cache)
    avail = sim.alloc.available_size()
    own = b.kv_allocated_len - b.cache_protected_len
    sim.release(b, is_insert=False)  # retraction: nothing new enters the tree
    sim.check()
    assert tree_map(sim.cache) == tree_before
    assert sim.alloc.available_size() - avail == -(-own // page_size) * page_size
    # The retracted request comes back later and prefills again from the cache.
    assert sim.admit(b)
    while sim.in_prefill(b):
        assert sim.prefill_chunk(b, 4, 9)
    sim.release(b)
    sim.check()


@pytest.mark.parametrize("page_size", [1, 4])
def test_req_overallocated_slots_left_to_caller(page_size):
    sim = Sim(page_size=page_size)
    a = make_req("a", list(range(9)))
    assert sim.admit(a) and sim.prefill_chunk(a, 64, 1)
    # The overlap loop allocates the next decode step's slot before knowing the request finished.
    assert sim.extend_allocation(a, page_size + 1)
    over = sim.pool.read(a.req_pool_idx, a.kv_committed_len, a.kv_allocated_len)
    avail = sim.alloc.available_size()
    sim.cache.cache_finished_req(a)
    first_own_page = -(-a.kv_committed_len // page_size) * page_size
    not_freed = pages_of(
        sim.pool.read(a.req_pool_idx, first_own_page, a.kv_allocated_len), page_size
    )
    assert not set(not_freed) & set(free_pages(sim.alloc))
    assert sim.alloc.available_size() >= avail
    assert len(over) == page_size + 1
    # The caller's part of the release.
    sim.alloc.free(sim.pool.read(a.req_pool_idx, first_own_page, a.kv_allocated_len))
    sim.pool.free(a.req_pool_idx)
    sim.active.remove(a)
    sim.check()


def test_req_priority_and_extra_key_reach_tree():
    sim = Sim()
    a = make_req("a", [1, 2, 3, 4], extra_key="salt", priority=7)
    assert sim.admit(a) and sim.prefill_chunk(a, 64, 5)
    sim.release(a)
    assert sim.cache.match_prefix([1, 2, 3, 4, 5]).device_indices.numel() == 0
    r = sim.cache.match_prefix([1, 2, 3, 4, 5], extra_key="salt")
    assert len(r.device_indices) == 4 and r.last_node.priority == 7
    sim.check()


def test_chunk_cache_lifecycle():
    sim = Sim(chunk_cache=True)
    c = sim.cache
    assert c.match_prefix([1, 2, 3]).device_indices.numel() == 0
    assert c.insert([1, 2]) == 0 and c.evict(5) == 0 and c.inc_lock_ref(c.root) == 0
    a = make_req("a", list(range(10)))
    assert sim.admit(a)
    assert sim.prefill_chunk(a, 4, 1)
    assert a.cache_protected_len == 0
    assert a.prefix_indices.tolist() == sim.pool.read(a.req_pool_idx, 0, 4).tolist()
    while sim.in_prefill(a):
        assert sim.prefill_chunk(a, 4, 1)
    assert sim.decode(a, 2)
    sim.check()
    sim.release(a)
    sim.check()
    assert sim.alloc.available_size() == sim.size and c.total_size() == 0
    assert isinstance(c.pretty_print(), str)


def test_disabled_radix_cache_req_methods():
    sim = Sim()
    sim.cache = RadixCache(sim.pool, sim.alloc, disable=True)
    a = make_req("a", list(range(10)))
    assert sim.admit(a)
    while sim.in_prefill(a):
        assert sim.prefill_chunk(a, 3, 1)
    assert a.prefix_indices.numel() == len(a.fill_ids)
    sim.release(a)
    assert sim.alloc.available_size() == sim.size and sim.cache.total_size() == 0


# ---------------------------------------------------------------------------- hypothesis: requests
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=st.data(),
    page_size=st.sampled_from([1, 2, 4]),
    chunk_cache=st.booleans(),
    policy=st.sampled_from(sorted(POLICIES)),
)
def test_request_lifecycles(data, page_size, chunk_cache, policy):
    sim = Sim(page_size=page_size, size=64, rows=4, ctx=48, chunk_cache=chunk_cache, policy=policy)
    waiting: List[Req] = []
    tokens = st.integers(0, 2)
    for step in range(data.draw(st.integers(5, 30), label="steps")):
        op = data.draw(
            st.sampled_from(["new", "admit", "run", "run", "finish", "retract"]), label="op"
        )
        if op == "new" and len(waiting) < 4:
            prompt = data.draw(st.lists(tokens, min_size=1, max_size=14), label="prompt")
            extra = data.draw(st.sampled_from([None, None, "x"]), label="extra")
            waiting.append(
                make_req(f"r{step}", prompt, extra_key=extra, priority=data.draw(st.integers(0, 2)))
            )
        elif op == "admit" and waiting:
            req = waiting[0]
            if sim.admit(req):
                waiting.pop(0)
        elif op == "run" and sim.active:
            req = data.draw(st.sampled_from(sim.active), label="req")
            tok = data.draw(tokens, label="tok")
            if len(req.all_ids()) >= 40:
                sim.release(req)
            elif sim.in_prefill(req):
                sim.prefill_chunk(req, data.draw(st.integers(1, 8), label="chunk"), tok)
            else:
                sim.decode(req, tok)
        elif op in ("finish", "retract") and sim.active:
            req = data.draw(st.sampled_from(sim.active), label="req")
            sim.release(req, is_insert=(op == "finish"))
            if op == "retract":
                waiting.append(req)
        sim.check()
    for req in list(sim.active):
        sim.release(req)
    sim.check()
    assert sim.cache.protected_size() == 0


# ---------------------------------------------------------------------------- hypothesis: bare tree
class TreeMachine(RuleBasedStateMachine):
    """Random tree operations against the model {(extra_key, token prefix): slot}."""

    PAGE = 1
    SIZE = 64

    def __init__(self):
        super().__init__()
        self.alloc = make_allocator(self.SIZE, self.PAGE)
        self.cache = RadixCache(None, self.alloc, page_size=self.PAGE)
        self.model: Dict[PageKey, Tuple[int, ...]] = {}
        self.locks: List[Tuple[TreeNode, Optional[str], Tuple[int, ...]]] = []

    # Keys are made of pages drawn from a few patterns, some sharing a partial page, plus an
    # unaligned tail, so both page-internal mismatches and truncation get exercised.
    PATTERNS = [(0,), (1,), (2,), (3,)]
    keys = st.tuples(st.lists(st.integers(0, 3), max_size=12), st.integers(0, 3))
    extras = st.sampled_from([None, "a"])

    # -- model helpers
    def make_key(self, spec: Tuple[List[int], int]) -> List[int]:
        pages, tail = spec
        return [t for i in pages for t in self.PATTERNS[i]] + [0] * min(tail, self.PAGE - 1)

    def aligned(self, key: List[int]) -> List[int]:
        return key[: len(key) // self.PAGE * self.PAGE]

    def model_match(self, key: List[int], extra: Optional[str]) -> int:
        n, p = 0, self.PAGE
        while n + p <= len(key) and (extra, tuple(key[: n + p])) in self.model:
            n += p
        return n

    def model_slots(self, key: List[int], extra: Optional[str], n: int) -> List[int]:
        p = self.PAGE
        return [s for i in range(p, n + 1, p) for s in self.model[(extra, tuple(key[:i]))]]

    def protected_set(self) -> Set[PageKey]:
        p = self.PAGE
        return {
            (extra, path[:i]) for _, extra, path in self.locks for i in range(p, len(path) + 1, p)
        }

    def evict(self, n: int) -> int:
        before = dict(self.model)
        evictable = self.cache.evictable_size()
        freed = self.cache.evict(n)
        after = tree_map(self.cache)
        assert after.items() <= before.items()
        assert (len(before) - len(after)) * self.PAGE == freed <= evictable
        assert freed >= n or self.cache.evictable_size() == 0
        assert self.protected_set() <= after.keys(), "a locked path was evicted"
        self.model = after
        return freed

    # -- rules
    @rule(key=keys, extra=extras)
    def insert(self, key, extra):
        key = self.make_key(key)
        aligned = self.aligned(key)
        slots = self.alloc.alloc(len(aligned)) if aligned else torch.empty(0, dtype=torch.int64)
        if slots is None:
            self.evict(len(aligned))
            slots = self.alloc.alloc(len(aligned))
            if slots is None:
                return
        expected = self.model_match(aligned, extra)
        present = self.cache.insert(key, slots, extra_key=extra)
        assert present == expected
        self.alloc.free(slots[:present])
        p = self.PAGE
        for i in range(present, len(aligned), p):
            self.model[(extra, tuple(aligned[: i + p]))] = tuple(slots[i : i + p].tolist())

    @rule(key=keys, extra=extras, lock=st.booleans())
    def match(self, key, extra, lock):
        key = self.make_key(key)
        aligned = self.aligned(key)
        r = self.cache.match_prefix(key, extra_key=extra)
        n = self.model_match(aligned, extra)
        assert r.device_indices.tolist() == self.model_slots(aligned, extra, n)
        assert node_path(r.last_node) == aligned[:n]
        if lock:
            before = self.protected_set()
            delta = self.cache.inc_lock_ref(r.last_node)
            self.locks.append((r.last_node, extra, tuple(aligned[:n])))
            assert delta == -(len(self.protected_set()) - len(before)) * self.PAGE

    @precondition(lambda self: self.locks)
    @rule(data=st.data())
    def unlock(self, data):
        i = data.draw(st.integers(0, len(self.locks) - 1))
        before = self.protected_set()
        node, _, _ = self.locks.pop(i)
        delta = self.cache.dec_lock_ref(node)
        assert delta == (len(before) - len(self.protected_set())) * self.PAGE

    @rule(n=st.integers(0, 70))
    def do_evict(self, n):
        self.evict(n)

    # -- invariants
    @invariant()
    def sizes_and_slots(self):
        cache = self.cache
        check_tree_structure(cache)
        assert tree_map(cache) == self.model
        assert cache.protected_size() == len(self.protected_set()) * self.PAGE
        assert cache.total_size() == len(self.model) * self.PAGE
        assert (
            self.alloc.available_size() + cache.evictable_size() + cache.protected_size()
            == self.SIZE
        )
        free = free_pages(self.alloc)
        tree = pages_of(cache.all_values(), self.PAGE)
        assert len(free) == len(set(free))
        assert not set(free) & set(tree), "a slot is both free and in the tree"
        if self.PAGE > 1:
            check_paged_values(cache)


class PagedTreeMachine(TreeMachine):
    PAGE = 4
    PATTERNS = [(0, 0, 0, 0), (1, 1, 1, 1), (0, 0, 0, 1), (0, 1, 0, 1)]
    SIZE = 128


_machine_settings = settings(
    max_examples=150,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestTreeMachine = TreeMachine.TestCase
TestTreeMachine.settings = _machine_settings
TestPagedTreeMachine = PagedTreeMachine.TestCase
TestPagedTreeMachine.settings = _machine_settings
