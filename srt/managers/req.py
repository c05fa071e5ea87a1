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

import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

import torch

from sglang.srt.sampling.sampling_params import SamplingParams


class BaseFinishReason:
    def to_json(self) -> Dict[str, Any]:
        raise NotImplementedError


@dataclass
class FinishMatchedToken(BaseFinishReason):
    matched: int

    def to_json(self) -> Dict[str, Any]:
        return {"type": "stop", "matched": self.matched}


@dataclass
class FinishMatchedStr(BaseFinishReason):
    matched: str

    def to_json(self) -> Dict[str, Any]:
        return {"type": "stop", "matched": self.matched}


@dataclass
class FinishLength(BaseFinishReason):
    length: int

    def to_json(self) -> Dict[str, Any]:
        return {"type": "length", "length": self.length}


@dataclass
class FinishAbort(BaseFinishReason):
    message: str = "Aborted"
    status_code: Optional[int] = None
    err_type: Optional[str] = None

    def to_json(self) -> Dict[str, Any]:
        return {"type": "abort", "message": self.message, "status_code": self.status_code,
                "err_type": self.err_type}


class Req:
    def __init__(self, rid: str, origin_input_text: Optional[str], origin_input_ids: List[int],
                 sampling_params: SamplingParams, return_logprob: bool = False, logprob_start_len: int = -1,
                 top_logprobs_num: int = 0, stream: bool = False, priority: Optional[int] = None,
                 extra_key: Optional[str] = None, eos_token_ids: Optional[set] = None,
                 vocab_size: int = 0):
        self.rid = rid
        self.origin_input_text = origin_input_text
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
        self.req_pool_idx: Optional[int] = None
        self.cache_protected_len = 0
        self.kv_committed_len = 0
        self.kv_allocated_len = 0

        # Finish state.
        self.finished_reason: Optional[BaseFinishReason] = None
        self.to_finish: Optional[BaseFinishReason] = None
        self.finished_output = False
        self.finished_len: Optional[int] = None

        # Chunked prefill and retraction.
        self.is_chunked = 0
        self.is_retracted = False
        self.retracted_stain = False
        self.retraction_count = 0

        # Prefix-cache accounting reported to the client.
        self.cached_tokens = 0
        self.already_computed = 0

        # Incremental detokenization of the output tail (for stop strings in the scheduler).
        self.surr_offset: Optional[int] = None
        self.read_offset: Optional[int] = None
        self.decoded_text = ""

        # Streaming offsets: what has already been sent to the detokenizer.
        self.send_token_offset = 0
        self.send_decode_id_offset = 0
        self.send_output_logprobs_offset = 0
        self.input_logprobs_sent = False

        # Logprobs.
        self.input_token_logprobs: Optional[List[float]] = None
        self.input_top_logprobs: Optional[List[Any]] = None
        self.output_token_logprobs: List[float] = []
        self.output_top_logprobs: List[Any] = []
        self.extend_logprob_start_len = 0
        self.temp_input_token_logprobs: List[float] = []
        self.temp_input_top_logprobs: List[Any] = []

        # Grammar (constrained decoding).
        self.grammar: Any = None

        # Timing.
        self.arrival_time = time.monotonic()
        self.queue_time_start: Optional[float] = None
        self.first_token_time: Optional[float] = None
        self.wait_queue_entry_time = time.monotonic()

    # ------------------------------------------------------------------
    def finished(self) -> bool:
        return self.finished_reason is not None

    def seqlen(self) -> int:
        return len(self.origin_input_ids) + len(self.output_ids)

    def all_ids(self) -> List[int]:
        return self.origin_input_ids + self.output_ids

    def __repr__(self) -> str:
        return (f"Req(rid={self.rid}, in={len(self.origin_input_ids)}, out={len(self.output_ids)}, "
                f"pool_idx={self.req_pool_idx}, committed={self.kv_committed_len}, "
                f"allocated={self.kv_allocated_len}, protected={self.cache_protected_len})")
