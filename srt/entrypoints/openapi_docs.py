"""What /openapi.json says about each route's body and answers.

The routes read raw requests and validate them themselves (for exact 400 messages), so FastAPI sees
no body parameters. These models describe the bodies those validators accept, so that tools that
generate clients or fuzz from the spec see every field. The two big bodies are read off the
dataclasses the validators fill (GenerateReqInput, SamplingParams), so they cannot drift apart.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Annotated, Any, Dict, List, Literal, Optional, Type, Union

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel, ConfigDict, Field, create_model

from sglang.srt.core.generate_input import GenerateReqInput
from sglang.srt.core.sampling_params import SamplingParams

_REF = "#/components/schemas/{model}"


def _doc_model(
    name: str, dataclass_type: type, names: Any, doc: str, **overrides: Any
) -> Type[BaseModel]:
    """A pydantic model of a dataclass's request fields (types and defaults read from it), for the spec."""
    hints = typing.get_type_hints(dataclass_type)
    defaults = {f.name: f.default for f in dataclasses.fields(dataclass_type)}
    spec = {n: overrides.get(n, (hints[n], defaults[n])) for n in names}
    extra = "forbid" if dataclass_type is SamplingParams else "allow"
    return create_model(name, __doc__=doc, __config__=ConfigDict(extra=extra), **spec)


_JSON_OR_TEXT = (Optional[Union[str, Dict[str, Any]]], None)  # a schema may be sent as an object
SamplingParamsBody = _doc_model(
    "SamplingParamsBody",
    SamplingParams,
    SamplingParams.field_names(),
    "sampling_params of /generate (unknown keys are refused).",
    json_schema=_JSON_OR_TEXT,
    structural_tag=_JSON_OR_TEXT,
)
GenerateBody = _doc_model(
    "GenerateBody",
    GenerateReqInput,
    GenerateReqInput._FIELDS,
    "/generate: one prompt (text or input_ids) or a batch (lists of them). SGLang's other fields are "
    "accepted too (see generate_fields.py); those of features not built here only when null or false.",
    sampling_params=(Optional[Union[SamplingParamsBody, List[SamplingParamsBody]]], None),
)


class AbortBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    rid: Optional[str] = None
    abort_all: bool = False


class PauseGenerationBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    mode: Literal["abort", "retract", "in_place"] = "abort"


class UpdateWeightsFromDiskBody(BaseModel):
    """Fields the scheduler does not read are accepted as SGLang defines them (the prefix cache is
    always flushed; loading is synchronous)."""

    model_config = ConfigDict(extra="forbid")
    model_path: str = Field(min_length=1)
    load_format: Optional[str] = None
    abort_all_requests: bool = False
    weight_version: Optional[str] = None
    flush_cache: bool = True
    is_async: bool = False
    torch_empty_cache: bool = False
    keep_pause: bool = False
    recapture_cuda_graph: bool = False
    token_step: int = 0


class UpdateWeightsFromTensorBody(BaseModel):
    """serialized_named_tensors: base64 MultiprocessingSerializer payloads (sglang.srt.utils), one
    per tensor-parallel rank or one for all. Only torch's tensor constructors are unpickled."""

    model_config = ConfigDict(extra="forbid")
    serialized_named_tensors: List[str] = Field(min_length=1)
    load_format: Optional[Literal["auto", "direct", "flattened_bucket"]] = None
    flush_cache: bool = True
    abort_all_requests: bool = False
    weight_version: Optional[str] = None
    disable_draft_model: Optional[bool] = None
    torch_empty_cache: bool = False


class InitWeightsUpdateGroupBody(BaseModel):
    """The trainer is rank 0 and broadcasts; this server's ranks are rank_offset + 0, 1, ..."""

    model_config = ConfigDict(extra="forbid")
    master_address: str = Field(min_length=1)
    master_port: int = Field(ge=1, le=65535)
    rank_offset: int = Field(ge=1)
    world_size: int = Field(ge=2)
    group_name: str = Field("weight_update_group", min_length=1)
    backend: Literal["nccl", "gloo"] = "nccl"


class DestroyWeightsUpdateGroupBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    group_name: str = Field("weight_update_group", min_length=1)


class UpdateWeightsFromDistributedBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    names: List[str] = Field(min_length=1)
    dtypes: List[str] = Field(min_length=1)
    shapes: List[List[Annotated[int, Field(ge=0)]]] = Field(min_length=1)
    group_name: str = Field("weight_update_group", min_length=1)
    flush_cache: bool = True
    abort_all_requests: bool = False
    weight_version: Optional[str] = None
    load_format: Optional[Literal["auto"]] = None


class GetWeightsByNameBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1)
    truncate_size: int = Field(100, ge=1)


class MemoryOccupationBody(BaseModel):
    """tags: which memory (all of it when absent)."""

    model_config = ConfigDict(extra="forbid")
    tags: Optional[List[Literal["weights", "kv_cache", "cuda_graph"]]] = None


class UpdateWeightVersionBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    new_version: str = Field(min_length=1)
    abort_all_requests: bool = False


class StartProfileBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    output_dir: Optional[str] = None
    start_step: Optional[int] = None
    num_steps: Optional[int] = Field(None, gt=0)
    activities: Optional[List[Literal["CPU", "GPU", "MEM"]]] = Field(None, min_length=1)
    with_stack: Optional[bool] = None
    record_shapes: Optional[bool] = None
    profile_by_stage: bool = False
    merge_profiles: bool = False
    profile_id: Optional[str] = None
    profile_prefix: Optional[str] = None


class TokenizeBody(BaseModel):
    prompt: Union[str, List[str]]
    add_special_tokens: bool = True


class DetokenizeBody(BaseModel):
    tokens: List[int]


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: Optional[str] = None
    code: Union[int, str, None] = None


class ErrorBody(BaseModel):
    object: str = "error"
    message: str
    type: str
    param: Optional[str] = None
    code: int
    error: ErrorDetail


_ERROR_STATUSES = {
    "400": "Bad request",
    "401": "Missing or wrong API key",
    "413": "Body too large",
    "503": "Overloaded",
}


def route_doc(body: Optional[Type[BaseModel]] = None, stream: bool = False) -> Dict[str, Any]:
    """openapi_extra for a route: its JSON body (if any) and its error answers."""
    doc: Dict[str, Any] = {
        "responses": {
            code: _json_response(ErrorBody, desc) for code, desc in _ERROR_STATUSES.items()
        },
    }
    if stream:
        doc["responses"]["200"] = {
            "description": "JSON, or with `stream: true` server-sent events ending in `data: [DONE]`",
            "content": {
                "application/json": {"schema": {"type": "object"}},
                "text/event-stream": {},
            },
        }
    if body is not None:
        doc["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": {"$ref": _REF.format(model=body.__name__)}}},
        }
    return doc


def _json_response(model: Type[BaseModel], description: str) -> Dict[str, Any]:
    return {
        "description": description,
        "content": {"application/json": {"schema": {"$ref": _REF.format(model=model.__name__)}}},
    }


def install_openapi(app: FastAPI, models: List[Type[BaseModel]]) -> None:
    """Generate the spec once, with the body models (and what they reference) as components."""

    def openapi() -> Dict[str, Any]:
        if app.openapi_schema is None:
            spec = get_openapi(title=app.title, version=app.version, routes=app.routes)
            schemas = spec.setdefault("components", {}).setdefault("schemas", {})
            for model in [*models, ErrorBody]:
                js = model.model_json_schema(ref_template=_REF)
                schemas.update(js.pop("$defs", {}))
                schemas[model.__name__] = js
            app.openapi_schema = spec
        return app.openapi_schema

    app.openapi = openapi
