"""Public API of the frontend language, re-exported as `import sglang as sgl`."""

from __future__ import annotations

import json
import re
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

from sglang.lang.backend.base_backend import BaseBackend
from sglang.lang.backend.engine_backend import EngineBackend
from sglang.lang.backend.runtime_endpoint import RuntimeEndpoint
from sglang.lang.choices import (
    ChoicesDecision,
    ChoicesSamplingMethod,
    greedy_token_selection,
    token_length_normalized,
    unconditional_likelihood_normalized,
)
from sglang.lang.function import SglFunction, resolve_backend
from sglang.lang.global_config import global_config
from sglang.lang.ir import (
    REGEX_BOOL,
    REGEX_FLOAT,
    REGEX_INT,
    REGEX_STR,
    SglExpr,
    SglExprList,
    SglGen,
    SglRoleBegin,
    SglRoleEnd,
    SglSelect,
    as_expr,
    normalize_dtype,
)

__all__ = [
    "BaseBackend",
    "ChoicesDecision",
    "ChoicesSamplingMethod",
    "EngineBackend",
    "REGEX_BOOL",
    "REGEX_FLOAT",
    "REGEX_INT",
    "REGEX_STR",
    "RuntimeEndpoint",
    "SglFunction",
    "assistant",
    "assistant_begin",
    "assistant_end",
    "flush_cache",
    "function",
    "gen",
    "gen_int",
    "gen_string",
    "get_server_info",
    "greedy_token_selection",
    "select",
    "set_default_backend",
    "system",
    "system_begin",
    "system_end",
    "token_length_normalized",
    "unconditional_likelihood_normalized",
    "user",
    "user_begin",
    "user_end",
]


def function(func: Optional[Callable[..., Any]] = None) -> Any:
    """Decorator: `@sgl.function` (or `@sgl.function()`) over `def prog(s, ...)`."""
    if func is None:
        return SglFunction
    return SglFunction(func)


def set_default_backend(backend: BaseBackend) -> None:
    global_config.default_backend = backend


def flush_cache(backend: Optional[BaseBackend] = None) -> None:
    resolve_backend(backend).flush_cache()


def get_server_info(backend: Optional[BaseBackend] = None) -> Dict[str, Any]:
    return resolve_backend(backend).get_server_info()


def gen(
    name: Optional[str] = None,
    max_tokens: Optional[int] = None,
    min_tokens: Optional[int] = None,
    stop: Union[None, str, Sequence[str]] = None,
    stop_token_ids: Optional[Sequence[int]] = None,
    stop_regex: Union[None, str, Sequence[str]] = None,
    temperature: Optional[float] = None,
    top_p: Optional[float] = None,
    top_k: Optional[int] = None,
    min_p: Optional[float] = None,
    frequency_penalty: Optional[float] = None,
    presence_penalty: Optional[float] = None,
    ignore_eos: Optional[bool] = None,
    return_logprob: Optional[bool] = None,
    logprob_start_len: Optional[int] = None,
    top_logprobs_num: Optional[int] = None,
    return_text_in_logprobs: Optional[bool] = None,
    dtype: Union[None, type, str] = None,
    choices: Optional[Sequence[str]] = None,
    choices_method: Optional[ChoicesSamplingMethod] = None,
    regex: Optional[str] = None,
    json_schema: Union[None, str, Dict[str, Any]] = None,
) -> SglExpr:
    """Generate into variable `name`. Unset parameters inherit the run's defaults. With `choices` this
    is a `select`; with `dtype` (int/float/str/bool) the output is constrained and cast."""
    if choices is not None:
        return select(
            name,
            choices,
            temperature=temperature or 0.0,
            choices_method=choices_method or token_length_normalized,
        )
    if regex is not None:
        try:
            re.compile(regex)
        except re.error as e:
            raise ValueError(f"invalid regex {regex!r}: {e}") from None
    if isinstance(json_schema, dict):
        json_schema = json.dumps(json_schema)
    overrides = {
        "max_new_tokens": max_tokens,
        "min_new_tokens": min_tokens,
        "stop": stop,
        "stop_token_ids": stop_token_ids,
        "stop_regex": stop_regex,
        "temperature": temperature,
        "top_p": top_p,
        "top_k": top_k,
        "min_p": min_p,
        "frequency_penalty": frequency_penalty,
        "presence_penalty": presence_penalty,
        "ignore_eos": ignore_eos,
        "return_logprob": return_logprob,
        "logprob_start_len": logprob_start_len,
        "top_logprobs_num": top_logprobs_num,
        "return_text_in_logprobs": return_text_in_logprobs,
        "dtype": normalize_dtype(dtype),
        "regex": regex,
        "json_schema": json_schema,
    }
    return SglGen(name, {k: v for k, v in overrides.items() if v is not None})


def gen_int(name: Optional[str] = None, **kwargs: Any) -> SglExpr:
    return gen(name, dtype=int, **kwargs)


def gen_string(name: Optional[str] = None, **kwargs: Any) -> SglExpr:
    return gen(name, dtype=str, **kwargs)


def select(
    name: Optional[str] = None,
    choices: Optional[Sequence[str]] = None,
    temperature: float = 0.0,
    choices_method: ChoicesSamplingMethod = token_length_normalized,
) -> SglExpr:
    """Append the most likely of `choices` (scored from prompt logprobs) and store it in `name`."""
    if not choices:
        raise ValueError("select needs at least one choice")
    if any(not isinstance(c, str) or not c for c in choices):
        raise ValueError("choices must be non-empty strings")
    if temperature > 1e-5:
        raise ValueError("select scores choices by likelihood; temperature must be 0")
    return SglSelect(name, list(choices), temperature, choices_method)


def _role(role: str, expr: Any) -> SglExpr:
    parts: List[SglExpr] = [SglRoleBegin(role)]
    if expr is not None:
        parts.append(as_expr(expr))
    return SglExprList(parts + [SglRoleEnd(role)])


def system(expr: Any = None) -> SglExpr:
    return _role("system", expr)


def user(expr: Any = None) -> SglExpr:
    return _role("user", expr)


def assistant(expr: Any = None) -> SglExpr:
    return _role("assistant", expr)


def system_begin() -> SglExpr:
    return SglRoleBegin("system")


def system_end() -> SglExpr:
    return SglRoleEnd("system")


def user_begin() -> SglExpr:
    return SglRoleBegin("user")


def user_end() -> SglExpr:
    return SglRoleEnd("user")


def assistant_begin() -> SglExpr:
    return SglRoleBegin("assistant")


def assistant_end() -> SglExpr:
    return SglRoleEnd("assistant")
