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
    _check_fields(body, UPDATE_WEIGHTS_FIELDS)
    if not body.get("model_path"):
        raise ValueError("`model_path` must be a non-empty string.")
    return UpdateWeightFromDiskReqInput(
        body["model_path"], body.get("load_format"), body.get("abort_all_requests", False)
    )


PROFILE_ACTIVITIES = ("CPU", "GPU", "MEM")


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


# SGLang's /start_profile fields: name -> the types accepted (profile_by_stage and merge_profiles
# are accepted and read as their defaults).
PROFILE_FIELDS = {
    "output_dir": (str, type(None)),
    "start_step": (int, type(None)),
    "num_steps": (int, type(None)),
    "activities": (list, type(None)),
    "with_stack": (bool, type(None)),
    "record_shapes": (bool, type(None)),
    "profile_by_stage": (bool,),
    "merge_profiles": (bool,),
    "profile_id": (str, type(None)),
    "profile_prefix": (str, type(None)),
}


def _check_fields(body: Any, fields: dict) -> None:
    for name, value in body.items():
        types = fields[name]
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            raise ValueError(f"`{name}` has the wrong type ({type(value).__name__}).")


def profile_req_of(body: Any) -> ProfileReq:
    """The scheduler's message for a /start_profile body (empty: profile until /stop_profile)."""
    if not isinstance(body, dict):
        raise ValueError("The body must be a JSON object.")
    unknown = sorted(set(body) - set(PROFILE_FIELDS))
    if unknown:
        raise ValueError(f"Unknown field(s): {', '.join(unknown)}.")
    _check_fields(body, PROFILE_FIELDS)
    acts = body.get("activities")
    if acts is not None and (not acts or any(a not in PROFILE_ACTIVITIES for a in acts)):
        raise ValueError(
            f"`activities` must be a non-empty list of {', '.join(PROFILE_ACTIVITIES)}."
        )
    if body.get("num_steps") is not None and body["num_steps"] <= 0:
        raise ValueError("`num_steps` must be positive.")
    return ProfileReq(
        start=True,
        output_dir=body.get("output_dir"),
        num_steps=body.get("num_steps"),
        activities=acts,
        with_stack=bool(body.get("with_stack")),
        record_shapes=bool(body.get("record_shapes")),
        profile_id=body.get("profile_id") or body.get("profile_prefix"),
    )
