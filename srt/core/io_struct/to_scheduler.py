"""Messages the scheduler receives (from the TokenizerManager, directly or through the DP controller)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

from sglang.srt.core.sampling_params import SamplingParams


@dataclass
class TokenizedGenerateReqInput:
    rid: str
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


@dataclass
class FlushCacheReqInput:
    pass


@dataclass
class GetInternalStateReq:
    pass


@dataclass
class PauseGenerationReqInput:
    """mode: "abort" (every request ends as aborted), "retract" (running requests give back their KV
    and wait), or "in_place" (running requests keep their KV)."""

    mode: str = "abort"


@dataclass
class ContinueGenerationReqInput:
    pass


@dataclass
class UpdateWeightFromDiskReqInput:
    """Replace the weights with another checkpoint of the same model. Running requests finish on
    the old weights first (or are aborted, with abort_all_requests); new ones wait meanwhile. The
    prefix cache, computed with the old weights, is flushed."""

    model_path: str
    load_format: Optional[str] = None
    abort_all_requests: bool = False


@dataclass
class ProfileReq:
    """start: torch.profiler over the scheduler's passes until stop, or for num_steps passes; the
    trace goes to output_dir as <profile_id>-TP-<rank>.trace.json.gz."""

    start: bool
    output_dir: Optional[str] = None
    num_steps: Optional[int] = None
    activities: Optional[List[str]] = None
    with_stack: bool = False
    record_shapes: bool = False
    profile_id: Optional[str] = None
