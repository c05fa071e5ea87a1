"""Native logprob entries ([logprob, token_id, token_text]) reshaped into the two OpenAI formats.

Completions use the legacy column format (tokens / token_logprobs / top_logprobs / text_offset);
chat uses one object per token with its UTF-8 bytes and a list of alternatives.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

Entry = Sequence[Any]  # [logprob (None for the first prompt token), token_id, token_text]


def _text(e: Entry) -> str:
    return e[2] if e[2] is not None else ""


def completion_logprobs(
    tokens: Sequence[Entry], tops: Optional[Sequence[Optional[Sequence[Entry]]]], offset: int
) -> Tuple[Dict[str, Any], int]:
    """Column-format logprobs for `tokens`; text_offset counts from `offset`. Returns the dict and
    the offset just past the last token, so a stream can continue where its last chunk ended."""
    offsets: List[int] = []
    for e in tokens:
        offsets.append(offset)
        offset += len(_text(e))
    top_dicts = None
    if tops is not None:
        # A position without alternatives (the first prompt token) stays null, as in OpenAI.
        top_dicts = [None if t is None else {_text(x): x[0] for x in t} for t in tops]
    return {
        "tokens": [_text(e) for e in tokens],
        "token_logprobs": [e[0] for e in tokens],
        "top_logprobs": top_dicts,
        "text_offset": offsets,
    }, offset


def chat_logprobs(
    tokens: Sequence[Entry], tops: Optional[Sequence[Optional[Sequence[Entry]]]]
) -> List[Dict[str, Any]]:
    """The `content` list of a chat choice's logprobs."""
    out = []
    for i, e in enumerate(tokens):
        alts = tops[i] if tops is not None and i < len(tops) and tops[i] is not None else []
        out.append({**_token_obj(e), "top_logprobs": [_token_obj(x) for x in alts]})
    return out


def _token_obj(e: Entry) -> Dict[str, Any]:
    t = _text(e)
    return {"token": t, "logprob": e[0], "bytes": list(t.encode("utf-8"))}
