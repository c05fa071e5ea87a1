"""Messages the data-parallel controller receives (from each replica's scheduler)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class DPLoad:
    """A replica's load, for total_tokens balancing."""

    dp_rank: int
    used_tokens: int
    num_reqs: int
