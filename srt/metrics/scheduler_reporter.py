"""The scheduler side of /metrics: pushes a snapshot of its gauges to the HTTP process.

Pushes are rate-limited (at most one per `min_interval` seconds on the busy path) because the step
loop must stay cheap; an idle transition always pushes when something changed, so a scraper (or a
test) sees the final values once the server drains. Only TP rank 0 has the socket.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Dict, Optional

import zmq

from sglang.srt.managers.io_struct import SchedulerMetrics
from sglang.srt.utils.ipc import send_obj

logger = logging.getLogger(__name__)

DEFAULT_MIN_INTERVAL_S = 0.5


def scheduler_snapshot(s: Any) -> Dict[str, float]:
    """The values behind names.SCHEDULER_METRICS, read from a Scheduler (or anything shaped like one)."""
    total = s.max_total_num_tokens
    used = total - s.allocator.available_size() - s.tree_cache.evictable_size()
    return {
        "num_running_reqs": float(s.running_batch.batch_size()),
        "num_queue_reqs": float(len(s.waiting_queue)),
        "num_used_tokens": float(used),
        "token_usage": used / total if total else 0.0,
        "cache_hit_rate": float(s.cache_hit_rate()),
        "gen_throughput": float(s.last_gen_throughput),
        "new_token_ratio": float(s.new_token_ratio),
        "num_retracted_reqs": float(sum(1 for r in s.waiting_queue if r.is_retracted)),
        "num_retracted_requests_total": float(s.num_retracted_total),
        "max_total_num_tokens": float(total),
    }


class SchedulerMetricsReporter:
    def __init__(
        self, scheduler: Any, sock: zmq.Socket, serializer: str = "pickle", min_interval: float = DEFAULT_MIN_INTERVAL_S
    ):
        self.scheduler = scheduler
        self.sock = sock
        self.serializer = serializer
        self.min_interval = min_interval
        self._last_push = float("-inf")
        self._last_values: Optional[Dict[str, float]] = None
        self.num_pushes = 0

    # ------------------------------------------------------------------ hooks (scheduler_stats)
    def on_prefill(self, new_tokens: int, cached_tokens: int) -> None:
        self._maybe_push()

    def on_forward(self, scheduler: Any) -> None:
        self._maybe_push()

    def on_decode_log(self, scheduler: Any) -> None:
        self._maybe_push()

    def on_retract(self, n: int) -> None:
        # Rare and worth seeing at once: not rate-limited.
        self._push(scheduler_snapshot(self.scheduler))

    def on_idle(self, scheduler: Any) -> None:
        # Called on every idle loop pass (each idle poll); push only when the numbers changed.
        values = scheduler_snapshot(self.scheduler)
        if values != self._last_values:
            self._push(values)

    # ------------------------------------------------------------------ sending
    def _maybe_push(self) -> None:
        if time.monotonic() - self._last_push >= self.min_interval:
            self._push(scheduler_snapshot(self.scheduler))

    def _push(self, values: Dict[str, float]) -> None:
        self._last_push = time.monotonic()
        self._last_values = values
        try:
            # Never block the step loop on the frontend: metrics are best-effort.
            send_obj(self.sock, SchedulerMetrics(values), self.serializer, flags=zmq.NOBLOCK)
            self.num_pushes += 1
        except zmq.Again:
            logger.debug("metrics push dropped: the HTTP process is not reading")
