"""The idle self-check: with no request in the system, every KV slot is free, evictable or protected,
and every request row is free. A violation is a leak (or a double free): log it loudly, and under
--strict-memory-check (on in tests) stop the scheduler so the test fails."""

from __future__ import annotations

import logging

logger = logging.getLogger("sglang.scheduler")


class MemoryLeakError(RuntimeError):
    pass


class InvariantChecker:
    def __init__(self, scheduler):
        self.s = scheduler
        self.num_checks = 0
        self._last_ok_state = None

    def state(self) -> tuple:
        s = self.s
        return (
            s.allocator.available_size(),
            s.tree_cache.evictable_size(),
            s.tree_cache.protected_size(),
            s.req_to_token_pool.available_size(),
        )

    def check_idle(self) -> None:
        st = self.state()
        if st == self._last_ok_state:
            return  # nothing moved since the last passing check
        s = self.s
        avail, evictable, protected, free_rows = st
        self.num_checks += 1
        problems = []
        if avail + evictable + protected != s.max_total_num_tokens:
            problems.append(
                f"available {avail} + evictable {evictable} + protected {protected} != total {s.max_total_num_tokens}"
            )
        if protected != 0:
            problems.append(f"protected {protected} != 0 with no running request")
        if free_rows != s.req_to_token_pool.size:
            problems.append(f"free request rows {free_rows} != {s.req_to_token_pool.size}")
        if s.rid_to_req:
            problems.append(f"{len(s.rid_to_req)} request states left: {list(s.rid_to_req)[:4]}")
        if not problems:
            self._last_ok_state = st
            return
        msg = "KV cache memory leak detected! " + "; ".join(problems)
        logger.error(msg)
        if s.server_args.strict_memory_check:
            raise MemoryLeakError(msg)

    def check_busy(self) -> None:
        """Mid-flight: every slot is free, in the tree, or owned by exactly one live request."""
        s = self.s
        ps = s.page_size
        owned = 0
        for r in s.rid_to_req.values():
            if r.req_pool_idx is not None:
                owned += (r.kv_allocated_len + ps - 1) // ps * ps - r.cache_protected_len
        avail, evictable, protected, _ = self.state()
        if avail + evictable + protected + owned != s.max_total_num_tokens:
            holders = [
                (r.rid, r.kv_allocated_len, r.kv_committed_len, r.cache_protected_len)
                for r in s.rid_to_req.values()
                if r.req_pool_idx is not None
            ]
            msg = (
                f"KV accounting broken mid-flight: available {avail} + evictable {evictable} + protected "
                f"{protected} + owned {owned} != total {s.max_total_num_tokens}; holders {holders[:8]}"
            )
            logger.error(msg)
            raise MemoryLeakError(msg)
