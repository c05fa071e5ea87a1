"""Per-choice bookkeeping: which native sub-request is which OpenAI choice, and what was already sent.

The native layer names the copies of an n>1 request "<rid>-<k>" (TokenizerManager._expand_n), and
in a stream every chunk repeats the whole text so far; this is the one place that knows both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Optional, Tuple


@dataclass
class ChoiceState:
    index: int  # OpenAI choice index: prompt_index * n + copy
    prompt_index: int
    sent_chars: int = 0  # characters of the cumulative text already sent
    seen_tokens: int = 0  # output tokens covered by the chunks seen so far
    sent_tokens: int = 0  # output tokens whose logprobs were already sent
    started: bool = False
    finished: bool = False
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    reasoning_tokens: Optional[int] = None  # set by the chat route when it separates reasoning
    prompt_break: Optional[Dict[str, Any]] = None


@dataclass
class Delta:
    """What one native chunk adds to one choice."""

    state: ChoiceState
    text: str
    logprobs: List[Any]
    top_logprobs: Optional[List[Any]]
    finish_reason: Optional[Dict[str, Any]]
    meta: Dict[str, Any]
    first: bool
    new_ids: List[int]


class Choices:
    def __init__(self, base_rids: List[str], n: int):
        self.n = n
        self.by_rid: Dict[str, ChoiceState] = {}
        for p, rid in enumerate(base_rids):
            for k in range(n):
                sub = rid if n == 1 else f"{rid}-{k}"
                self.by_rid[sub] = ChoiceState(index=p * n + k, prompt_index=p)

    def rids(self) -> List[str]:
        return list(self.by_rid)

    def get(self, rid: str) -> ChoiceState:
        st = self.by_rid.get(rid)
        if st is None:
            raise RuntimeError(f"output for unknown sub-request {rid!r}")
        return st

    def in_order(self) -> List[ChoiceState]:
        return sorted(self.by_rid.values(), key=lambda s: s.index)

    def all_finished(self) -> bool:
        return all(s.finished for s in self.by_rid.values())

    def record_finish(self, st: ChoiceState, meta: Dict[str, Any]) -> None:
        st.finished = True
        st.prompt_tokens = int(meta.get("prompt_tokens") or 0)
        st.completion_tokens = int(meta.get("completion_tokens") or 0)
        st.cached_tokens = int(meta.get("cached_tokens") or 0)
        st.prompt_break = meta.get("prompt_break")

    def usage(self, cache_report: bool) -> Dict[str, Any]:
        """Prompt tokens count once per prompt (not once per copy); completions count per choice."""
        firsts: Dict[int, ChoiceState] = {}
        for s in self.in_order():
            firsts.setdefault(s.prompt_index, s)
        prompt = sum(s.prompt_tokens for s in firsts.values())
        completion = sum(s.completion_tokens for s in self.by_rid.values())
        usage: Dict[str, Any] = {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }
        if cache_report:
            details: Dict[str, Any] = {
                "cached_tokens": sum(s.cached_tokens for s in firsts.values())
            }
            breaks = [s.prompt_break for s in firsts.values() if s.prompt_break is not None]
            if breaks:
                # One prompt (every chat request): its break; several: one per prompt, in order.
                details["prompt_break" if len(firsts) == 1 else "prompt_breaks"] = (
                    breaks[0] if len(firsts) == 1 else breaks
                )
            usage["prompt_tokens_details"] = details
        reasoning = [
            s.reasoning_tokens for s in self.by_rid.values() if s.reasoning_tokens is not None
        ]
        if reasoning:
            usage["completion_tokens_details"] = {"reasoning_tokens": sum(reasoning)}
        return usage

    def delta(self, out: Dict[str, Any], incremental: bool) -> Delta:
        """Turn one native stream chunk (cumulative, or incremental with that server flag) into the
        new text and the new logprob entries of its choice."""
        meta = out["meta_info"]
        st = self.get(meta["id"])
        text = out.get("text") or ""
        ids = out.get("output_ids") or []
        if incremental:
            new_text, new_ids = text, list(ids)
            st.seen_tokens += len(ids)
        else:
            # Stop strings are held back by the detokenizer, so cumulative text only ever grows.
            new_text, new_ids = text[st.sent_chars :], list(ids[st.seen_tokens :])
            st.seen_tokens = len(ids)
        st.sent_chars += len(new_text)
        if incremental:  # the chunk's logprob lists are its own entries, like its text
            lps, top = meta.get("output_token_logprobs"), meta.get("output_top_logprobs")
            lps, tops = (list(lps) if lps else []), (list(top) if top is not None else None)
        else:
            lps, tops = _slice_logprobs(meta, st.sent_tokens, st.seen_tokens)
        st.sent_tokens = max(st.sent_tokens, st.seen_tokens)
        first = not st.started
        st.started = True
        return Delta(st, new_text, lps, tops, meta.get("finish_reason"), meta, first, new_ids)

    def iter_results(
        self, results: List[Dict[str, Any]]
    ) -> Iterator[Tuple[ChoiceState, Dict[str, Any]]]:
        """Non-stream results in choice order."""
        pairs = [(self.get(r["meta_info"]["id"]), r) for r in results]
        return iter(sorted(pairs, key=lambda p: p[0].index))


def _slice_logprobs(
    meta: Dict[str, Any], start: int, end: int
) -> Tuple[List[Any], Optional[List[Any]]]:
    # A cumulative chunk carries every entry so far; the token count of this chunk bounds what is new.
    lps = meta.get("output_token_logprobs")
    if lps is None:
        return [], None
    tops = meta.get("output_top_logprobs")
    return list(lps[start:end]), (list(tops[start:end]) if tops is not None else None)
