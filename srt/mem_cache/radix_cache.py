"""RadixCache: a radix tree from token runs to KV slots, shared by requests with common prefixes.

Each node holds a run of tokens (`key`, a list) and the KV slots that hold them (`value`). Children
are keyed by (extra_key, first token) — or the first page tuple when page_size > 1 — so requests
with different extra_key values never share a node. Every node key is a whole number of pages.

Accounting: a node's tokens count as protected while its lock_ref > 0 and as evictable otherwise.
Both totals are kept by counters updated at the few places that change them (new leaf, eviction,
lock crossings); `_recompute_sizes` walks the tree so tests can cross-check them.
"""

from __future__ import annotations

import heapq
import itertools
import math
import time
from typing import TYPE_CHECKING, Any, Dict, Hashable, Iterator, List, Optional, Sequence, Tuple

import torch

from sglang.srt.mem_cache.base_prefix_cache import BasePrefixCache, MatchResult, empty_indices
from sglang.srt.mem_cache.evict_policy import get_eviction_key

if TYPE_CHECKING:
    from sglang.srt.core.req import Req

# Runs are compared this many tokens at a time with C-level list equality before a per-token scan.
_CMP_BLOCK = 64


class TreeNode:
    __slots__ = (
        "id",
        "children",
        "parent",
        "key",
        "value",
        "extra_key",
        "lock_ref",
        "last_access_time",
        "creation_time",
        "hit_count",
        "priority",
        "host_value",
        "host_ref",
    )

    _ids = itertools.count()

    def __init__(
        self,
        key: Optional[List[int]] = None,
        value: Optional[torch.Tensor] = None,
        parent: Optional["TreeNode"] = None,
        extra_key: Optional[str] = None,
        now: float = 0.0,
        priority: int = 0,
    ):
        self.id = next(TreeNode._ids)
        self.children: Dict[Hashable, TreeNode] = {}
        self.parent = parent
        self.key: List[int] = key if key is not None else []
        self.value: Optional[torch.Tensor] = value if value is not None else empty_indices()
        self.extra_key = extra_key
        self.lock_ref = 0
        self.last_access_time = now
        self.creation_time = now
        self.hit_count = 0
        self.priority = priority
        # HiCache: host pool slots holding a copy of this node's KV, and the background work
        # (storage writes) reading them.
        self.host_value: Optional[torch.Tensor] = None
        self.host_ref = 0

    @property
    def evicted(self) -> bool:
        """No KV on the device (with HiCache it may still be in host memory)."""
        return self.value is None

    @property
    def backuped(self) -> bool:
        return self.host_value is not None

    def __repr__(self) -> str:
        head = self.key[:8]
        more = "..." if len(self.key) > 8 else ""
        return f"TreeNode(id={self.id}, len={len(self.key)}, key={head}{more}, lock_ref={self.lock_ref})"


def common_prefix_len(node_key: List[int], key: List[int], start: int, page_size: int) -> int:
    """Length of the common prefix of node_key and key[start:], rounded down to whole pages."""
    n = min(len(node_key), len(key) - start)
    if n == len(node_key):
        if key[start : start + n] == node_key:
            return n
    elif key[start : start + n] == node_key[:n]:
        return n - n % page_size
    # Find the first differing block cheaply, then the first differing token inside it.
    i = 0
    while i < n:
        j = min(i + _CMP_BLOCK, n)
        if key[start + i : start + j] != node_key[i:j]:
            break
        i = j
    while i < n and key[start + i] == node_key[i]:
        i += 1
    return i - i % page_size


