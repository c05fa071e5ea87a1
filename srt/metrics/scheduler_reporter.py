"""The scheduler side of /metrics: pushes a snapshot of its gauges to the HTTP process.

Pushes are rate-limited (at most one per `min_interval` seconds on the busy path) because the step
loop must stay cheap; an idle transition always pushes when something changed, so a scraper (or a
test) sees the final values once the server drains. Only TP rank 0 has the socket.
"""

from __future__ import annotations

import logging
import time
from typing import Callable, Dict, Optional

import zmq

from sglang.srt.core.io_struct.ipc import send_obj
from sglang.srt.core.io_struct.to_tokenizer import SchedulerMetrics

logger = logging.getLogger(__name__)

DEFAULT_MIN_INTERVAL_S = 0.5


class SchedulerMetricsReporter:
    """Pushes the scheduler's gauges (read through `snapshot`) to the HTTP process."""

    def __init__(
        self,
        snapshot: Callable[[], Dict[str, float]],
        sock: zmq.Socket,
        serializer: str = "pickle",
        min_interval: float = DEFAULT_MIN_INTERVAL_S,
    ):
        self.snapshot = snapshot
        self.sock = sock
        self.serializer = serializer
        self.min_interval = min_interval
        self._last_push = float("-inf")
        self._last_values: Optional[Dict[str, float]] = None
        self.num_pushes = 0

    def maybe_push(self) -> None:
        """At most once per min_interval (called on every pass)."""
        if time.monotonic() - self._last_push >= self.min_interval:
            self._push(self.snapshot())

    def push_now(self) -> None:
        self._push(self.snapshot())

    def push_if_changed(self) -> None:
        """Called on every idle loop pass (each idle poll); pushes only when the numbers changed."""
        values = self.snapshot()
        if values != self._last_values:
            self._push(values)

    # ------------------------------------------------------------------ sending
    def _push(self, values: Dict[str, float]) -> None:
        self._last_push = time.monotonic()
        self._last_values = values
        try:
            # Never block the step loop on the frontend: metrics are best-effort.
            send_obj(self.sock, SchedulerMetrics(values), self.serializer, flags=zmq.NOBLOCK)
            self.num_pushes += 1
        except zmq.Again:
            logger.debug("metrics push dropped: the HTTP process is not reading")
