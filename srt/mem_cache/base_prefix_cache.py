"""The prefix-cache interface the scheduler talks to (RadixCache, or ChunkCache when sharing is off).

Ownership rule shared by every implementation: slots handed to `insert` become the cache's; the
cache gives them back to the allocator only through eviction. A request keeps owning the slots of
its row past `req.cache_protected_len`, except where `cache_*_req` says it frees them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, List, Optional

import torch

if TYPE_CHECKING:
    from sglang.srt.core.req import Req


@dataclass
class MatchResult:
    """The longest cached prefix of a key.

    device_indices: KV slots of the matched tokens (int64, CPU), in token order.
    last_node: the deepest tree node of the match on the device (the root when nothing matched);
        lock it with inc_lock_ref to keep the prefix from being evicted while a request uses it.
    last_host_node / host_hit_length: with a host tier (HiCache), the match goes on through nodes
        whose KV is in host memory only: host_hit_length more tokens, ending at last_host_node.
    """

    device_indices: torch.Tensor
    last_node: Any
    last_host_node: Any = None
    host_hit_length: int = 0


def empty_indices() -> torch.Tensor:
    return torch.empty(0, dtype=torch.int64)


class BasePrefixCache(ABC):
    page_size: int = 1
    disable: bool = False

    @abstractmethod
    def reset(self) -> None:
        """Forget every cached prefix (the allocator is left alone)."""

    @abstractmethod
    def match_prefix(self, key: List[int], extra_key: Optional[str] = None) -> MatchResult: ...

    def cached_continuation(self, node: Any, extra_key: Optional[str], limit: int) -> List[int]:
        """Up to `limit` tokens the cache holds right after `node`, along the most recently used
        path (what an earlier prompt went on with where this one left the cache)."""
        return []

    @abstractmethod
    def insert(
        self,
        key: List[int],
        value: torch.Tensor,
        extra_key: Optional[str] = None,
        priority: Optional[int] = None,
        chunked: bool = False,
    ) -> int:
        """Cache `value` for `key`; returns how many leading tokens were already cached."""

    @abstractmethod
    def evict(self, num_tokens: int) -> int:
        """Free at least `num_tokens` unlocked cached tokens if possible; returns the number freed."""

    @abstractmethod
    def inc_lock_ref(self, node: Any) -> int:
        """Protect the path ending at `node`; returns the change in evictable_size()."""

    @abstractmethod
    def dec_lock_ref(self, node: Any) -> int:
        """Undo one inc_lock_ref; returns the change in evictable_size()."""

    @abstractmethod
    def evictable_size(self) -> int: ...

    @abstractmethod
    def protected_size(self) -> int: ...

    def total_size(self) -> int:
        return self.evictable_size() + self.protected_size()

    @abstractmethod
    def cache_finished_req(self, req: "Req", is_insert: bool = True) -> None: ...

    @abstractmethod
    def cache_unfinished_req(self, req: "Req", chunked: bool = False) -> None: ...

    @abstractmethod
    def pretty_print(self) -> str: ...

    # Hooks of a cache with lower tiers (HiCache); a one-tier cache has nothing to do.
    def on_batch_launched(self) -> None:  # noqa: B027 - optional hook
        """A forward pass was queued: KV inserted while building it is now on its way."""

    def poll(self) -> None:  # noqa: B027 - optional hook
        """Once per scheduler pass: collect finished background work."""

    def busy(self) -> bool:
        """Background work in flight (the idle check waits for it)."""
        return False

    def prefetch(self, req: "Req") -> None:  # noqa: B027 - optional hook
        """A request was queued: start reading its prompt's KV from a lower tier (storage)."""

    def prefetch_ready(self, req: "Req") -> bool:
        """May the request be admitted, or does it wait for its prefetch?"""
        return True

    def drop_prefetch(self, req: "Req") -> None:  # noqa: B027 - optional hook
        """The request left the queue unadmitted: abandon its prefetch."""

    def tier_stats(self) -> Dict[str, float]:
        """Numbers of the lower tiers (host pool use, bytes moved); empty for a one-tier cache."""
        return {}
