"""Priority order of requests (--enable-priority-scheduling), the one comparison every part uses."""

from __future__ import annotations

from typing import Iterable, Tuple

from sglang.srt.core.req import Req


class PriorityOrder:
    """Lower sort key = served first. By default larger priority values are preferred;
    --schedule-low-priority-values-first flips that. Ties go to the request that queued first."""

    def __init__(self, low_values_first: bool):
        self.sign = 1 if low_values_first else -1

    def key(self, req: Req) -> Tuple[int, float]:
        return ((req.priority or 0) * self.sign, req.wait_queue_entry_time)

    def margin(self, a: Req, b: Req) -> int:
        """How far `a` is preferred over `b` in priority levels (negative: b is preferred)."""
        return ((b.priority or 0) - (a.priority or 0)) * self.sign

    def least_preferred(self, reqs: Iterable[Req]) -> Req:
        return max(reqs, key=self.key)
