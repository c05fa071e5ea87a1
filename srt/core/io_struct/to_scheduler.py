"""Messages the scheduler receives (from the TokenizerManager, directly or through the DP controller)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List, Optional

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


PAUSE_MODES = ("abort", "retract", "in_place")


@dataclass
class PauseGenerationReqInput:
    """mode: "abort" (every request ends as aborted), "retract" (running requests give back their KV
    and wait), or "in_place" (running requests keep their KV)."""

    mode: str = "abort"


def pause_mode_of(body: Any) -> str:
    """The mode of a /pause_generation body (a JSON object, `mode` optional); ValueError names the
    field at fault."""
    if not isinstance(body, dict):
        raise ValueError('The body must be a JSON object, e.g. {"mode": "abort"}.')
    unknown = sorted(set(body) - {"mode"})
    if unknown:
        raise ValueError(f"Unknown field(s): {', '.join(unknown)}; the only field is `mode`.")
    mode = body.get("mode", "abort")
    if mode not in PAUSE_MODES:
        raise ValueError(f"`mode` must be one of {', '.join(PAUSE_MODES)}; got {mode!r}.")
    return mode


@dataclass
class ContinueGenerationReqInput:
    pass
