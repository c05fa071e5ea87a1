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
