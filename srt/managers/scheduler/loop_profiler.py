"""Where the scheduler loop's time goes (SGLANG_LOOP_PROFILE=1): receive, build, launch, waiting for
the device, processing results. Printed once each time the scheduler goes idle after work."""

from __future__ import annotations

import os
import sys
import time
from collections import defaultdict
from contextlib import contextmanager


class LoopProfiler:
    def __init__(self) -> None:
        self.enabled = os.environ.get("SGLANG_LOOP_PROFILE", "0") == "1"
        self.reset()

    def reset(self) -> None:
        self.t = defaultdict(float)
        self.n = defaultdict(int)
        self.start = time.perf_counter()

    @contextmanager
    def phase(self, name: str):
        if not self.enabled:
            yield
            return
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.t[name] += time.perf_counter() - t0
            self.n[name] += 1

    def count(self, name: str, k: int = 1) -> None:
        if self.enabled:
            self.n[name] += k

    def report_if_busy(self) -> None:
        """Print and reset, if a pass was launched since the last report (idle polling is not)."""
        if not self.enabled:
            return
        if not self.n.get("launch"):
            self.reset()  # the idle spell's polling is not part of the next busy one
            return
        wall = time.perf_counter() - self.start
        parts = ", ".join(f"{k} {v * 1e3:.0f} ms/{self.n[k]}" for k, v in sorted(self.t.items()))
        counts = ", ".join(f"{k} {v}" for k, v in sorted(self.n.items()) if k not in self.t)
        # Printed, not logged: it is asked for explicitly, whatever the log level.
        print(f"loop profile over {wall:.2f} s: {parts}; {counts}", file=sys.stderr, flush=True)
        self.reset()
