"""Where a prompt left the prefix cache: the scheduler's finding, sent once per request.

The HTTP side turns it into text (prompt_break in meta_info) with the request's own token ids, so
only the position, the reason and the few token ids the cache held instead cross the wire.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import List


class BreakCause(str, Enum):
    DIVERGED = "diverged"  # the cache holds other tokens at this position
    CACHE_END = "cache_end"  # the cached path stops here: nothing like this prompt went further
    RECOMPUTE = "recompute"  # the rest is computed anyway (the last prompt token, input logprobs)
    NO_CACHE = "no_cache"  # prefix sharing is off (--disable-radix-cache)


@dataclass
class PromptBreak:
    position: int  # prompt tokens served from the cache; the first token that was not
    cause: str  # a BreakCause value (plain str on the wire)
    cached_next: List[int] = field(default_factory=list)  # what the cache held from `position`
