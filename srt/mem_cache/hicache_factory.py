"""Builds the hierarchical cache from its config section: host pool, copy engine, tree, storage."""

from __future__ import annotations

import logging
from typing import Any

from sglang.srt.configs.sections import HiCacheSection
from sglang.srt.mem_cache.hiradix_cache import HiRadixCache
from sglang.srt.mem_cache.host_pool import GB, HostKVPool, host_pool_tokens
from sglang.srt.mem_cache.kv_transfer import KVTransfer
from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool

logger = logging.getLogger(__name__)


def make_hiradix_cache(
    section: HiCacheSection,
    req_to_token_pool: Any,
    allocator: Any,
    device_pool: Any,
    device_tokens: int,
    page_size: int,
    eviction_policy: str,
    model_fingerprint: str,
) -> HiRadixCache:
    d = device_pool
    per_token = MHATokenToKVPool.bytes_per_token(
        d.head_num, d.head_dim, d.layer_num, d.dtype, d.v_head_dim
    )
    host = HostKVPool.like(device_pool, host_pool_tokens(section, device_tokens, per_token))
    transfer = KVTransfer(device_pool, host, section.io_backend)
    tree = HiRadixCache(
        req_to_token_pool,
        allocator,
        host,
        transfer,
        section.write_through_threshold,
        page_size=page_size,
        eviction_policy=eviction_policy,
    )
    if section.storage_backend is not None:
        from sglang.srt.mem_cache.hicache_storage import make_storage_tier

        tree.storage = make_storage_tier(section, tree, model_fingerprint)
    logger.info(
        "HiCache: host pool %d tokens (%.2f GB%s), write policy %s, io backend %s%s",
        host.size,
        host.size * per_token / GB,
        ", pinned" if host.pinned else "",
        section.write_policy,
        transfer.io_backend,
        f", storage {section.storage_backend} at {section.storage_dir}"
        if section.storage_backend
        else "",
    )
    return tree
