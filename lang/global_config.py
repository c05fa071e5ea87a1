"""Process-wide settings of the frontend language (one mutable object, read at call time)."""

from __future__ import annotations

from typing import Any, Optional


class GlobalConfig:
    def __init__(self) -> None:
        # Backend used by SglFunction.run / run_batch when none is passed.
        self.default_backend: Optional[Any] = None
        # run_batch traces the program once to find a constant prompt prefix shared by every call
        # and sends it ahead as a prefill-only request, so the batch starts with a radix-cache hit.
        self.enable_precache_with_tracing: bool = True
        # Below this many characters the extra request costs more than the prefill it saves.
        self.precache_min_chars: int = 64
        # run_batch(num_threads="auto") uses max(this, 16 * cpus) threads (capped by the batch size):
        # program threads mostly wait on the server, so far more threads than cores pay off.
        self.min_auto_threads: int = 96


global_config = GlobalConfig()
