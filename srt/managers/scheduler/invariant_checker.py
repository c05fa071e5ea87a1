"""The idle self-check: with no request in the system, every KV slot is free, evictable or protected,
and every request row is free. A violation is a leak (or a double free): log it loudly, and under
--strict-memory-check (on in tests) stop the scheduler so the test fails."""

from __future__ import annotations

import logging
from typing import List, Optional

from sglang.srt.managers.scheduler.scheduler_state import KVPools, SchedulerState

logger = logging.getLogger("sglang.scheduler")


class MemoryLeakError(RuntimeError):
    pass


class InvariantChecker:
    def __init__(self, pools: KVPools, state: SchedulerState, strict: bool):
        self.pools = pools
        self.state = state
        self.strict = strict
        self.num_checks = 0
        self._last_ok_state = None

    def pool_state(self) -> tuple:
        p = self.pools
        host = getattr(p.tree_cache, "host_accounting", None)
        return (
            p.allocator.available_size(),
            p.tree_cache.evictable_size(),
            p.tree_cache.protected_size(),
            p.req_to_token_pool.available_size(),
            host() if host is not None else None,
        )

    @staticmethod
    def host_problems(host: Optional[tuple], idle: bool) -> List[str]:
        """The host pool (HiCache): every slot free, a copy in the tree, or read by storage."""
        if host is None:
            return []
        avail, evictable, protected, owned, total = host
        out = []
        if avail + evictable + protected + owned != total:
            out.append(
                f"host available {avail} + evictable {evictable} + protected {protected} + "
                f"in flight {owned} != host total {total}"
            )
        if idle and (protected or owned):
            out.append(f"host protected {protected} / in flight {owned} != 0 while idle")
        return out

    def check_idle(self) -> None:
        st = self.pool_state()
        if st == self._last_ok_state:
            return  # nothing moved since the last passing check
        p, total = self.pools, self.pools.max_total_num_tokens
        avail, evictable, protected, free_rows, host = st
        self.num_checks += 1
        problems = self.host_problems(host, idle=True)
        if avail + evictable + protected != total:
            problems.append(
                f"available {avail} + evictable {evictable} + protected {protected} != total {total}"
            )
        if protected != 0:
            problems.append(f"protected {protected} != 0 with no running request")
        if free_rows != p.req_to_token_pool.size:
            problems.append(f"free request rows {free_rows} != {p.req_to_token_pool.size}")
        if self.state.rid_to_req:
            left = self.state.rid_to_req
            problems.append(f"{len(left)} request states left: {list(left)[:4]}")
        if not problems:
            self._last_ok_state = st
            return
        msg = "KV cache memory leak detected! " + "; ".join(problems)
        logger.error(msg)
        if self.strict:
            raise MemoryLeakError(msg)

    def check_busy(self) -> None:
        """Mid-flight: every slot is free, in the tree, or owned by exactly one live request."""
        total, ps = self.pools.max_total_num_tokens, self.pools.page_size
        owned = 0
        for r in self.state.rid_to_req.values():
            if r.req_pool_idx is not None:
                owned += (r.kv_allocated_len + ps - 1) // ps * ps - r.cache_protected_len
        avail, evictable, protected, _, host = self.pool_state()
        host_problems = self.host_problems(host, idle=False)
        if host_problems:
            msg = "HiCache host accounting broken mid-flight: " + "; ".join(host_problems)
            logger.error(msg)
            raise MemoryLeakError(msg)
        if avail + evictable + protected + owned != total:
            holders = [
                (r.rid, r.kv_allocated_len, r.kv_committed_len, r.cache_protected_len)
                for r in self.state.rid_to_req.values()
                if r.req_pool_idx is not None
            ]
            msg = (
                f"KV accounting broken mid-flight: available {avail} + evictable {evictable} + protected "
                f"{protected} + owned {owned} != total {total}; holders {holders[:8]}"
            )
            logger.error(msg)
            raise MemoryLeakError(msg)
