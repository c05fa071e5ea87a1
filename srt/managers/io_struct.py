"""Typed messages between the three processes (pickled by default, msgpack selectable).

Direction: TokenizerManager -> Scheduler (requests and control), Scheduler -> DetokenizerManager
(token ids), DetokenizerManager -> TokenizerManager (text), Scheduler -> TokenizerManager (control
replies and aborts of requests that never produced a token).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Callable, Dict, List, Optional

from sglang.srt.sampling.sampling_params import SamplingParams

# ---------------------------------------------------------------- tokenizer -> scheduler


@dataclass
class TokenizedGenerateReqInput:
    rid: str
    input_text: Optional[str]
    input_ids: List[int]
    sampling_params: SamplingParams
    return_logprob: bool = False
    logprob_start_len: int = -1
    top_logprobs_num: int = 0
    stream: bool = False
    priority: Optional[int] = None
    extra_key: Optional[str] = None
    received_time: float = 0.0


@dataclass
class AbortReq:
    rid: str = ""
    abort_all: bool = False
    # Set when the scheduler tells the tokenizer manager that it aborted a request by itself.
    finished_reason: Optional[Dict[str, Any]] = None


@dataclass
class FlushCacheReqInput:
    pass


@dataclass
class FlushCacheReqOutput:
    success: bool
    message: str = ""


@dataclass
class GetInternalStateReq:
    pass


@dataclass
class GetInternalStateReqOutput:
    state: Dict[str, Any]


@dataclass
class SchedulerMetrics:
    """Scheduler-side gauges and counters, pushed to the HTTP process (for /metrics) when they change."""

    values: Dict[str, float]


@dataclass
class DPLoad:
    """A data-parallel replica's load, reported to the controller for total_tokens balancing."""

    dp_rank: int
    used_tokens: int
    num_reqs: int


@dataclass
class HealthCheckOutput:
    """Sent by the scheduler for every health-check generate so /health_generate can answer."""

    rid: str


# ---------------------------------------------------------------- scheduler -> detokenizer


@dataclass(kw_only=True)
class BatchOutputCommon:
    """Per-request lists that both output messages carry, in the same order as rids."""

    rids: List[str]
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
    queue_times: List[Optional[float]] = field(default_factory=list)
    first_token_times: List[Optional[float]] = field(default_factory=list)


def map_common(msg: BatchOutputCommon, fn: Callable[[List[Any]], List[Any]]) -> Dict[str, List[Any]]:
    """The BatchOutputCommon fields of msg, each list passed through fn (to select or fill rows)."""
    return {f.name: fn(getattr(msg, f.name)) for f in fields(BatchOutputCommon)}


@dataclass
class BatchTokenIDOutput(BatchOutputCommon):
    # Incremental detokenization: ids appended to each request's decode window, and the
    # read offset inside the window (sent only on a request's first message, else -1).
    decode_ids: List[List[int]]
    read_offsets: List[int]
    skip_special_tokens: List[bool]
    spaces_between_special_tokens: List[bool]
    no_stop_trim: List[bool]


# ---------------------------------------------------------------- detokenizer -> tokenizer


@dataclass
class BatchStrOutput(BatchOutputCommon):
    output_strs: List[str]  # new text since the last message (a delta)


@dataclass
class DetokenizerError:
    """The detokenizer could not serve some requests (e.g. its state table overflowed)."""

    rids: List[str]
    message: str


@dataclass
class SchedulerReady:
    """First message of a scheduler to its launcher: the numbers the other processes need."""

    max_total_num_tokens: int
    max_running_requests: int
    max_req_input_len: int
    context_len: int
    chunked_prefill_size: int
    page_size: int
    vocab_size: int
    available_mem_gb: float
    device: str
