"""Req: the scheduler's view of one request, from arrival to its last streamed token.

KV bookkeeping fields (who owns which slots):
- req_pool_idx: the request's row in ReqToTokenPool (None when it holds no row).
- prefix_indices: slots of the prefix matched in the radix tree (CPU int64), ending at last_node.
- cache_protected_len: how many leading positions of the row are owned by the tree (locked via
  last_node); the request must never free those.
- kv_committed_len: positions whose KV has been computed (tokens that went through a forward).
- kv_allocated_len: positions that have a slot in the row (>= committed: the overlap loop
  allocates one step ahead).
"""

from __future__ import annotations

import re
import time
from enum import Enum, auto
from typing import Any, List, Optional

import torch

from sglang.srt.core.finish_reason import (
    FinishAbort,
    FinishLength,
    FinishMatchedStr,
    FinishMatchedToken,
    FinishReason,
)
from sglang.srt.core.prompt_break import PromptBreak
from sglang.srt.core.sampling_params import SamplingParams


class ReqStatus(Enum):
    """Where a request is. Only RUNNING and ABORTING requests hold a request row and KV slots."""

    WAITING = auto()  # queued (or compiling its grammar); holds nothing
    RUNNING = auto()  # admitted: in a prefill (possibly chunked) or the running batch
    RETRACTED = auto()  # taken out to free memory (or preempted); queued again, holds nothing
    ABORTING = auto()  # asked to stop while running; the loop finishes it through the release path
    FINISHED = auto()  # finished_reason is set; the last output is not sent yet
    OUTPUT_SENT = auto()  # the last output went out


