"""Simulated acceptance for benchmarks: SGLang's SGLANG_SIMULATE_ACC_LEN / _METHOD.

With SGLANG_SIMULATE_ACC_LEN=A set, every verify pass accepts a number of drafts chosen here
instead of the target's verdict, so that a step emits A tokens per request on average (the
accepted drafts plus the token drawn after them); the emitted tokens are the real drafts
(SGLang's token mode real-draft-token). The server then costs what it would at that acceptance
with any draft model, dummy weights included, and its outputs are not the target's: a benchmark
knob, logged loudly at startup.

SGLANG_SIMULATE_ACC_METHOD:
- multinomial (default): each request accepts floor(A - 1) or one more, drawn with the
  probability that makes the mean A - 1;
- match-expected: no randomness; a running remainder over the requests of every pass keeps the
  accepted drafts at (A - 1) per request and verify as closely as whole numbers can.
Each count is clamped to the request's drafts in that pass.
"""

from __future__ import annotations

import math
import os
import random
from dataclasses import dataclass, field
from typing import List, Optional

METHODS = ("multinomial", "match-expected")


@dataclass
class SimulatedAcceptance:
    accept_len: float  # tokens per verify, accepted drafts + 1
    method: str = "multinomial"
    seed: int = 0
    _rng: random.Random = field(init=False, repr=False)
    _carry: float = field(default=0.0, init=False, repr=False)

    def __post_init__(self) -> None:
        if not (math.isfinite(self.accept_len) and self.accept_len >= 1.0):
            raise ValueError(f"SGLANG_SIMULATE_ACC_LEN must be >= 1, got {self.accept_len}")
        if self.method not in METHODS:
            raise ValueError(f"SGLANG_SIMULATE_ACC_METHOD must be one of {METHODS}")
        self._rng = random.Random(self.seed)

    @classmethod
    def from_env(cls) -> Optional["SimulatedAcceptance"]:
        raw = os.environ.get("SGLANG_SIMULATE_ACC_LEN", "")
        if raw in ("", "-1"):
            return None
        method = os.environ.get("SGLANG_SIMULATE_ACC_METHOD", "multinomial")
        return cls(float(raw), method)

    def counts(self, num_drafts: List[int]) -> List[int]:
        """Drafts to accept per request of one verify pass."""
        want = self.accept_len - 1.0
        out = []
        for k in num_drafts:
            if self.method == "multinomial":
                base = math.floor(want)
                n = base + (self._rng.random() < want - base)
            else:
                self._carry += want
                n = math.floor(self._carry + 1e-9)
                self._carry -= n
            out.append(max(0, min(int(n), k)))
        return out
