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


@dataclass
class UpdateWeightFromDiskReqInput:
    """Replace the weights with another checkpoint of the same model. Running requests finish on
    the old weights first (or are aborted, with abort_all_requests); new ones wait meanwhile. The
    prefix cache, computed with the old weights, is flushed."""

    model_path: str
    load_format: Optional[str] = None
    abort_all_requests: bool = False


# SGLang's /update_weights_from_disk fields: name -> the types accepted. Those the scheduler does not
# read are accepted as SGLang defines them (the cache is always flushed; loading is synchronous).
UPDATE_WEIGHTS_FIELDS = {
    "model_path": (str,),
    "load_format": (str, type(None)),
    "abort_all_requests": (bool,),
    "weight_version": (str, type(None)),
    "flush_cache": (bool,),
    "is_async": (bool,),
    "torch_empty_cache": (bool,),
    "keep_pause": (bool,),
    "recapture_cuda_graph": (bool,),
    "token_step": (int,),
}


def update_weights_of(body: Any) -> UpdateWeightFromDiskReqInput:
    """The scheduler's message for a /update_weights_from_disk body; ValueError names the field."""
    if not isinstance(body, dict):
        raise ValueError("The body must be a JSON object with `model_path`.")
    unknown = sorted(set(body) - set(UPDATE_WEIGHTS_FIELDS))
    if unknown:
        raise ValueError(f"Unknown field(s): {', '.join(unknown)}.")
    for name, value in body.items():
        types = UPDATE_WEIGHTS_FIELDS[name]
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            raise ValueError(f"`{name}` has the wrong type ({type(value).__name__}).")
    if not body.get("model_path"):
        raise ValueError("`model_path` must be a non-empty string.")
    return UpdateWeightFromDiskReqInput(
        body["model_path"], body.get("load_format"), body.get("abort_all_requests", False)
    )