class Req:
    def __init__(
        self,
        rid: str,
        origin_input_ids: List[int],
        sampling_params: SamplingParams,
        return_logprob: bool = False,
        logprob_start_len: int = -1,
        top_logprobs_num: int = 0,
        stream: bool = False,
        priority: Optional[int] = None,
        extra_key: Optional[str] = None,
        eos_token_ids: Optional[set] = None,
        vocab_size: int = 0,
    ):
        self.rid = rid
        self.origin_input_ids = list(origin_input_ids)
        self.output_ids: List[int] = []
        self.sampling_params = sampling_params
        self.return_logprob = return_logprob
        self.logprob_start_len = logprob_start_len
        self.top_logprobs_num = top_logprobs_num
        self.stream = stream
        self.priority = priority
        self.extra_key = extra_key
        self.eos_token_ids = eos_token_ids or set()
        self.vocab_size = vocab_size

        # Prefix and KV ownership (see module docstring).
        self.fill_ids: List[int] = []
        self.prefix_indices: torch.Tensor = torch.empty(0, dtype=torch.int64)
        self.extend_input_len = 0
        self.last_node: Any = None
        # HiCache: the match goes on for host_hit_length tokens held in host memory only, ending at
        # last_host_node; admission copies them back (see PrefillAdder).
        self.host_hit_length = 0
        self.last_host_node: Any = None
        self.req_pool_idx: Optional[int] = None
        self.cache_protected_len = 0
        self.kv_committed_len = 0
        self.kv_allocated_len = 0

        self.status = ReqStatus.WAITING
        self.finished_reason: Optional[FinishReason] = None
        self.abort_reason: Optional[FinishAbort] = None  # while ABORTING
        self.retraction_count = 0

        # Prefix-cache accounting reported to the client.
        self.cached_tokens = 0
        self.already_computed = 0
        # Of cached_tokens, those copied back from host memory and, of those, read from storage.
        self.cached_host_tokens = 0
        self.cached_storage_tokens = 0
        # HiCache storage: the prefetch reading this prompt's blocks (while it waits), and how many
        # tokens the finished prefetch brought into host memory.
        self.prefetch: Any = None
        self.storage_hit_tokens = 0
        # --enable-cache-report: where the first prefill left the cache (sent once, then None).
        self.prompt_break: Optional[PromptBreak] = None
        self.prompt_break_sent = False
        self.match_limit = 0  # the longest prefix the last match was allowed to return

        # Incremental detokenization of the output tail (for stop strings in the scheduler).
        self.surr_offset: Optional[int] = None
        self.read_offset: Optional[int] = None

        # Streaming offsets: what has already been sent to the detokenizer.
        self.send_token_offset = 0
        self.send_output_logprobs_offset = 0
        self.input_logprobs_sent = False

        # Logprobs.
        self.input_token_logprobs: Optional[List[float]] = None
        self.input_top_logprobs: Optional[List[Any]] = None
        self.output_token_logprobs: List[float] = []
        self.output_top_logprobs: List[Any] = []
        self.temp_input_token_logprobs: List[float] = []
        self.temp_input_top_logprobs: List[Any] = []

        # Grammar (constrained decoding).
        self.grammar: Any = None

        # Speculative decoding: the proposer's per-request state (NGRAM index), this step's drafts,
        # how far the draft model's KV is valid, and the counts reported in meta_info.
        self.spec_state: Any = None
        self.spec_drafts: List[int] = []
        self.spec_tree: Any = None  # this step's DraftTree when the drafts branch (None: a chain)
        self.draft_kv_len = 0
        self.spec_verify_ct = 0
        self.spec_drafted = 0
        self.spec_accepted = 0
        self.spec_accept_hist: List[int] = []

        # Overlap loop: tokens sampled by launched passes whose results are not processed yet.
        self.inflight_tokens = 0
        # Seed for requests that did not give one, drawn at intake (identically on every TP rank).
        self.auto_seed: Optional[int] = None

        # Timing.
        self.arrival_time = time.monotonic()
        self.queue_time_start: Optional[float] = None
        self.first_token_time: Optional[float] = None
        self.wait_queue_entry_time = time.monotonic()

    # ------------------------------------------------------------------
    def finished(self) -> bool:
        return self.status in (ReqStatus.FINISHED, ReqStatus.OUTPUT_SENT)

    def finish(self, reason: FinishReason) -> None:
        self.finished_reason = reason
        self.status = ReqStatus.FINISHED

    def request_abort(self, reason: FinishAbort) -> bool:
        """Mark a running request to be finished by the loop; False if it is finished or marked."""
        if self.finished() or self.status is ReqStatus.ABORTING:
            return False
        self.abort_reason = reason
        self.status = ReqStatus.ABORTING
        return True

    def aborting(self) -> bool:
        return self.status is ReqStatus.ABORTING

    def was_retracted(self) -> bool:
        return self.retraction_count > 0

    def seqlen(self) -> int:
        return len(self.origin_input_ids) + len(self.output_ids)

    def all_ids(self) -> List[int]:
        return self.origin_input_ids + self.output_ids

    def __repr__(self) -> str:
        return (
            f"Req(rid={self.rid}, in={len(self.origin_input_ids)}, out={len(self.output_ids)}, "
            f"pool_idx={self.req_pool_idx}, committed={self.kv_committed_len}, "
            f"allocated={self.kv_allocated_len}, protected={self.cache_protected_len})"
        )

    # ------------------------------------------------------------------ admission
    def init_next_round_input(self, tree_cache=None) -> None:
        """Recompute fill_ids and match the longest cached prefix (capped so >= 1 token is computed)."""
        self.fill_ids = self.origin_input_ids + self.output_ids
        if tree_cache is not None and self.req_pool_idx is None:
            max_prefix = len(self.fill_ids) - 1
            if self.return_logprob and self.logprob_start_len >= 0:
                max_prefix = min(max_prefix, self.logprob_start_len)
            max_prefix = max(max_prefix, 0)
            self.match_limit = max_prefix
            res = tree_cache.match_prefix(self.fill_ids[:max_prefix], extra_key=self.extra_key)
            self.prefix_indices = res.device_indices
            self.last_node = res.last_node
            self.host_hit_length = res.host_hit_length
            self.last_host_node = res.last_host_node
            self.cache_protected_len = len(self.prefix_indices)
        else:
            self.host_hit_length = 0
        self.extend_input_len = len(self.fill_ids) - len(self.prefix_indices)

    def reset_for_retract(self) -> None:
        self.prefix_indices = torch.empty(0, dtype=torch.int64)
        self.last_node = None
        self.host_hit_length = 0
        self.last_host_node = None
        self.draft_kv_len = 0
        self.cache_protected_len = 0
        self.kv_committed_len = 0
        self.kv_allocated_len = 0
        self.extend_input_len = 0
        self.status = ReqStatus.RETRACTED
        self.retraction_count += 1
        self.already_computed = 0
        self.temp_input_token_logprobs = []
        self.temp_input_top_logprobs = []

    # ------------------------------------------------------------------ finishing
    def tail_str(self, tokenizer) -> str:
        n = self.sampling_params.stop_str_max_len + 1
        return tokenizer.decode(self.output_ids[-n:])

    def check_finished(self, tokenizer=None, invalid: bool = False) -> None:
        """Finish order: abort, NaN, stop string / regex, grammar end, stop token / EOS, length.

        The length cap comes last so that a stop on the last allowed token still reports "stop"
        (and the stop string is trimmed from the text), as SGLang and OpenAI do."""
        if self.finished():
            return
        if self.status is ReqStatus.ABORTING:
            self.finish(self.abort_reason)
            return
        sp = self.sampling_params
        last = self.output_ids[-1] if self.output_ids else None
        if invalid or (last is not None and self.vocab_size and not 0 <= last < self.vocab_size):
            self.finish(FinishMatchedStr("NaN happened"))
            return
        if last is not None and tokenizer is not None and (sp.stop_strs or sp.stop_regex_list):
            matched = self._matched_stop_str(tokenizer)
            if matched is not None:
                self.finish(FinishMatchedStr(matched))
                return
        if self.grammar is not None and self.grammar.is_terminated():
            self.finish(FinishMatchedToken(last))
            return
        if last is not None and (
            last in (sp.stop_token_ids or ()) or (not sp.ignore_eos and last in self.eos_token_ids)
        ):
            self.finish(FinishMatchedToken(last))
            return
        if sp.max_new_tokens is not None and len(self.output_ids) >= sp.max_new_tokens:
            self.finish(FinishLength(sp.max_new_tokens))

    def _matched_stop_str(self, tokenizer) -> Optional[str]:
        tail = self.tail_str(tokenizer)
        for s in self.sampling_params.stop_strs:
            if s in tail:
                return s
        for pattern in self.sampling_params.stop_regex_list:
            m = re.search(pattern, tail)
            if m:
                return m.group(0)
        return None

    def check_match_stop_str_prefix(self, tokenizer) -> bool:
        """True while the output tail could still be the start of a stop string (hold streaming)."""
        sp = self.sampling_params
        if not sp.stop_strs or tokenizer is None:
            return False
        tail = self.tail_str(tokenizer)
        for s in sp.stop_strs:
            for k in range(min(len(s) - 1, len(tail)), 0, -1):
                if tail.endswith(s[:k]):
                    return True
        return False
