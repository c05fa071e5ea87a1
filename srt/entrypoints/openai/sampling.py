"""Translate an OpenAI request's sampling fields into the native `sampling_params` dict.

Only fields the client actually set are passed on, so the runtime's own defaults stay the single
source of truth (SamplingParams validates ranges again; its ValueErrors become 400s).
"""

from __future__ import annotations

import json
from typing import Any, Dict, Optional

from sglang.srt.constrained.base_grammar_backend import ANY_JSON, ANY_JSON_OBJECT
from sglang.srt.entrypoints.errors import ApiError
from sglang.srt.entrypoints.openai.protocol import ResponseFormat, SamplingFields

_OPTIONAL = (
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "frequency_penalty",
    "presence_penalty",
    "repetition_penalty",
    "stop",
    "stop_token_ids",
    "stop_regex",
    "regex",
    "ebnf",
    "json_schema",
    "structural_tag",
)
# Fields that each constrain the whole output; at most one may be set.
CONSTRAINT_FIELDS = ("json_schema", "regex", "ebnf", "structural_tag")
_FLAGS = ("ignore_eos", "no_stop_trim", "skip_special_tokens", "spaces_between_special_tokens")


def build_sampling_params(req: SamplingFields, max_new_tokens: Optional[int]) -> Dict[str, Any]:
    sp: Dict[str, Any] = {
        "max_new_tokens": max_new_tokens,
        "min_new_tokens": req.min_tokens,
        "n": req.n,
    }
    for name in _OPTIONAL:
        value = getattr(req, name)
        if value is not None:
            sp[name] = value
    for name in _FLAGS:
        sp[name] = getattr(req, name)
    if req.seed is not None:
        sp["sampling_seed"] = req.seed
    if req.logit_bias:
        sp["logit_bias"] = dict(
            req.logit_bias
        )  # SamplingParams checks ids and the [-100, 100] range
    schema = response_format_schema(req.response_format)
    if schema is not None:
        if any(sp.get(k) is not None for k in CONSTRAINT_FIELDS):
            raise ApiError(
                400,
                "response_format cannot be combined with json_schema, regex, ebnf or structural_tag.",
                "response_format",
            )
        sp["json_schema"] = schema
    return sp


def response_format_schema(fmt: Optional[ResponseFormat]) -> Optional[str]:
    """The json_schema string a response_format asks for; None for plain text."""
    if fmt is None or fmt.type == "text":
        return None
    if fmt.type == "json_object":
        return ANY_JSON_OBJECT
    if fmt.json_schema is None:
        raise ApiError(
            400,
            "response_format of type json_schema needs a `json_schema` object.",
            "response_format",
        )
    if fmt.json_schema.schema_ is None:
        return ANY_JSON  # a json_schema format without a schema only promises valid JSON
    return json.dumps(fmt.json_schema.schema_)
