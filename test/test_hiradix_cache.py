"""The two-tier radix tree (HiRadixCache) over a real device pool, host pool and copy engine.

Every KV row written holds a code of the token prefix it belongs to, so a copy to the wrong row, a
load of the wrong slots or a slot reused while referenced shows up as a wrong code. The state
machine drives inserts, matches, locks, device and host evictions and load-backs under each write
policy against a model {(extra_key, prefix): (on_device, on_host)}: each operation may change the
model only in the ways it is allowed to, and the accounting is checked exactly after every step.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Set, Tuple

import pytest
import torch
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from sglang.srt.mem_cache.allocator import TokenToKVPoolAllocator
from sglang.srt.mem_cache.hiradix_cache import HiRadixCache
from sglang.srt.mem_cache.host_pool import HostKVPool
from sglang.srt.mem_cache.kv_transfer import KVTransfer
from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool
from sglang.srt.mem_cache.radix_cache import TreeNode

LAYERS = 2
Key = Tuple[Optional[str], Tuple[int, ...]]


def code(extra: Optional[str], prefix: Tuple[int, ...]) -> float:
    """A number that differs for every (extra_key, prefix) the tests build."""
    h = 17.0 if extra is None else 29.0
    for t in prefix:
        h = (h * 31 + t + 1) % 1_000_003
    return h


def make_cache(size: int, host_size: int, threshold: Optional[int], page_size: int = 1):
    dev = MHATokenToKVPool(size, page_size, torch.float32, 1, 2, LAYERS, "cpu")
    host = HostKVPool(host_size, LAYERS, 1, 2, 2, torch.float32, pin_memory=False)
    alloc = TokenToKVPoolAllocator(size)
    cache = HiRadixCache(None, alloc, host, KVTransfer(dev, host), threshold, page_size)
    return cache, dev, host, alloc


def filled_cache(n: int):
    """A write-through cache holding tokens 0..n-1 on the device, their host copies queued."""
    cache, dev, host, alloc = make_cache(16, 32, threshold=1)
    key = list(range(n))
    slots = alloc.alloc(n)
    write_kv(dev, slots.tolist(), None, key, 0)
    cache.insert(key, slots)
    cache.on_batch_launched()
    return cache, dev, host, alloc, key


def write_kv(dev: MHATokenToKVPool, slots: List[int], extra, key: List[int], start: int) -> None:
    """Simulate the forward pass: slot j holds the KV of token start + j."""
    for j, s in enumerate(slots):
        c = code(extra, tuple(key[: start + j + 1]))
        for layer in range(LAYERS):
            dev.k_buffer[layer][s] = c + layer
            dev.v_buffer[layer][s] = -c - layer


def row_ok(pool, slot: int, c: float) -> bool:
    return all(
        float(pool.k_buffer[layer][slot, 0, 0]) == c + layer
        and float(pool.v_buffer[layer][slot, 0, 1]) == -c - layer
        for layer in range(LAYERS)
    )


def node_path(node: TreeNode) -> List[int]:
    parts = []
    while node.parent is not None:
        parts.append(node.key)
        node = node.parent
    return [t for part in reversed(parts) for t in part]


def tiers(cache: HiRadixCache) -> Dict[Key, Tuple[bool, bool]]:
    """{(extra, prefix): (on device, on host)} for every token the tree holds."""
    out: Dict[Key, Tuple[bool, bool]] = {}
    stack = [(c, []) for c in cache.root.children.values()]
    while stack:
        node, prefix = stack.pop()
        for i in range(len(node.key)):
            p = tuple(prefix + node.key[: i + 1])
            out[(node.extra_key, p)] = (not node.evicted, node.host_value is not None)
        stack.extend((c, prefix + node.key) for c in node.children.values())
    return out


def check_structure(cache: HiRadixCache) -> None:
    """Parent links, device prefix-closure, one tier at least, and the two candidate sets."""
    leaves, host_cands = set(), set()
    stack = [cache.root]
    while stack:
        node = stack.pop()
        for k, c in node.children.items():
            assert c.parent is node and cache._node_child_key(c) == k
            assert (not c.evicted) or c.host_value is not None, f"{c} is in no tier"
            if node is not cache.root:
                assert not (node.evicted and not c.evicted), "device node under a host-only node"
            if not c.evicted:
                assert len(c.value) == len(c.key)
            if c.host_value is not None:
                assert len(c.host_value) == len(c.key)
            if c.lock_ref == 0 and not c.evicted and all(g.evicted for g in c.children.values()):
                leaves.add(c)
            if c.host_value is not None and c.host_ref == 0 and (not c.evicted or not c.children):
                host_cands.add(c)
            stack.append(c)
    assert leaves == cache.evictable_leaves
    assert host_cands == cache.host_candidates


# ---------------------------------------------------------------------------- unit tests
def test_evicted_prefix_comes_back_from_host():
    cache, dev, host, alloc = make_cache(16, 32, threshold=1)
    key = list(range(10))
    slots = alloc.alloc(10)
    write_kv(dev, slots.tolist(), None, key, 0)
    assert cache.insert(key, slots) == 0
    cache.on_batch_launched()  # write-through copies queued once the pass is on its way
    assert cache.host_evictable_size() == 10
    assert cache.evict(16) == 10
    assert alloc.available_size() == 16 and cache.evictable_size() == 0
    m = cache.match_prefix(key)
    assert len(m.device_indices) == 0 and m.host_hit_length == 10
    dev_slots, node = cache.load_back(m.last_host_node)
    assert node is m.last_host_node and len(dev_slots) == 10
    for j, s in enumerate(dev_slots.tolist()):
        assert row_ok(dev, s, code(None, tuple(key[: j + 1])))
    m2 = cache.match_prefix(key)
    assert m2.device_indices.tolist() == dev_slots.tolist() and m2.host_hit_length == 0
    assert cache.evictable_size() == 10 and alloc.available_size() == 6
    check_structure(cache)


def test_write_through_selective_copies_on_second_hit():
    cache, dev, _, alloc = make_cache(16, 32, threshold=2)
    key = [1, 2, 3, 4]
    slots = alloc.alloc(4)
    write_kv(dev, slots.tolist(), None, key, 0)
    cache.insert(key, slots)
    assert cache.host_evictable_size() == 0
    again = alloc.alloc(4)
    alloc.free(again[: cache.insert(key, again)])
    assert cache.host_evictable_size() == 4


def test_write_back_copies_only_on_eviction():
    cache, dev, host, alloc = make_cache(8, 16, threshold=None)
    key = [5, 6, 7]
    slots = alloc.alloc(3)
    write_kv(dev, slots.tolist(), None, key, 0)
    cache.insert(key, slots)
    cache.insert(key, slots)
    assert cache.host_evictable_size() == 0
    cache.evict(3)
    assert cache.host_evictable_size() == 3 and cache.evictable_size() == 0
    for j, s in enumerate(cache.match_prefix(key).last_host_node.host_value.tolist()):
        assert row_ok(host, s, code(None, tuple(key[: j + 1])))


def test_without_room_on_host_eviction_deletes():
    cache, dev, _, alloc = make_cache(8, 2, threshold=1)
    key = [1, 2, 3, 4]
    slots = alloc.alloc(4)
    write_kv(dev, slots.tolist(), None, key, 0)
    cache.insert(key, slots)  # the copy needs 4 host slots; only 2 exist
    assert cache.host_evictable_size() == 0
    assert cache.evict(4) == 4
    assert cache.match_prefix(key).host_hit_length == 0 and not cache.root.children


def test_insert_adopts_the_callers_slots_for_host_only_nodes():
    cache, dev, _, alloc, key = filled_cache(6)
    cache.evict(6)
    fresh = alloc.alloc(8)
    write_kv(dev, fresh.tolist(), None, key + [9, 9], 0)
    # Nothing was on the device: the tree takes all eight slots (six adopted, two a new leaf).
    assert cache.insert(key + [9, 9], fresh) == 0
    assert cache.match_prefix(key + [9, 9]).device_indices.tolist() == fresh.tolist()
    assert cache.evictable_size() == 8 and alloc.available_size() == 8
    check_structure(cache)


def test_host_eviction_is_lru_and_spares_the_path_being_copied():
    cache, dev, _, alloc = make_cache(32, 8, threshold=1)
    for key in [[1, 1, 1, 1], [2, 2, 2, 2], [3, 3, 3, 3]]:
        slots = alloc.alloc(4)
        write_kv(dev, slots.tolist(), None, key, 0)
        cache.insert(key, slots)
        cache.on_batch_launched()
    # Host holds 8 tokens: [1]'s copy (oldest) made room for [3]'s.
    assert cache.match_prefix([1, 1, 1, 1]).last_node.host_value is None
    assert cache.match_prefix([3, 3, 3, 3]).last_node.host_value is not None
    assert cache.host_evictable_size() == 8


def test_load_back_without_device_room_returns_none_and_keeps_state():
    cache, dev, _, alloc = make_cache(8, 16, threshold=1)
    a = [1, 2, 3, 4, 5, 6]
    slots = alloc.alloc(6)
    write_kv(dev, slots.tolist(), None, a, 0)
    cache.insert(a, slots)
    cache.on_batch_launched()
    cache.evict(6)
    hold = alloc.alloc(5)  # a running request holds 5 of the 8 slots
    m = cache.match_prefix(a)
    assert cache.load_back(m.last_host_node) is None
    assert cache.match_prefix(a).host_hit_length == 6 and alloc.available_size() == 3
    alloc.free(hold)
    check_structure(cache)


def test_split_of_host_only_and_both_tier_nodes():
    cache, dev, host, alloc, key = filled_cache(8)
    m = cache.match_prefix(key[:3])  # splits a node on both tiers
    assert len(m.device_indices) == 3
    cache.evict(16)
    m = cache.match_prefix(key[:5])  # splits a host-only node
    assert m.host_hit_length == 5
    dev_slots, _ = cache.load_back(m.last_host_node)
    for j, s in enumerate(dev_slots.tolist()):
        assert row_ok(dev, s, code(None, tuple(key[: j + 1])))
    assert cache.match_prefix(key).host_hit_length == 3
    check_structure(cache)


def test_storage_read_released_after_its_node_was_split():
    """A storage write holds a path; a match splits a node on it meanwhile. The release must
    free the upper part too, or the host copies stay protected for ever (an idle leak)."""
    cache, dev, host, alloc, key = filled_cache(8)
    leaf = cache.match_prefix(key).last_host_node
    cache.inc_host_ref_path(leaf)
    assert cache.host_protected_size() == 8
    cache.match_prefix(key[:3])  # splits the held node
    cache.dec_host_ref_path(leaf)
    assert (cache.host_evictable_size(), cache.host_protected_size()) == (8, 0)
    assert cache._recompute_host_sizes() == (8, 0)
    check_structure(cache)


def test_insert_host_attaches_below_the_reached_node_and_returns_overlap():
    cache, dev, host, alloc = make_cache(16, 32, threshold=None)
    key = list(range(8))
    slots = alloc.alloc(4)
    write_kv(dev, slots.tolist(), None, key, 0)
    cache.insert(key[:4], slots)
    hs = host.alloc(6)  # storage read tokens [2, 8): [2, 4) is already cached
    k = cache.insert_host(key, 2, hs, None)
    assert k == 2
    host.free(hs[:k])
    m = cache.match_prefix(key)
    assert len(m.device_indices) == 4 and m.host_hit_length == 4
    assert cache.host_evictable_size() == 4
    # A start the tree no longer reaches takes nothing.
    assert cache.insert_host([9] * 8, 4, host.alloc(4), None) == 4
    check_structure(cache)


# ---------------------------------------------------------------------------- the state machine
class HiTreeMachine(RuleBasedStateMachine):
    SIZE = 40
    HOST = 48
    THRESHOLD: Optional[int] = 1

    def __init__(self):
        super().__init__()
        self.cache, self.dev, self.host, self.alloc = make_cache(
            self.SIZE, self.HOST, self.THRESHOLD
        )
        self.model: Dict[Key, Tuple[bool, bool]] = {}
        self.locks: List[Tuple[TreeNode, Key]] = []
        self.reads: List[Tuple[TreeNode, Key]] = []  # paths held as a storage write holds them

    keys = st.lists(st.integers(0, 2), min_size=1, max_size=12)
    extras = st.sampled_from([None, "a"])

    # -- helpers
    def locked(self) -> Set[Key]:
        return self._prefixes(self.locks)

    def read(self) -> Set[Key]:
        return self._prefixes(self.reads)

    @staticmethod
    def _prefixes(held: List[Tuple[TreeNode, Key]]) -> Set[Key]:
        out = set()
        for _, (extra, path) in held:
            out.update((extra, path[: i + 1]) for i in range(len(path)))
        return out

    def observe(self, allowed: Set[str]) -> Dict[str, int]:
        """Compare the tree with the model; every change must be of an allowed kind. Returns the
        count of each kind of change, and takes the tree as the new model."""
        after = tiers(self.cache)
        counts: Dict[str, int] = {}
        for k in set(self.model) | set(after):
            b, a = self.model.get(k), after.get(k)
            if b == a:
                continue
            if b is None:
                kind = {(True, False): "add_device", (True, True): "add_device+backup"}.get(
                    a, "add_host"
                )
            elif a is None:
                kind = "drop"
            elif b[0] != a[0]:
                kind = "load" if a[0] else "device_evict"
                if b[1] != a[1]:
                    kind += "+" + ("backup" if a[1] else "host_evict")
            else:
                kind = "backup" if a[1] else "host_evict"
            assert kind in allowed, f"{kind} at {k}: {b} -> {a}"
            counts[kind] = counts.get(kind, 0) + 1
            if b is not None and b[0] and not (a is not None and a[0]):
                counts["lost_device"] = counts.get("lost_device", 0) + 1
        assert self.locked() <= {k for k, v in after.items() if v[0]}, "a locked prefix left"
        read_copies = {k for k in self.read() if self.model.get(k, (0, 0))[1]}
        assert read_copies <= {k for k, v in after.items() if v[1]}, "a read host copy left"
        self.model = after
        return counts

    def alloc_slots(self, n: int) -> Optional[torch.Tensor]:
        if self.alloc.available_size() < n:
            self.cache.evict(n - self.alloc.available_size())
        return self.alloc.alloc(n)

    # -- rules
    @rule(key=keys, extra=extras)
    def insert(self, key, extra):
        on_device = self.cache.match_prefix(key, extra).device_indices
        slots = self.alloc_slots(len(key))
        if slots is None:
            return
        self.observe({"device_evict", "device_evict+backup", "drop", "host_evict", "backup"})
        write_kv(self.dev, slots.tolist(), extra, key, 0)
        present = self.cache.insert(key, slots, extra_key=extra)
        assert present == len(on_device)
        self.alloc.free(slots[:present])
        self.cache.on_batch_launched()
        counts = self.observe(
            {"add_device", "add_device+backup", "load", "backup", "host_evict", "drop"}
        )
        for i in range(len(key)):
            assert self.model[(extra, tuple(key[: i + 1]))][0]
        if self.THRESHOLD is None:
            assert "backup" not in counts and "add_device+backup" not in counts

    @rule(key=keys, extra=extras, lock=st.booleans())
    def match(self, key, extra, lock):
        m = self.cache.match_prefix(key, extra)
        n_dev = 0
        while n_dev < len(key) and self.model.get((extra, tuple(key[: n_dev + 1])), (0,))[0]:
            n_dev += 1
        n_host = n_dev
        while n_host < len(key) and (extra, tuple(key[: n_host + 1])) in self.model:
            n_host += 1
        assert len(m.device_indices) == n_dev and m.host_hit_length == n_host - n_dev
        for j, s in enumerate(m.device_indices.tolist()):
            assert row_ok(self.dev, s, code(extra, tuple(key[: j + 1])))
        assert node_path(m.last_node) == key[:n_dev]
        assert node_path(m.last_host_node) == key[:n_host]
        self.observe(set())
        if lock:
            self.cache.inc_lock_ref(m.last_node)
            self.locks.append((m.last_node, (extra, tuple(key[:n_dev]))))

    @rule(key=keys, extra=extras)
    def load(self, key, extra):
        m = self.cache.match_prefix(key, extra)
        if not m.host_hit_length:
            return
        before = self.alloc.available_size()
        res = self.cache.load_back(m.last_host_node)
        counts = self.observe(
            {"load", "device_evict", "device_evict+backup", "drop", "host_evict", "backup"}
        )
        if res is None:
            assert counts.get("load", 0) == 0
            return
        slots, _ = res
        assert counts["load"] == m.host_hit_length == len(slots)
        assert before - self.alloc.available_size() <= len(slots)
        for j, s in enumerate(slots.tolist()):
            c = code(extra, tuple(key[: len(m.device_indices) + j + 1]))
            assert row_ok(self.dev, s, c)

    @precondition(lambda self: self.locks)
    @rule(data=st.data())
    def unlock(self, data):
        node, _ = self.locks.pop(data.draw(st.integers(0, len(self.locks) - 1)))
        self.cache.dec_lock_ref(node)
        self.observe(set())

    @rule(key=keys, extra=extras)
    def hold_for_storage(self, key, extra):
        """A storage write holds the path to a node with a host copy (its ancestors may still be
        device-only: the write covers only the blocks whose rows are all on the host)."""
        m = self.cache.match_prefix(key, extra)
        self.observe(set())
        n = len(m.device_indices) + m.host_hit_length
        if n and m.last_host_node.host_value is not None:
            self.cache.inc_host_ref_path(m.last_host_node)
            self.reads.append((m.last_host_node, (extra, tuple(key[:n]))))

    @precondition(lambda self: self.reads)
    @rule(data=st.data())
    def storage_written(self, data):
        node, _ = self.reads.pop(data.draw(st.integers(0, len(self.reads) - 1)))
        self.cache.dec_host_ref_path(node)
        self.observe(set())

    @rule(n=st.integers(0, 45))
    def evict(self, n):
        evictable = self.cache.evictable_size()
        freed = self.cache.evict(n)
        counts = self.observe(
            {"device_evict", "device_evict+backup", "drop", "host_evict", "backup"}
        )
        assert freed == counts.get("lost_device", 0)
        assert freed >= min(n, evictable) or self.cache.evictable_size() == 0 or self._pinned()

    def _pinned(self) -> bool:
        # A device leaf with host-only children and no host room is kept (see evict).
        return any(c.children for c in self.cache.evictable_leaves)

    @rule(n=st.integers(0, 50))
    def evict_host(self, n):
        avail = self.cache.host_evictable_size()
        freed = self.cache.evict_host(n)
        counts = self.observe({"host_evict", "drop"})
        assert freed == counts.get("host_evict", 0) + counts.get("drop", 0)
        assert freed >= min(n, avail) or not self.cache.host_candidates

    # -- invariants
    @invariant()
    def accounting(self):
        cache = self.cache
        queued = [w.host_idx for w in cache._ready_writes + cache._unready_writes]
        held = set(cache.all_host_values().tolist())
        assert not queued or set(torch.cat(queued).tolist()) <= held, "a copy into a freed slot"
        cache.poll()  # issue queued copies, as the scheduler does every pass
        check_structure(cache)
        assert tiers(cache) == self.model
        on_dev = sum(1 for v in self.model.values() if v[0])
        on_host = sum(1 for v in self.model.values() if v[1])
        assert cache.protected_size() == len(self.locked())
        assert cache.evictable_size() + cache.protected_size() == on_dev
        assert self.alloc.available_size() + on_dev == self.SIZE
        read_copies = sum(1 for k in self.read() if self.model[k][1])
        assert cache.host_protected_size() == read_copies
        assert cache.host_evictable_size() + read_copies == on_host
        assert cache._recompute_host_sizes() == (
            cache.host_evictable_size(),
            cache.host_protected_size(),
        )
        assert self.host.available_size() + on_host == self.HOST
        assert cache._recompute_sizes() == (cache.evictable_size(), cache.protected_size())
        dev_slots = cache.all_values().tolist()
        host_slots = cache.all_host_values().tolist()
        assert len(set(dev_slots)) == len(dev_slots) and len(set(host_slots)) == len(host_slots)
        assert not set(dev_slots) & set(self.alloc.free_slots.tolist())
        # Host copies hold the right KV once their copies have run.
        stack = [(c, []) for c in cache.root.children.values()]
        while stack:
            node, prefix = stack.pop()
            if node.host_value is not None:
                for j, s in enumerate(node.host_value.tolist()):
                    assert row_ok(
                        self.host, s, code(node.extra_key, tuple(prefix + node.key[: j + 1]))
                    )
            stack.extend((c, prefix + node.key) for c in node.children.values())


class SelectiveMachine(HiTreeMachine):
    THRESHOLD = 2


class WriteBackMachine(HiTreeMachine):
    THRESHOLD = None


class SmallHostMachine(HiTreeMachine):
    HOST = 12


class WriteBackSmallHostMachine(HiTreeMachine):
    THRESHOLD = None
    HOST = 10


_settings = settings(
    max_examples=80,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
for _m in (
    HiTreeMachine,
    SelectiveMachine,
    WriteBackMachine,
    SmallHostMachine,
    WriteBackSmallHostMachine,
):
    _m.TestCase.settings = _settings
TestWriteThrough = HiTreeMachine.TestCase
TestWriteThroughSelective = SelectiveMachine.TestCase
TestWriteBack = WriteBackMachine.TestCase
TestSmallHost = SmallHostMachine.TestCase
TestWriteBackSmallHost = WriteBackSmallHostMachine.TestCase


@pytest.mark.parametrize("threshold", [1, 2, None])
def test_reset_clears_both_tiers(threshold):
    cache, dev, host, alloc = make_cache(16, 16, threshold)
    slots = alloc.alloc(5)
    write_kv(dev, slots.tolist(), None, [1, 2, 3, 4, 5], 0)
    cache.insert([1, 2, 3, 4, 5], slots)
    cache.evict(5)
    cache.reset()
    alloc.clear()
    assert host.available_size() == 16 and cache.host_evictable_size() == 0
    assert not cache.root.children and not cache.host_candidates and not cache.evictable_leaves
