"""The control routes' bodies (/pause_generation, the weight routes, /start_profile): checked
strictly against their documented models (openapi_docs: the spec is the validator) and turned into
the scheduler's messages. The Engine methods take the same fields."""

from __future__ import annotations

from typing import Any, List, Optional, Tuple, Type, TypeVar

from pydantic import BaseModel, ValidationError

from sglang.srt.core.io_struct.to_scheduler import (
    DestroyWeightsUpdateGroupReqInput,
    GetWeightsByNameReqInput,
    InitWeightsUpdateGroupReqInput,
    ProfileReq,
    UpdateWeightFromDiskReqInput,
    UpdateWeightsFromDistributedReqInput,
    UpdateWeightsFromTensorReqInput,
)
from sglang.srt.entrypoints.openapi_docs import (
    DestroyWeightsUpdateGroupBody,
    GetWeightsByNameBody,
    InitWeightsUpdateGroupBody,
    MemoryOccupationBody,
    PauseGenerationBody,
    StartProfileBody,
    UpdateWeightsFromDiskBody,
    UpdateWeightsFromDistributedBody,
    UpdateWeightsFromTensorBody,
    UpdateWeightVersionBody,
)
from sglang.srt.model_executor.weight_sync import dtype_of

M = TypeVar("M", bound=BaseModel)


def parse_body(model: Type[M], body: Any) -> M:
    """ValueError naming the first field at fault; strict: no "yes" for a bool, no 1 for a bool."""
    if not isinstance(body, dict):
        raise ValueError("The body must be a JSON object.")
    try:
        return model.model_validate(body, strict=True)
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(x) for x in err["loc"]) or "body"
        raise ValueError(f"`{where}`: {err['msg']}.") from None


def pause_mode_of(body: Any) -> str:
    return parse_body(PauseGenerationBody, body).mode


def update_weights_of(body: Any) -> Tuple[UpdateWeightFromDiskReqInput, Optional[str]]:
    """The scheduler's message and the new weight_version label (None: keep the current one)."""
    b = parse_body(UpdateWeightsFromDiskBody, body)
    return UpdateWeightFromDiskReqInput(b.model_path, b.load_format, b.abort_all_requests), (
        b.weight_version
    )


def tensor_update_of(body: Any) -> Tuple[UpdateWeightsFromTensorReqInput, Optional[str]]:
    """Payloads stay as sent (base64 text or bytes); the scheduler rank that uses one decodes it."""
    b = parse_body(UpdateWeightsFromTensorBody, body)
    req = UpdateWeightsFromTensorReqInput(
        list(b.serialized_named_tensors), b.load_format, b.flush_cache, b.abort_all_requests
    )
    return req, b.weight_version


def distributed_update_of(
    body: Any,
) -> Tuple[UpdateWeightsFromDistributedReqInput, Optional[str]]:
    b = parse_body(UpdateWeightsFromDistributedBody, body)
    if not len(b.names) == len(b.dtypes) == len(b.shapes):
        raise ValueError("`names`, `dtypes` and `shapes` must have the same length.")
    for d in b.dtypes:
        try:
            dtype_of(d)
        except ValueError:
            raise ValueError(f"`dtypes`: {d!r} is not a torch dtype.") from None
    req = UpdateWeightsFromDistributedReqInput(
        b.names, b.dtypes, b.shapes, b.group_name, b.flush_cache, b.abort_all_requests
    )
    return req, b.weight_version


def init_group_of(body: Any) -> InitWeightsUpdateGroupReqInput:
    b = parse_body(InitWeightsUpdateGroupBody, body)
    return InitWeightsUpdateGroupReqInput(**b.model_dump())


def destroy_group_of(body: Any) -> DestroyWeightsUpdateGroupReqInput:
    return DestroyWeightsUpdateGroupReqInput(
        parse_body(DestroyWeightsUpdateGroupBody, body).group_name
    )


def get_weights_of(body: Any) -> GetWeightsByNameReqInput:
    b = parse_body(GetWeightsByNameBody, body)
    return GetWeightsByNameReqInput(b.name, b.truncate_size)


def memory_tags_of(body: Any) -> Optional[List[str]]:
    return parse_body(MemoryOccupationBody, body).tags


def weight_version_of(body: Any) -> Tuple[str, bool]:
    """(new_version, abort_all_requests)."""
    b = parse_body(UpdateWeightVersionBody, body)
    return b.new_version, b.abort_all_requests


def profile_req_of(body: Any) -> ProfileReq:
    b = parse_body(StartProfileBody, body)
    for name in ("profile_id", "profile_prefix"):
        value = getattr(b, name)
        if value is not None and (value in (".", "..") or any(c in value for c in "/\\\0")):
            raise ValueError(f"`{name}` must be a plain file name (no path separators).")
    return ProfileReq(
        start=True,
        output_dir=b.output_dir,
        num_steps=b.num_steps,
        activities=b.activities,
        with_stack=bool(b.with_stack),
        record_shapes=bool(b.record_shapes),
        profile_id=b.profile_id or b.profile_prefix,
    )
