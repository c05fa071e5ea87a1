"""Eviction order of the radix tree's unlocked leaves: each policy maps a node to a sort key.

The leaf with the smallest key is evicted first. Keys only read node fields, so the tree can
build its heap without knowing which policy is in use.
"""

from __future__ import annotations

from typing import Any, Callable, Dict

EvictionKey = Callable[[Any], Any]


def _lru(node: Any) -> Any:
    return node.last_access_time


def _lfu(node: Any) -> Any:
    # Ties between equally used leaves fall back to recency.
    return (node.hit_count, node.last_access_time)


def _fifo(node: Any) -> Any:
    return node.creation_time


def _mru(node: Any) -> Any:
    return -node.last_access_time


def _filo(node: Any) -> Any:
    return -node.creation_time


def _priority(node: Any) -> Any:
    # Low-priority prefixes go first; among equals, the least recently used.
    return (node.priority, node.last_access_time)


POLICIES: Dict[str, EvictionKey] = {
    "lru": _lru,
    "lfu": _lfu,
    "fifo": _fifo,
    "mru": _mru,
    "filo": _filo,
    "priority": _priority,
}


def get_eviction_key(policy: str) -> EvictionKey:
    try:
        return POLICIES[policy.lower()]
    except KeyError:
        raise ValueError(
            f"unknown eviction policy {policy!r}; choose one of {sorted(POLICIES)}"
        ) from None
