"""The control routes' bodies (/pause_generation, /update_weights_from_disk, /start_profile): checked
strictly against their documented models (openapi_docs: the spec is the validator) and turned into
the scheduler's messages. The Engine methods take the same fields."""

from __future__ import annotations

from typing import Any, Optional, Tuple, Type, TypeVar

from pydantic import BaseModel, ValidationError

from sglang.srt.core.io_struct.to_scheduler import ProfileReq, UpdateWeightFromDiskReqInput
from sglang.srt.entrypoints.openapi_docs import (
    PauseGenerationBody,
    StartProfileBody,
    UpdateWeightsFromDiskBody,
)

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
