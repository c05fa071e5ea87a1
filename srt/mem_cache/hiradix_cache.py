"""HiRadixCache: the radix tree over two tiers, the device KV pool and a host-memory pool.

Each node's KV lives on the device (value), in host memory (host_value), or both. Rules:
- Device residency is prefix-closed: a node without device KV has no descendant with device KV. So
  a match is a device part followed by a host-only part (host_hit_length tokens), and load_back
  turns that host part into device KV again.
- Writes down follow --hicache-write-policy: write_through copies a node at its first use,
  write_through_selective at its second (hit_count), write_back only when it is evicted. A node
  evicted from the device keeps its host copy and stays in the tree; a node with no copy is
  deleted, unless it has host-only children or the policy is write_back, then it is copied first.
- The host pool evicts LRU too: a host-only leaf leaves the tree; a node still on the device just
  drops its copy. Nodes read by storage writes (host_ref > 0) are not evicted.

Accounting, exact at every step: evictable_size / protected_size count device tokens (as in
RadixCache); host_evictable_size / host_protected_size count host tokens by host_ref. With no
request and no background work, device available + evictable == total and host available +
host evictable == host total.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

import torch

from sglang.srt.mem_cache.base_prefix_cache import MatchResult, empty_indices
from sglang.srt.mem_cache.common import OutOfMemoryError, alloc_token_slots
from sglang.srt.mem_cache.host_pool import HostKVPool
from sglang.srt.mem_cache.kv_transfer import KVTransfer
from sglang.srt.mem_cache.radix_cache import RadixCache, TreeNode

if TYPE_CHECKING:
    from sglang.srt.core.req import Req


class OutOfHostMemory(RuntimeError):
    pass


@dataclass
class _PendingWrite:
    nodes: List[TreeNode]  # the node copied (both parts once it is split)
    dev_idx: torch.Tensor
    host_idx: torch.Tensor


class HiRadixCache(RadixCache):
    def __init__(
        self,
        req_to_token_pool: Any,
        token_to_kv_pool_allocator: Any,
        host_pool: HostKVPool,
        transfer: KVTransfer,
        write_through_threshold: Optional[int],
        page_size: int = 1,
        eviction_policy: str = "lru",
    ):
        """write_through_threshold: hits at which a node is copied down (None: write_back)."""
        self.host_pool = host_pool
        self.transfer = transfer
        self.write_through_threshold = write_through_threshold
        self.storage: Any = None  # the storage tier (hicache_storage.StorageTier), when enabled
        super().__init__(
            req_to_token_pool, token_to_kv_pool_allocator, page_size, False, eviction_policy
        )

    # ------------------------------------------------------------------ state
    def reset(self) -> None:
        if getattr(self, "storage", None) is not None:
            self.storage.drain()  # its threads read and write host slots about to be cleared
        super().reset()
        self._host_evictable_size = 0
        self._host_protected_size = 0
        self.host_candidates: set = set()
        self._ready_writes: List[_PendingWrite] = []
        self._unready_writes: List[_PendingWrite] = []
        self._building = False  # inside cache_unfinished_req: new KV not computed yet
        self._finishing = False  # inside cache_finished_req
        self.host_pool.clear()

    def host_evictable_size(self) -> int:
        return self._host_evictable_size

    def host_protected_size(self) -> int:
        return self._host_protected_size

    def host_total_size(self) -> int:
        return self.host_pool.size

    def host_accounting(self) -> Tuple[int, int, int, int, int]:
        """(available, evictable, protected, held by storage reads in flight, total) host slots;
        the first four always sum to the total."""
        owned = self.storage.owned_host_slots() if self.storage is not None else 0
        return (
            self.host_pool.available_size(),
            self._host_evictable_size,
            self._host_protected_size,
            owned,
            self.host_pool.size,
        )

    # ------------------------------------------------------------------ status sets
    def _update_leaf_status(self, node: TreeNode) -> None:
        """Device eviction candidates: on the device, unlocked, no child on the device."""
        if (
            node is not self.root
            and node.lock_ref == 0
            and not node.evicted
            and all(c.evicted for c in node.children.values())
        ):
            self.evictable_leaves.add(node)
        else:
            self.evictable_leaves.discard(node)

    def _update_host_status(self, node: TreeNode) -> None:
        """Host eviction candidates: a copy nobody reads, whose loss leaves no orphan (the node is
        on the device, or a host-only leaf)."""
        if (
            node is not self.root
            and node.host_value is not None
            and node.host_ref == 0
            and (not node.evicted or not node.children)
        ):
            self.host_candidates.add(node)
        else:
            self.host_candidates.discard(node)

    def _refresh(self, *nodes: Optional[TreeNode]) -> None:
        for n in nodes:
            if n is not None:
                self._update_leaf_status(n)
                self._update_host_status(n)

    # ------------------------------------------------------------------ match
    def match_prefix(self, key: List[int], extra_key: Optional[str] = None) -> MatchResult:
        if len(key) < self.page_size:
            return MatchResult(empty_indices(), self.root, self.root, 0)
        key = self._aligned(key)
        now = self._now()
        self.root.last_access_time = now
        node, values = self.root, []
        last_device, host_hit = self.root, 0
        for node, _, n in self._walk(key, extra_key, now):
            if node.evicted:
                host_hit += n
            else:
                assert host_hit == 0, "a device node below a host-only node"
                values.append(node.value)
                last_device = node
        indices = torch.cat(values) if values else empty_indices()
        return MatchResult(indices, last_device, node, host_hit)

    def _split_node(self, child: TreeNode, split_len: int) -> TreeNode:
        parent = child.parent
        upper = TreeNode(
            child.key[:split_len],
            None,
            parent,
            child.extra_key,
            child.last_access_time,
            child.priority,
        )
        upper.value = None if child.evicted else child.value[:split_len].clone()
        if child.host_value is not None:
            upper.host_value = child.host_value[:split_len].clone()
            child.host_value = child.host_value[split_len:].clone()
        # Every lock or reader through child also passes through the upper part.
        upper.lock_ref = child.lock_ref
        upper.host_ref = child.host_ref
        upper.hit_count = child.hit_count
        upper.creation_time = child.creation_time
        child.key = child.key[split_len:]
        if not child.evicted:
            child.value = child.value[split_len:].clone()
        child.parent = upper
        upper.children[self._node_child_key(child)] = child
        parent.children[self._node_child_key(upper)] = upper
        for pw in self._ready_writes + self._unready_writes:
            if any(n is child for n in pw.nodes):
                pw.nodes.append(upper)  # the queued copy moves the rows of both parts
        self._refresh(upper, child)
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
        """Returns how many leading tokens the tree already held on the device (the caller's copies
        of those are duplicates). Host-only nodes on the path take the caller's slots instead."""
        key = self._aligned(key)
        if value is None:
            value = torch.tensor(key, dtype=torch.int64)
        now = self._now()
        self.root.last_access_time = now
        node, pos, on_device = self.root, 0, 0
        for node, start, n in self._walk(key, extra_key, now):
            if node.evicted:
                node.value = value[start : start + n].clone()
                self._evictable_size += n
                self._refresh(node, node.parent)
            else:
                assert on_device == start, "a device node below a host-only node"
                on_device = start + n
            self._touch(node, priority, chunked)
            pos = start + n
        if pos < len(key):
            leaf = self._add_leaf(node, key[pos:], value[pos : len(key)], extra_key, now, priority)
            leaf.hit_count = 1
            self._maybe_write_through(leaf)
        return on_device

    def _add_leaf(self, parent, key, value, extra_key, now, priority) -> TreeNode:
        leaf = super()._add_leaf(parent, key, value, extra_key, now, priority)
        self._refresh(parent, leaf)
        return leaf

    def _touch(self, node: TreeNode, priority: Optional[int], chunked: bool) -> None:
        super()._touch(node, priority, chunked or self._finishing)
        self._maybe_write_through(node)

    def cache_unfinished_req(self, req: "Req", chunked: bool = False) -> None:
        # The prompt is inserted before its pass runs: copies down wait for on_batch_launched.
        self._building = True
        try:
            super().cache_unfinished_req(req, chunked)
        finally:
            self._building = False

    def cache_finished_req(self, req: "Req", is_insert: bool = True) -> None:
        # The request inserted its prompt when admitted: walking it again is not a second use
        # (write_through_selective counts uses by different requests).
        self._finishing = True
        try:
            super().cache_finished_req(req, is_insert)
        finally:
            self._finishing = False

    # ------------------------------------------------------------------ writes down
    def _maybe_write_through(self, node: TreeNode) -> None:
        t = self.write_through_threshold
        if t is not None and node.host_value is None and not node.evicted and node.hit_count >= t:
            self._backup(node)

    def _backup(self, node: TreeNode) -> bool:
        """Give `node` host slots and queue the copy of its device KV into them."""
        if node.host_value is not None:
            return True
        n = len(node.value)
        host = self._host_alloc(n, protect=node)
        if host is None:
            return False
        node.host_value = host
        # A storage write may hold this node's path (host_ref counts readers, copy or not).
        if node.host_ref:
            self._host_protected_size += n
        else:
            self._host_evictable_size += n
        pw = _PendingWrite([node], node.value, host)
        (self._unready_writes if self._building else self._ready_writes).append(pw)
        self._update_host_status(node)
        return True

    def _host_alloc(self, n: int, protect: Optional[TreeNode] = None) -> Optional[torch.Tensor]:
        if self.host_pool.available_size() < n:
            self.evict_host(n - self.host_pool.available_size(), keep=protect)
        return self.host_pool.alloc(n)

    def on_batch_launched(self) -> None:
        self._ready_writes.extend(self._unready_writes)
        self._unready_writes = []
        self._issue_writes()

    def poll(self) -> None:
        self._issue_writes()
        if self.storage is not None:
            self.storage.poll()

    def busy(self) -> bool:
        return bool(self._unready_writes) or (self.storage is not None and self.storage.busy())

    def prefetch(self, req: "Req") -> None:
        if self.storage is not None:
            self.storage.start_prefetch(req)

    def prefetch_ready(self, req: "Req") -> bool:
        return self.storage is None or self.storage.ready(req)

    def drop_prefetch(self, req: "Req") -> None:
        if self.storage is not None:
            self.storage.drop(req)

    def _issue_writes(self) -> None:
        if not self._ready_writes:
            return
        writes, self._ready_writes = self._ready_writes, []
        dev = torch.cat([w.dev_idx for w in writes])
        host = torch.cat([w.host_idx for w in writes])
        # Two rows into one slot would race in the scatter: a freed slot's copy must be gone.
        assert len(torch.unique(host)) == len(host), "two queued copies into one host slot"
        done = self.transfer.write_to_host(dev, host)
        if self.storage is not None:
            self.storage.on_written([n for w in writes for n in w.nodes], done)

    # ------------------------------------------------------------------ device eviction
    def evict(self, num_tokens: int) -> int:
        if num_tokens <= 0:
            return 0
        self._issue_writes()
        heap = [(self._evict_key(n), n.id, n) for n in self.evictable_leaves]
        heapq.heapify(heap)
        freed = 0
        kept_copies = False
        while freed < num_tokens and heap:
            _, _, x = heapq.heappop(heap)
            if x not in self.evictable_leaves:
                continue  # stale entry
            parent = x.parent
            if x.host_value is None and (self.write_through_threshold is None or x.children):
                self._backup(x)  # write_back, or host-only children that need this ancestor
            if x.host_value is None and x.children and self._subtree_read(x):
                continue  # no room to copy it, and storage still reads below it: keep it for now
            n = len(x.value)
            self.token_to_kv_pool_allocator.free(x.value)
            freed += n
            self._evictable_size -= n
            if x.host_value is not None:
                x.value = None
                kept_copies = True
                self._refresh(x)
            else:
                x.value = None
                self._drop_subtree(x)
            self._refresh(parent)
            if parent in self.evictable_leaves:
                heapq.heappush(heap, (self._evict_key(parent), parent.id, parent))
        # Copies queued by this eviction read slots the next pass may now be handed.
        self._issue_writes()
        if kept_copies:
            self.transfer.fence_writes()
        return freed

    def _drop_subtree(self, x: TreeNode) -> None:
        """Remove x (already off the device) and its host-only descendants from the tree."""
        stack = [x]
        while stack:
            node = stack.pop()
            stack.extend(node.children.values())
            if node.host_value is not None:
                assert node.host_ref == 0, f"dropping {node} while storage reads it"
                self._free_host(node.host_value)
                self._host_evictable_size -= len(node.host_value)
                node.host_value = None
            self.evictable_leaves.discard(node)
            self.host_candidates.discard(node)
        del x.parent.children[self._node_child_key(x)]

    def _subtree_read(self, x: TreeNode) -> bool:
        stack = list(x.children.values())
        while stack:
            node = stack.pop()
            if node.host_ref:
                return True
            stack.extend(node.children.values())
        return False

    def _free_host(self, slots: torch.Tensor) -> None:
        """Free host slots, dropping queued copies into them: the slots may be handed to another
        node whose copy joins the same scatter, where two writes to one row have no order."""
        self.host_pool.free(slots)
        for lst in (self._ready_writes, self._unready_writes):
            for w in lst:
                keep = ~torch.isin(w.host_idx, slots)
                if not bool(keep.all()):
                    w.dev_idx, w.host_idx = w.dev_idx[keep], w.host_idx[keep]

    # ------------------------------------------------------------------ host eviction
    def evict_host(self, num_tokens: int, keep: Optional[TreeNode] = None) -> int:
        """Free at least num_tokens host slots (LRU) if possible; never the copy of `keep` or of a
        node on its path."""
        if num_tokens <= 0:
            return 0
        path = set()
        x = keep
        while x is not None:
            path.add(id(x))
            x = x.parent
        heap = [(self._evict_key(n), n.id, n) for n in self.host_candidates if id(n) not in path]
        heapq.heapify(heap)
        freed = 0
        while freed < num_tokens and heap:
            _, _, x = heapq.heappop(heap)
            if x not in self.host_candidates:
                continue
            parent = x.parent
            n = len(x.host_value)
            self._free_host(x.host_value)
            self._host_evictable_size -= n
            x.host_value = None
            freed += n
            if x.evicted:  # a host-only leaf: gone from the tree
                del parent.children[self._node_child_key(x)]
                self.host_candidates.discard(x)
                self._refresh(parent)
                if parent in self.host_candidates and id(parent) not in path:
                    heapq.heappush(heap, (self._evict_key(parent), parent.id, parent))
            else:
                self._refresh(x)
        return freed

    # ------------------------------------------------------------------ load back
    def load_back(self, node: TreeNode) -> Optional[Tuple[torch.Tensor, TreeNode]]:
        """Bring the host-only nodes on the path ending at `node` back to the device: returns their
        new device slots (in token order) and `node`, or None if the device pool has no room."""
        path: List[TreeNode] = []
        x = node
        while x.evicted:
            path.append(x)
            x = x.parent
        if not path:
            return None
        path.reverse()
        n = sum(len(p.host_value) for p in path)
        # Our own device prefix and host copies must survive the eviction that makes room.
        self.inc_lock_ref(x)
        self._host_ref(path, +1)
        try:
            dev = alloc_token_slots(self, self.token_to_kv_pool_allocator, n)
        except OutOfMemoryError:
            return None
        finally:
            self._host_ref(path, -1)
            self.dec_lock_ref(x)
        self.transfer.load_to_device(torch.cat([p.host_value for p in path]), dev)
        off = 0
        for p in path:
            k = len(p.host_value)
            p.value = dev[off : off + k]
            off += k
            self._evictable_size += k
        self._refresh(x, *path)
        return dev, node

    def _host_ref(self, nodes: List[TreeNode], delta: int) -> None:
        """host_ref counts readers whether or not the node has a copy yet (as lock_ref does);
        only a copy's tokens move between evictable and protected."""
        for p in nodes:
            k = 0 if p.host_value is None else len(p.host_value)
            if delta > 0 and p.host_ref == 0:
                self._host_evictable_size -= k
                self._host_protected_size += k
            p.host_ref += delta
            assert p.host_ref >= 0, f"host_ref below zero at {p}"
            if delta < 0 and p.host_ref == 0:
                self._host_evictable_size += k
                self._host_protected_size -= k
            self._update_host_status(p)

    def _path_to_root(self, node: TreeNode) -> List[TreeNode]:
        nodes = []
        while node is not None and node is not self.root:
            nodes.append(node)
            node = node.parent
        return nodes

    def inc_host_ref_path(self, node: TreeNode) -> None:
        """Protect the host copies on the path ending at `node` (storage reads)."""
        self._host_ref(self._path_to_root(node), +1)

    def dec_host_ref_path(self, node: TreeNode) -> None:
        """Release what inc_host_ref_path(node) protected. The path is walked again, not
        remembered: a node split meanwhile left its upper part, holding the same ref, on it."""
        self._host_ref(self._path_to_root(node), -1)

    # ------------------------------------------------------------------ host-only inserts
    def insert_host(
        self, key: List[int], start: int, host_idx: torch.Tensor, extra_key: Optional[str]
    ) -> int:
        """Attach host KV for key[start : start + len(host_idx)] (read from storage) below the node
        that holds key[:start]. Returns k: the tree took host_idx[k:]; the caller frees the rest
        (all of it when the tree no longer reaches `start`)."""
        end = start + len(host_idx)
        key = list(key[:end])
        assert end % self.page_size == 0 and start % self.page_size == 0
        now = self._now()
        node, pos = self.root, 0
        for reached, at, n in self._walk(key, extra_key, now):
            node, pos = reached, at + n
        if pos < start or pos >= end:
            return len(host_idx)
        leaf = TreeNode(key[pos:end], None, node, extra_key, now)
        leaf.value = None
        leaf.host_value = host_idx[pos - start :].clone()
        node.children[self._node_child_key(leaf)] = leaf
        self._host_evictable_size += len(leaf.host_value)
        self._refresh(node, leaf)
        return pos - start

    # ------------------------------------------------------------------ inspection
    def tier_stats(self) -> Dict[str, float]:
        t = self.transfer.poll_stats()
        total = self.host_pool.size
        used = total - self.host_pool.available_size()
        out = {
            "hicache_host_total_tokens": float(total),
            "hicache_host_used_tokens": float(used),
            "hicache_host_usage": used / total if total else 0.0,
            "hicache_host_available_tokens": float(self.host_pool.available_size()),
            "hicache_host_evictable_tokens": float(self._host_evictable_size),
            "hicache_host_protected_tokens": float(self._host_protected_size),
            "hicache_load_back_tokens_total": float(t.loaded_tokens),
            "hicache_load_back_bytes_total": float(t.loaded_bytes),
            "hicache_write_tokens_total": float(t.written_tokens),
            "hicache_write_bytes_total": float(t.written_bytes),
            "hicache_load_back_seconds_total": t.load_time_s,
        }
        if self.storage is not None:
            out.update(self.storage.stats())
        return out

    def _recompute_sizes(self) -> Tuple[int, int]:
        evictable = protected = 0
        for node, _ in self._iter_nodes():
            if node.evicted:
                continue
            if node.lock_ref > 0:
                protected += len(node.key)
            else:
                evictable += len(node.key)
        return evictable, protected

    def _recompute_host_sizes(self) -> Tuple[int, int]:
        evictable = protected = 0
        for node, _ in self._iter_nodes():
            if node.host_value is None:
                continue
            if node.host_ref > 0:
                protected += len(node.host_value)
            else:
                evictable += len(node.host_value)
        return evictable, protected

    def all_values(self) -> torch.Tensor:
        values = [node.value for node, _ in self._iter_nodes() if not node.evicted]
        return torch.cat(values) if values else empty_indices()

    def all_host_values(self) -> torch.Tensor:
        values = [n.host_value for n, _ in self._iter_nodes() if n.host_value is not None]
        return torch.cat(values) if values else empty_indices()

    def pretty_print(self) -> str:
        lines = [
            f"HiRadixCache(page_size={self.page_size}, evictable={self._evictable_size}, "
            f"protected={self._protected_size}, host_evictable={self._host_evictable_size}, "
            f"host_protected={self._host_protected_size})"
        ]
        for node, depth in self._iter_nodes():
            tier = ("D" if not node.evicted else "") + ("H" if node.host_value is not None else "")
            head = node.key[:10]
            more = "..." if len(node.key) > 10 else ""
            lines.append(
                f"{'  ' * (depth + 1)}[{tier}] len={len(node.key)} lock={node.lock_ref} "
                f"host_ref={node.host_ref} key={head}{more}"
            )
        return "\n".join(lines)
