"""ReqState: the HTTP side's record of one running request, and its one-slot mailbox.

The detokenizer's outputs for a request arrive while its consumer (an HTTP response, an Engine
iterator) may be slow. They are coalesced on arrival, so a request holds at most one unread chunk:
with cumulative output the newest chunk already says everything, and with incremental output the
unread deltas are joined (text, ids and the logprob entries alike). A consumer that falls behind
therefore costs no more memory than its own output, and `unread_bytes` / `last_taken` tell the
TokenizerManager when one has stopped reading altogether.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional

from sglang.srt.core.io_struct.to_tokenizer import BatchStrOutput
from sglang.srt.managers.tokenizer.request_preparer import PreparedReq

# Logprob lists that are per output token: deltas in incremental chunks, joined when coalescing.
_PER_TOKEN_KEYS = ("output_token_logprobs", "output_top_logprobs")
_ONCE_KEYS = ("input_token_logprobs", "input_top_logprobs")


class GenerateError(Exception):
    """A request that failed with an HTTP status other than 400 (503 overload, 500 internal)."""

    def __init__(self, status_code: int, message: str):
        super().__init__(message)
        self.status_code = status_code
        self.message = message


@dataclass
class ReqState:
    req: PreparedReq
    incremental: bool  # the stream sends deltas (--incremental-streaming-output) instead of totals
    watch_consumer: bool = False  # an HTTP stream: abort it when its reader stops reading
    created_time: float = field(default_factory=time.time)
    event: asyncio.Event = field(default_factory=asyncio.Event)
    finished: bool = False
    error: Optional[GenerateError] = None
    # Everything produced so far.
    text: str = ""
    output_ids: List[int] = field(default_factory=list)
    input_token_logprobs: List[Any] = field(default_factory=list)
    input_top_logprobs: List[Any] = field(default_factory=list)
    output_token_logprobs: List[Any] = field(default_factory=list)
    output_top_logprobs: List[Any] = field(default_factory=list)
    # The mailbox: the unread chunk (metadata, plus the deltas in incremental mode).
    pending: Optional[Dict[str, Any]] = None
    pending_chunks: int = 0
    unread_bytes: int = 0
    last_taken: float = field(default_factory=time.monotonic)
    final_meta: Optional[Dict[str, Any]] = None
    prompt_break: Optional[Dict[str, Any]] = None  # --enable-cache-report, once the scheduler said
    # Timing for metrics.
    first_token_time: Optional[float] = None
    last_chunk_time: Optional[float] = None

    @property
    def rid(self) -> str:
        return self.req.rid

    @property
    def stream(self) -> bool:
        return self.req.stream

    # ------------------------------------------------------------------ producer side
    def apply(
        self,
        out: BatchStrOutput,
        i: int,
        with_metrics: bool,
        tok_text: Callable[[int], Optional[str]],
        on_chunk: Optional[Callable[["ReqState", int, float], None]] = None,
        weight_version: str = "default",
    ) -> bool:
        """Fold output i of a detokenizer batch into this request; returns whether it finished.

        on_chunk(state, new_tokens, now) runs before last_chunk_time moves (metrics measure gaps)."""
        now = time.time()
        delta_text, delta_ids = out.output_strs[i], list(out.output_ids[i] or [])
        self.text += delta_text
        self.output_ids.extend(delta_ids)
        if delta_ids and self.first_token_time is None:
            self.first_token_time = now
        reason = out.finished_reasons[i]
        finished = reason is not None
        meta: Dict[str, Any] = {
            "id": self.rid,
            "finish_reason": reason.to_wire() if reason is not None else None,
            "prompt_tokens": out.prompt_tokens[i],
            "completion_tokens": out.completion_tokens[i],
            "reasoning_tokens": 0,
            "cached_tokens": out.cached_tokens[i],
            "num_retractions": out.retraction_counts[i],
            "weight_version": weight_version,
        }
        details = out.cached_tokens_details[i] if out.cached_tokens_details else None
        if details is not None:
            meta["cached_tokens_details"] = details.to_dict()
        spec = out.spec_stats[i] if out.spec_stats else None
        if spec is not None:
            meta.update(spec.to_dict())
        if self.prompt_break is not None:
            meta["prompt_break"] = self.prompt_break
        if self.req.return_logprob:
            self._add_logprobs(out, i, meta, tok_text)
        if with_metrics:
            meta["queue_time"] = out.queue_times[i]
            meta["first_token_latency"] = (
                (self.first_token_time - self.created_time) if self.first_token_time else None
            )
        if finished:
            meta["e2e_latency"] = now - self.created_time
            self.finished = True
            self.final_meta = meta
        if self.stream or finished:
            self._push(meta, delta_text, delta_ids)
        if on_chunk is not None:
            on_chunk(self, len(delta_ids), now)
        self.last_chunk_time = now
        return finished

    def _add_logprobs(
        self,
        out: BatchStrOutput,
        i: int,
        meta: Dict[str, Any],
        tok_text: Callable[[int], Optional[str]],
    ) -> None:
        def entries(pairs: Optional[List[Any]]) -> Optional[List[List[Any]]]:
            if pairs is None:
                return None
            with_text = self.req.return_text_in_logprobs
            return [[lp, tid, tok_text(tid) if with_text else None] for lp, tid in pairs]

        new_input, new_input_top = [], []
        if out.input_token_logprobs[i]:
            new_input = self.input_token_logprobs = entries(out.input_token_logprobs[i])
            if out.input_top_logprobs[i] is not None:
                new_input_top = self.input_top_logprobs = [
                    entries(x) for x in out.input_top_logprobs[i]
                ]
        new_out = entries(out.output_token_logprobs[i] or [])
        new_top = [entries(x) for x in (out.output_top_logprobs[i] or [])]
        self.output_token_logprobs.extend(new_out)
        self.output_top_logprobs.extend(new_top)
        with_top = self.req.top_logprobs_num > 0
        if self.incremental:  # only what this chunk adds, as the text and ids are
            meta["input_token_logprobs"], meta["output_token_logprobs"] = new_input, new_out
            if with_top:
                meta["input_top_logprobs"], meta["output_top_logprobs"] = new_input_top, new_top
        else:
            meta["input_token_logprobs"], meta["output_token_logprobs"] = (
                self.input_token_logprobs,
                None,
            )
            if with_top:
                meta["input_top_logprobs"], meta["output_top_logprobs"] = (
                    self.input_top_logprobs,
                    None,
                )
        meta["output_token_logprobs_length"] = len(self.output_token_logprobs)

    def _push(self, meta: Dict[str, Any], delta_text: str, delta_ids: List[int]) -> None:
        self.unread_bytes += len(delta_text.encode())
        self.pending_chunks += 1
        old = self.pending
        if not self.incremental or old is None:
            # Cumulative: the text, ids and per-token lists are read from the state when taken.
            self.pending = (
                dict(meta, text=delta_text, output_ids=delta_ids) if self.incremental else meta
            )
            return
        merged = dict(meta, text=old["text"] + delta_text, output_ids=old["output_ids"] + delta_ids)
        for key in _PER_TOKEN_KEYS:
            if key in meta:
                merged[key] = old[key] + meta[key]
        for key in _ONCE_KEYS:
            if key in meta and not meta[key]:
                merged[key] = old[key]
        self.pending = merged

    # ------------------------------------------------------------------ consumer side
    def take(self) -> Optional[Dict[str, Any]]:
        """The unread output as one chunk (None if there is none); empties the mailbox."""
        pending, self.pending = self.pending, None
        self.pending_chunks, self.unread_bytes = 0, 0
        self.last_taken = time.monotonic()
        if pending is None:
            return None
        if self.incremental:
            meta = {k: v for k, v in pending.items() if k not in ("text", "output_ids")}
            return {"text": pending["text"], "output_ids": pending["output_ids"], "meta_info": meta}
        meta = dict(pending)
        if "output_token_logprobs" in meta:
            meta["output_token_logprobs"] = list(self.output_token_logprobs)
        if "output_top_logprobs" in meta:
            meta["output_top_logprobs"] = list(self.output_top_logprobs)
        return {"text": self.text, "output_ids": list(self.output_ids), "meta_info": meta}

    def fail(self, err: GenerateError) -> None:
        self.error = err
        self.finished = True
        self.event.set()