class RadixCache(BasePrefixCache):
    def __init__(
        self,
        req_to_token_pool: Any,
        token_to_kv_pool_allocator: Any,
        page_size: int = 1,
        disable: bool = False,
        eviction_policy: str = "lru",
    ):
        self.req_to_token_pool = req_to_token_pool
        self.token_to_kv_pool_allocator = token_to_kv_pool_allocator
        self.page_size = page_size
        self.disable = disable
        self.eviction_policy = eviction_policy
        self._evict_key = get_eviction_key(eviction_policy)
        self._last_time = 0.0
        self.reset()

    # ------------------------------------------------------------------ state
    def reset(self) -> None:
        now = self._now()
        self.root = TreeNode(now=now, priority=-(2**62))
        # The root is permanently "locked" so no walk ever treats it as evictable.
        self.root.lock_ref = 1
        self._evictable_size = 0
        self._protected_size = 0
        self.evictable_leaves: set = set()

    def _now(self) -> float:
        # Strictly increasing, so recency ties never depend on clock resolution.
        t = time.monotonic()
        if t <= self._last_time:
            t = math.nextafter(self._last_time, math.inf)
        self._last_time = t
        return t

    def evictable_size(self) -> int:
        return self._evictable_size

    def protected_size(self) -> int:
        return self._protected_size

    # ------------------------------------------------------------------ keys
    def _child_key(self, extra_key: Optional[str], tokens: Sequence[int], pos: int) -> Hashable:
        ps = self.page_size
        plain = tokens[pos] if ps == 1 else tuple(tokens[pos : pos + ps])
        return (extra_key, plain)

    def _node_child_key(self, node: TreeNode) -> Hashable:
        return self._child_key(node.extra_key, node.key, 0)

    def _aligned(self, key: Sequence[int]) -> List[int]:
        if not isinstance(key, list):
            key = list(key)
        n = len(key) - len(key) % self.page_size
        return key if n == len(key) else key[:n]

    # ------------------------------------------------------------------ match
    def match_prefix(self, key: List[int], extra_key: Optional[str] = None) -> MatchResult:
        if self.disable or len(key) < self.page_size:
            return MatchResult(empty_indices(), self.root)
        key = self._aligned(key)
        now = self._now()
        self.root.last_access_time = now
        node, values = self.root, []
        for node, _, _ in self._walk(key, extra_key, now):
            values.append(node.value)
        indices = torch.cat(values) if values else empty_indices()
        return MatchResult(indices, node)

    def _walk(
        self, key: List[int], extra_key: Optional[str], now: float
    ) -> Iterator[Tuple[TreeNode, int, int]]:
        """Descend along key from the root. For each node the key runs through: split it where the
        key leaves it, mark it used, yield (node, start, length). Ends where the key leaves the tree."""
        node, pos = self.root, 0
        while pos < len(key):
            child = node.children.get(self._child_key(extra_key, key, pos))
            if child is None:
                return
            n = common_prefix_len(child.key, key, pos, self.page_size)
            split = n < len(child.key)
            if split:
                child = self._split_node(child, n)
            # Only the matched part was used: a split-off tail keeps its own age.
            child.last_access_time = now
            yield child, pos, n
            if split:
                return
            node, pos = child, pos + n

    def cached_continuation(self, node: Any, extra_key: Optional[str], limit: int) -> List[int]:
        out: List[int] = []
        while len(out) < limit:
            kids = [c for c in node.children.values() if c.extra_key == extra_key and not c.evicted]
            if not kids:
                break
            node = max(kids, key=lambda c: c.last_access_time)
            out.extend(node.key[: limit - len(out)])
        return out

    def _split_node(self, child: TreeNode, split_len: int) -> TreeNode:
        """Cut `child` after split_len tokens; returns the new upper node (child keeps the rest)."""
        parent = child.parent
        upper = TreeNode(
            child.key[:split_len],
            child.value[:split_len].clone(),
            parent,
            child.extra_key,
            child.last_access_time,
            child.priority,
        )
        # Every lock through child also passes through the upper part, so it inherits lock_ref.
        upper.lock_ref = child.lock_ref
        upper.hit_count = child.hit_count
        upper.creation_time = child.creation_time
        child.key = child.key[split_len:]
        child.value = child.value[split_len:].clone()
        child.parent = upper
        upper.children[self._node_child_key(child)] = child
        parent.children[self._node_child_key(upper)] = upper
        # Sizes and child's leaf status are unchanged; upper has a child, so it is not a leaf.
        return upper

    # ------------------------------------------------------------------ insert
    def insert(
        self,
        key: List[int],
        value: Optional[torch.Tensor] = None,
        extra_key: Optional[str] = None,
        priority: Optional[int] = None,
        chunked: bool = False,
    ) -> int:
        if self.disable:
            return 0
        key = self._aligned(key)
        if value is None:  # tests: let the token ids stand in for slots
            value = torch.tensor(key, dtype=torch.int64)
        assert len(value) >= len(key), "insert needs one slot per token"
        now = self._now()
        self.root.last_access_time = now
        node, pos = self.root, 0
        for node, start, n in self._walk(key, extra_key, now):
            self._touch(node, priority, chunked)
            pos = start + n
        if pos < len(key):
            self._add_leaf(node, key[pos:], value[pos : len(key)], extra_key, now, priority)
        return pos

    def _touch(self, node: TreeNode, priority: Optional[int], chunked: bool) -> None:
        if priority is not None and priority > node.priority:
            node.priority = priority
        # A chunk of a still-running prefill is not a reuse of the prefix.
        if not chunked:
            node.hit_count += 1

    def _add_leaf(
        self,
        parent: TreeNode,
        key: List[int],
        value: torch.Tensor,
        extra_key: Optional[str],
        now: float,
        priority: Optional[int],
    ) -> TreeNode:
        leaf = TreeNode(
            key, value.clone(), parent, extra_key, now, priority if priority is not None else 0
        )
        parent.children[self._node_child_key(leaf)] = leaf
        self._evictable_size += len(key)
        self._update_leaf_status(parent)
        self._update_leaf_status(leaf)
        return leaf

    # ------------------------------------------------------------------ eviction
    def _update_leaf_status(self, node: TreeNode) -> None:
        if node is not self.root and node.lock_ref == 0 and not node.children and not node.evicted:
            self.evictable_leaves.add(node)
        else:
            self.evictable_leaves.discard(node)

    def evict(self, num_tokens: int) -> int:
        if self.disable or num_tokens <= 0:
            return 0
        heap = [(self._evict_key(n), n.id, n) for n in self.evictable_leaves]
        heapq.heapify(heap)
        freed = 0
        while freed < num_tokens and heap:
            _, _, leaf = heapq.heappop(heap)
            self.token_to_kv_pool_allocator.free(leaf.value)
            freed += len(leaf.value)
            parent = leaf.parent
            self._delete_leaf(leaf)
            # A parent stripped of its last child joins the candidates in its own policy order.
            if parent in self.evictable_leaves:
                heapq.heappush(heap, (self._evict_key(parent), parent.id, parent))
        return freed

    def _delete_leaf(self, leaf: TreeNode) -> None:
        parent = leaf.parent
        del parent.children[self._node_child_key(leaf)]
        self._evictable_size -= len(leaf.key)
        self.evictable_leaves.discard(leaf)
        leaf.value = None
        self._update_leaf_status(parent)

    # ------------------------------------------------------------------ locks
    def inc_lock_ref(self, node: Optional[TreeNode]) -> int:
        if self.disable or node is None:
            return 0
        assert not node.evicted, f"inc_lock_ref on evicted {node}"
        delta = 0
        while node.parent is not None:
            if node.lock_ref == 0:
                n = len(node.key)
                self._evictable_size -= n
                self._protected_size += n
                delta -= n
                self.evictable_leaves.discard(node)
            node.lock_ref += 1
            node = node.parent
        assert node is self.root, "inc_lock_ref on a node of another tree"
        return delta

    def dec_lock_ref(self, node: Optional[TreeNode]) -> int:
        if self.disable or node is None:
            return 0
        delta = 0
        while node.parent is not None:
            assert node.lock_ref > 0, f"dec_lock_ref below zero at {node}"
            if node.lock_ref == 1:
                n = len(node.key)
                self._evictable_size += n
                self._protected_size -= n
                delta += n
            node.lock_ref -= 1
            self._update_leaf_status(node)
            node = node.parent
        assert node is self.root, "dec_lock_ref on a node of another tree"
        return delta

    # ------------------------------------------------------------------ requests
    def _free(self, slots: torch.Tensor) -> None:
        if slots.numel():
            self.token_to_kv_pool_allocator.free(slots)

    def cache_finished_req(self, req: "Req", is_insert: bool = True) -> None:
        committed = req.kv_committed_len
        kv = self.req_to_token_pool.read(req.req_pool_idx, 0, committed)
        protected = req.cache_protected_len
        if is_insert and not self.disable:
            aligned = committed - committed % self.page_size
            token_ids = (req.origin_input_ids + req.output_ids)[:aligned]
            assert len(token_ids) == aligned, "kv_committed_len runs past the request's tokens"
            present = self.insert(
                token_ids, kv[:aligned], extra_key=req.extra_key, priority=req.priority
            )
            # Our copies of what the tree already held are duplicates; the protected part is the tree's.
            self._free(kv[protected:present])
            self._free(kv[aligned:committed])
        else:
            self._free(kv[protected:committed])
        self.dec_lock_ref(req.last_node)
        req.last_node = None
        req.cache_protected_len = 0
        req.prefix_indices = empty_indices()

    def cache_unfinished_req(self, req: "Req", chunked: bool = False) -> None:
        row = req.req_pool_idx
        fill = req.fill_ids
        kv = self.req_to_token_pool.read(row, 0, len(fill))
        if self.disable:
            req.prefix_indices = kv
            return
        protected = req.cache_protected_len
        aligned = len(fill) - len(fill) % self.page_size
        key = fill[:aligned]
        present = self.insert(
            key, kv[:aligned], extra_key=req.extra_key, priority=req.priority, chunked=chunked
        )
        self._free(kv[protected:present])
        match = self.match_prefix(key, extra_key=req.extra_key)
        new_indices, new_node = match.device_indices, match.last_node
        assert len(new_indices) == aligned, (
            f"re-match returned {len(new_indices)} of {aligned} tokens"
        )
        # The row must now point at the tree's slots wherever we just freed our duplicates.
        self.req_to_token_pool.write(row, protected, new_indices[protected:])
        self.inc_lock_ref(new_node)
        self.dec_lock_ref(req.last_node)
        req.prefix_indices = torch.cat([new_indices, kv[aligned:]])
        req.cache_protected_len = aligned
        req.last_node = new_node

    # ------------------------------------------------------------------ inspection
    def _iter_nodes(self) -> List[Tuple[TreeNode, int]]:
        """All non-root nodes with their depth, in depth-first order (iterative: trees can be deep)."""
        out: List[Tuple[TreeNode, int]] = []
        stack = [(c, 0) for c in reversed(list(self.root.children.values()))]
        while stack:
            node, depth = stack.pop()
            out.append((node, depth))
            stack.extend((c, depth + 1) for c in reversed(list(node.children.values())))
        return out

    def _recompute_sizes(self) -> Tuple[int, int]:
        """(evictable, protected) counted from the tree itself, to cross-check the counters."""
        evictable = protected = 0
        for node, _ in self._iter_nodes():
            if node.lock_ref > 0:
                protected += len(node.key)
            else:
                evictable += len(node.key)
        return evictable, protected

    def all_values(self) -> torch.Tensor:
        """Every slot held by the tree (for leak checks and tests)."""
        values = [node.value for node, _ in self._iter_nodes()]
        return torch.cat(values) if values else empty_indices()

    def pretty_print(self) -> str:
        lines = [
            f"RadixCache(page_size={self.page_size}, policy={self.eviction_policy}, "
            f"evictable={self._evictable_size}, protected={self._protected_size})"
        ]
        for node, depth in self._iter_nodes():
            head = node.key[:10]
            more = "..." if len(node.key) > 10 else ""
            extra = f" extra={node.extra_key!r}" if node.extra_key is not None else ""
            lines.append(
                f"{'  ' * (depth + 1)}len={len(node.key)} lock={node.lock_ref}{extra} key={head}{more}"
            )
        return "\n".join(lines)
