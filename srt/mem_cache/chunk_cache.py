"""ChunkCache: the prefix cache for --disable-radix-cache. Nothing is shared or kept.

A request owns every slot of its row; between prefill chunks it simply carries its own slots
forward as its "prefix", and on finish (or retraction) they all go back to the allocator.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, List, Optional

import torch

from sglang.srt.mem_cache.base_prefix_cache import BasePrefixCache, MatchResult, empty_indices
from sglang.srt.mem_cache.radix_cache import TreeNode

if TYPE_CHECKING:
    from sglang.srt.core.req import Req


class ChunkCache(BasePrefixCache):
    def __init__(
        self,
        req_to_token_pool: Any,
        token_to_kv_pool_allocator: Any,
        page_size: int = 1,
        disable: bool = True,
        eviction_policy: str = "lru",
    ):
        # disable / eviction_policy are accepted only so both caches construct alike; nothing is kept.
        self.req_to_token_pool = req_to_token_pool
        self.token_to_kv_pool_allocator = token_to_kv_pool_allocator
        self.page_size = page_size
        self.disable = True
        # Requests still get a last_node so scheduler code need not special-case this cache.
        self.root = TreeNode()
        self.root.lock_ref = 1

    def reset(self) -> None:
        pass

    def match_prefix(self, key: List[int], extra_key: Optional[str] = None) -> MatchResult:
        return MatchResult(empty_indices(), self.root)

    def insert(
        self,
        key: List[int],
        value: Optional[torch.Tensor] = None,
        extra_key: Optional[str] = None,
        priority: Optional[int] = None,
        chunked: bool = False,
    ) -> int:
        return 0

    def evict(self, num_tokens: int) -> int:
        return 0

    def inc_lock_ref(self, node: Any) -> int:
        return 0

    def dec_lock_ref(self, node: Any) -> int:
        return 0

    def evictable_size(self) -> int:
        return 0

    def protected_size(self) -> int:
        return 0

    def cache_finished_req(self, req: "Req", is_insert: bool = True) -> None:
        kv = self.req_to_token_pool.read(req.req_pool_idx, 0, req.kv_committed_len)
        if kv.numel():
            self.token_to_kv_pool_allocator.free(kv)
        req.last_node = None
        req.cache_protected_len = 0
        req.prefix_indices = empty_indices()

    def cache_unfinished_req(self, req: "Req", chunked: bool = False) -> None:
        # The next chunk attends over these slots; they stay the request's own.
        req.prefix_indices = self.req_to_token_pool.read(req.req_pool_idx, 0, len(req.fill_ids))

    def pretty_print(self) -> str:
        return "ChunkCache(no prefix sharing)"
