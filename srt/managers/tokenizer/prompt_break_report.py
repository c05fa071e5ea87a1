"""The scheduler's PromptBreak as a client reads it: the break position with the prompt's text
around it, and the text the cache held there instead.

Seeing "...Request id: |7710. You are..." against a cached "4821. You are..." says at once that a
changing value near the start of the prompt is what throws the cache away.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional

from sglang.srt.core.prompt_break import PromptBreak

# Prompt tokens shown on each side of the break.
CONTEXT_TOKENS = 8


def describe_prompt_break(
    pb: PromptBreak, input_ids: List[int], decode: Optional[Callable[[List[int]], str]]
) -> Dict[str, Any]:
    pos = pb.position

    def text(ids: List[int]) -> Optional[str]:
        return decode(ids) if decode is not None else None

    return {
        "position": pos,
        "prompt_tokens": len(input_ids),
        "fraction": round(pos / len(input_ids), 4) if input_ids else 0.0,
        "cause": pb.cause,
        "before": text(input_ids[max(pos - CONTEXT_TOKENS, 0) : pos]),
        "after": text(input_ids[pos : pos + CONTEXT_TOKENS]),
        "cached_next": text(list(pb.cached_next)),
    }
