"""The per-request lists that the token-id and the text output messages both carry."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Callable, Dict, List, Optional

from sglang.srt.core.prompt_break import PromptBreak


@dataclass(frozen=True)
class CachedTokensDetails:
    """Where a request's cached prompt tokens were found (HiCache): on the device, copied back
    from host memory, or read from the storage tier (then copied back)."""

    device: int
    host: int
    storage: int

    @classmethod
    def of(cls, cached: int, host_and_storage: int, storage: int) -> "CachedTokensDetails":
        return cls(cached - host_and_storage, host_and_storage - storage, storage)

    def to_dict(self) -> Dict[str, int]:
        return {"device": self.device, "host": self.host, "storage": self.storage}


@dataclass(frozen=True)
class SpecStats:
    """Speculative decoding for one request: verify steps, drafts checked and accepted, and how
    many steps accepted 0, 1, ... drafts."""

    verify_ct: int
    drafted: int
    accepted: int
    accept_histogram: List[int]

    def to_dict(self) -> Dict[str, Any]:
        n = max(self.verify_ct, 1)
        return {
            "spec_verify_ct": self.verify_ct,
            # Tokens per verify step (accepted drafts + the one each step adds).
            "spec_accept_length": (self.accepted + self.verify_ct) / n,
            "spec_accept_rate": self.accepted / self.drafted if self.drafted else 0.0,
            "spec_num_correct_drafts": self.accepted,
            "spec_accept_histogram": list(self.accept_histogram),
        }


@dataclass(kw_only=True)
class BatchOutputCommon:
    """Per-request lists in the same order as rids."""

    rids: List[str]
    # FinishReason.to_wire() of each request, None while it runs.
    finished_reasons: List[Optional[Dict[str, Any]]]
    output_ids: List[List[int]]  # new output ids since the last message
    prompt_tokens: List[int]
    completion_tokens: List[int]
    cached_tokens: List[int]
    retraction_counts: List[int]
    # Logprob slices since the last message (None when the request did not ask for them).
    input_token_logprobs: List[Optional[List[Any]]] = field(default_factory=list)
    input_top_logprobs: List[Optional[List[Any]]] = field(default_factory=list)
    output_token_logprobs: List[Optional[List[Any]]] = field(default_factory=list)
    output_top_logprobs: List[Optional[List[Any]]] = field(default_factory=list)
    # --enable-cache-report: each request's break, in the first message after its first prefill.
    prompt_breaks: List[Optional[PromptBreak]] = field(default_factory=list)
    # With HiCache: the split of cached_tokens by tier (None without).
    cached_tokens_details: List[Optional[CachedTokensDetails]] = field(default_factory=list)
    # With speculative decoding: each request's verify counts (None without).
    spec_stats: List[Optional[SpecStats]] = field(default_factory=list)
    queue_times: List[Optional[float]] = field(default_factory=list)
    first_token_times: List[Optional[float]] = field(default_factory=list)


def map_common(
    msg: BatchOutputCommon, fn: Callable[[List[Any]], List[Any]]
) -> Dict[str, List[Any]]:
    """The BatchOutputCommon fields of msg, each list passed through fn (to select or fill rows)."""
    return {f.name: fn(getattr(msg, f.name)) for f in fields(BatchOutputCommon)}
