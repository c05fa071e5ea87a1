"""What /openapi.json says about each route's body and answers.

The routes read raw requests and validate them themselves (for exact 400 messages), so FastAPI sees
no body parameters. These models describe the bodies those validators accept, so that tools that
generate clients or fuzz from the spec see every field; test_openapi checks they match the
validators' own field lists.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Type, Union

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel, ConfigDict

_REF = "#/components/schemas/{model}"


class SamplingParamsBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    max_new_tokens: Optional[int] = 128
    min_new_tokens: int = 0
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    min_p: float = 0.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    repetition_penalty: float = 1.0
    stop: Optional[Union[str, List[str]]] = None
    stop_token_ids: Optional[List[int]] = None
    stop_regex: Optional[Union[str, List[str]]] = None
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    no_stop_trim: bool = False
    stream_interval: Optional[int] = None
    logit_bias: Optional[Dict[str, float]] = None
    sampling_seed: Optional[int] = None
    n: int = 1
    json_schema: Optional[Union[str, Dict[str, Any]]] = None
    regex: Optional[str] = None
    ebnf: Optional[str] = None
    structural_tag: Optional[Union[str, Dict[str, Any]]] = None
    custom_params: Optional[Dict[str, Any]] = None
    beam_width: Optional[int] = None
    watermark: Optional[Dict[str, Any]] = None
    ebnf_full_assistant: bool = False


class GenerateBody(BaseModel):
    """/generate: one prompt (text or input_ids) or a batch (lists of them). SGLang's other fields
    are accepted too (see generate_fields.py); those of features not built here only when null/false."""

    model_config = ConfigDict(extra="allow")
    text: Optional[Union[str, List[str]]] = None
    input_ids: Optional[Union[List[int], List[List[int]]]] = None
    sampling_params: Optional[Union[SamplingParamsBody, List[SamplingParamsBody]]] = None
    rid: Optional[Union[str, List[str]]] = None
    return_logprob: Optional[Union[bool, List[bool]]] = False
    logprob_start_len: Optional[Union[int, List[int]]] = -1
    top_logprobs_num: Optional[Union[int, List[int]]] = 0
    return_text_in_logprobs: bool = False
    stream: bool = False
    priority: Optional[int] = None
    extra_key: Optional[Union[str, List[str]]] = None
    log_metrics: bool = True
    background: bool = False
    no_logs: bool = False
    received_time: Optional[float] = None


class AbortBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    rid: Optional[str] = None
    abort_all: bool = False


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
        "responses": {code: _json_response(ErrorBody, desc) for code, desc in _ERROR_STATUSES.items()},
    }
    if stream:
        doc["responses"]["200"] = {
            "description": "JSON, or with `stream: true` server-sent events ending in `data: [DONE]`",
            "content": {"application/json": {"schema": {"type": "object"}}, "text/event-stream": {}},
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
