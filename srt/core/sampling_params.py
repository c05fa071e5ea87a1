"""Per-request sampling parameters, validated before a request can reach the scheduler."""

from __future__ import annotations

import math
import re
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, Dict, List, Optional, Union

_MAX_NEW_TOKENS_DEFAULT = 128
_TOP_K_ALL = 1 << 30


@dataclass
class SamplingParams:
    max_new_tokens: Optional[int] = _MAX_NEW_TOKENS_DEFAULT
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
    json_schema: Optional[str] = None
    regex: Optional[str] = None
    ebnf: Optional[str] = None
    structural_tag: Optional[str] = None
    custom_params: Optional[Dict[str, Any]] = None
    # SGLang fields of features not built here: accepted at their neutral value only (see verify).
    beam_width: Optional[int] = None
    watermark: Optional[Dict[str, Any]] = None
    ebnf_full_assistant: bool = False

    # Derived by normalize(); not part of the request body.
    stop_strs: List[str] = field(default_factory=list)
    stop_regex_list: List[str] = field(default_factory=list)
    stop_str_max_len: int = 0

    @staticmethod
    def field_names() -> List[str]:
        return [
            f.name
            for f in fields(SamplingParams)
            if f.name not in ("stop_strs", "stop_regex_list", "stop_str_max_len")
        ]

    @classmethod
    def from_dict(cls, d: Optional[Dict[str, Any]]) -> "SamplingParams":
        """Build from a request body; unknown keys and wrong types are errors (ValueError -> HTTP 400)."""
        if d is None:
            d = {}
        if not isinstance(d, dict):
            raise ValueError(f"sampling_params must be an object, got {type(d).__name__}")
        names = set(cls.field_names())
        unknown = sorted(k for k in d if k not in names)
        if unknown:
            raise ValueError(f"Unknown sampling parameter(s): {', '.join(unknown)}")
        kwargs: Dict[str, Any] = {}
        for k, v in d.items():
            kwargs[k] = _coerce(k, v)
        return cls(**kwargs)

    def verify(self, vocab_size: int) -> None:
        """Reject values that would crash or silently misbehave in the scheduler."""
        for name in (
            "temperature",
            "top_p",
            "min_p",
            "frequency_penalty",
            "presence_penalty",
            "repetition_penalty",
        ):
            v = getattr(self, name)
            if not math.isfinite(v):
                raise ValueError(f"{name} must be a finite number, got {v}")
        if self.temperature < 0.0:
            raise ValueError(f"temperature must be non-negative, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if not 0.0 <= self.min_p <= 1.0:
            raise ValueError(f"min_p must be in [0, 1], got {self.min_p}")
        if self.top_k < -1 or self.top_k == 0:
            raise ValueError(f"top_k must be -1 (disable) or at least 1, got {self.top_k}")
        if not -2.0 <= self.frequency_penalty <= 2.0:
            raise ValueError(f"frequency_penalty must be in [-2, 2], got {self.frequency_penalty}")
        if not -2.0 <= self.presence_penalty <= 2.0:
            raise ValueError(f"presence_penalty must be in [-2, 2], got {self.presence_penalty}")
        if not 0.0 < self.repetition_penalty <= 2.0:
            raise ValueError(f"repetition_penalty must be in (0, 2], got {self.repetition_penalty}")
        if self.max_new_tokens is not None and self.max_new_tokens < 0:
            raise ValueError(f"max_new_tokens must be at least 0, got {self.max_new_tokens}")
        if self.min_new_tokens < 0:
            raise ValueError(f"min_new_tokens must be at least 0, got {self.min_new_tokens}")
        if self.max_new_tokens is not None and self.min_new_tokens > self.max_new_tokens:
            raise ValueError(
                f"min_new_tokens ({self.min_new_tokens}) must be <= max_new_tokens ({self.max_new_tokens})"
            )
        if (
            not 1 <= self.n <= MAX_N
        ):  # the OpenAI bound; n fans out to n requests before any is checked
            raise ValueError(f"n must be in [1, {MAX_N}], got {self.n}")
        if self.stream_interval is not None and self.stream_interval < 1:
            raise ValueError(f"stream_interval must be at least 1, got {self.stream_interval}")
        for name in ("stop", "stop_regex"):
            strs = _as_list(getattr(self, name))
            if len(strs) > MAX_STOP_STRINGS:
                raise ValueError(
                    f"{name} has {len(strs)} entries; at most {MAX_STOP_STRINGS} are allowed"
                )
            if any(len(x) > MAX_STOP_STRING_CHARS for x in strs):
                raise ValueError(
                    f"{name} entries must be at most {MAX_STOP_STRING_CHARS} characters long"
                )
        if self.stop_token_ids:
            for t in self.stop_token_ids:
                if not 0 <= t < vocab_size:
                    raise ValueError(
                        f"stop_token_ids entry {t} is outside the vocabulary [0, {vocab_size})"
                    )
        if self.logit_bias:
            for k, v in self.logit_bias.items():
                try:
                    tid = int(k)
                except (TypeError, ValueError):
                    raise ValueError(f"logit_bias keys must be token ids, got {k!r}") from None
                if not 0 <= tid < vocab_size:
                    raise ValueError(
                        f"logit_bias token id {tid} is outside the vocabulary [0, {vocab_size})"
                    )
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                    raise ValueError(f"logit_bias value for {k} must be a number, got {v!r}")
                if not -LOGIT_BIAS_LIMIT <= v <= LOGIT_BIAS_LIMIT:
                    # OpenAI's range: -100 already bans a token; larger magnitudes only overflow to -inf.
                    raise ValueError(f"logit_bias value for {k} must be in [-100, 100], got {v}")
        for name, feature in _UNBUILT.items():
            if getattr(self, name) not in (None, False):
                raise ValueError(f"{name} asks for {feature}, which this server does not support")
        grammars = [
            x
            for x in (self.json_schema, self.regex, self.ebnf, self.structural_tag)
            if x is not None
        ]
        if len(grammars) > 1:
            raise ValueError("Only one of json_schema, regex, ebnf and structural_tag may be set")
        if self.regex is not None:
            try:
                re.compile(self.regex)
            except re.error as e:
                raise ValueError(f"Invalid regex: {e}") from None
        for r in self.stop_regex_list or _as_list(self.stop_regex):
            try:
                re.compile(r)
            except re.error as e:
                raise ValueError(f"Invalid stop_regex {r!r}: {e}") from None

    def normalize(self, tokenizer: Any = None) -> None:
        """Derive stop-string bookkeeping; temperature 0 means greedy."""
        self.stop_strs = [s for s in _as_list(self.stop) if s]
        self.stop_regex_list = [s for s in _as_list(self.stop_regex) if s]
        if self.stop_strs:
            if tokenizer is not None:
                # Longest stop string measured in tokens, plus one, bounds the tail we decode.
                self.stop_str_max_len = max(
                    len(tokenizer.encode(s, add_special_tokens=False)) for s in self.stop_strs
                )
            else:
                self.stop_str_max_len = max(len(s) for s in self.stop_strs)
        if self.stop_regex_list:
            self.stop_str_max_len = max(self.stop_str_max_len, 64)
        if self.top_k == -1:
            self.top_k = _TOP_K_ALL

    def is_greedy(self) -> bool:
        return self.temperature <= 1e-6 or self.top_k == 1

    def has_grammar(self) -> bool:
        return any(
            x is not None for x in (self.json_schema, self.regex, self.ebnf, self.structural_tag)
        )

    def to_dict(self) -> Dict[str, Any]:
        return {k: getattr(self, k) for k in self.field_names()}


MAX_N = 128
# OpenAI's documented range for logit_bias values.
LOGIT_BIAS_LIMIT = 100.0
# Each stop string is tokenized when a request arrives and scanned after every output token, so
# what one request may carry is bounded (OpenAI allows 4; chat templates add a few more).
MAX_STOP_STRINGS = 128
MAX_STOP_STRING_CHARS = 1024
MAX_STOP_TOKEN_IDS = 1024
_UNBUILT = {
    "beam_width": "beam search",
    "watermark": "watermarking",
    "ebnf_full_assistant": "full-assistant EBNF",
}
_INT_FIELDS = {
    "max_new_tokens",
    "min_new_tokens",
    "top_k",
    "stream_interval",
    "sampling_seed",
    "n",
    "beam_width",
}
_FLOAT_FIELDS = {
    "temperature",
    "top_p",
    "min_p",
    "frequency_penalty",
    "presence_penalty",
    "repetition_penalty",
}
_BOOL_FIELDS = {
    "ignore_eos",
    "skip_special_tokens",
    "spaces_between_special_tokens",
    "no_stop_trim",
    "ebnf_full_assistant",
}
_STR_FIELDS = {"json_schema", "regex", "ebnf", "structural_tag"}


def _coerce(name: str, v: Any) -> Any:
    """Type-check one body field; JSON gives us ints for floats and the like."""
    if v is None:  # JSON null (OpenAI-style clients send them) means "the default", for every field
        return _default(name)
    if name in _INT_FIELDS:
        if (
            isinstance(v, bool)
            or not isinstance(v, (int, float))
            or (isinstance(v, float) and not v.is_integer())
        ):
            raise ValueError(f"{name} must be an integer, got {v!r}")
        return int(v)
    if name in _FLOAT_FIELDS:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ValueError(f"{name} must be a number, got {v!r}")
        return float(v)
    if name in _BOOL_FIELDS:
        if not isinstance(v, bool):
            raise ValueError(f"{name} must be a boolean, got {v!r}")
        return v
    if name in _STR_FIELDS:
        if name in ("json_schema", "structural_tag") and isinstance(v, (dict, list)):
            import json

            return json.dumps(v)
        if not isinstance(v, str):
            raise ValueError(f"{name} must be a string, got {type(v).__name__}")
        return v
    if name in ("stop", "stop_regex"):
        if isinstance(v, str):
            return v
        if (
            isinstance(v, list) and len(v) > MAX_STOP_STRINGS
        ):  # refused before anything looks at the entries
            raise ValueError(f"{name} has {len(v)} entries; at most {MAX_STOP_STRINGS} are allowed")
        if isinstance(v, list) and all(isinstance(s, str) for s in v):
            return v
        raise ValueError(f"{name} must be a string or a list of strings")
    if name == "stop_token_ids":
        if isinstance(v, int) and not isinstance(v, bool):
            return [v]
        if isinstance(v, list) and len(v) > MAX_STOP_TOKEN_IDS:
            raise ValueError(
                f"stop_token_ids has {len(v)} entries; at most {MAX_STOP_TOKEN_IDS} are allowed"
            )
        if isinstance(v, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in v):
            return v
        raise ValueError("stop_token_ids must be a list of integers")
    if name == "logit_bias":
        if not isinstance(v, dict):
            raise ValueError("logit_bias must be an object mapping token ids to numbers")
        return {str(k): val for k, val in v.items()}
    if name == "custom_params":
        if not isinstance(v, dict):
            raise ValueError("custom_params must be an object")
        return v
    return v


def _default(name: str) -> Any:
    for f in fields(SamplingParams):
        if f.name == name:
            return f.default_factory() if f.default_factory is not MISSING else f.default
    return None


def _as_list(x: Optional[Union[str, List[str]]]) -> List[str]:
    if x is None:
        return []
    if isinstance(x, str):
        return [x]
    return list(x)
