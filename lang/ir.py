"""Intermediate representation of frontend programs: expression nodes, sampling parameters, SglFunction.

A program appends expressions to its state (`s += "text" + sgl.gen("x")`); the interpreter executes
them in order. Nodes carry data only; all behaviour lives in the interpreter and the backends.
"""

from __future__ import annotations

import dataclasses
import itertools
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

# ---------------------------------------------------------------------------------------------
# Typed generation: a dtype becomes a regex the server enforces, and the value is cast after.
# ---------------------------------------------------------------------------------------------

REGEX_INT = r"[-+]?[0-9]+[ \n]*"
REGEX_FLOAT = r"[-+]?[0-9]*\.?[0-9]+[ \n]*"
REGEX_BOOL = r"(True|False)"
REGEX_STR = r'"[^"\\\n]*"'


def _cast_str(text: str) -> str:
    t = text.strip()
    return t[1:-1] if len(t) >= 2 and t[0] == t[-1] == '"' else t


def _cast_bool(text: str) -> bool:
    t = text.strip()
    if t not in ("True", "False"):
        raise ValueError(f"expected True or False, got {text!r}")
    return t == "True"


@dataclass(frozen=True)
class DtypeRule:
    regex: str
    # Numbers have no closing delimiter: stopping at a space or newline ends them cleanly.
    extra_stop: Tuple[str, ...]
    cast: Callable[[str], Any]


DTYPE_RULES: Dict[type, DtypeRule] = {
    int: DtypeRule(REGEX_INT, (" ", "\n"), lambda t: int(t.strip())),
    float: DtypeRule(REGEX_FLOAT, (" ", "\n"), lambda t: float(t.strip())),
    str: DtypeRule(REGEX_STR, (), _cast_str),
    bool: DtypeRule(REGEX_BOOL, (), _cast_bool),
}
_DTYPE_NAMES = {"int": int, "float": float, "str": str, "bool": bool}


def normalize_dtype(dtype: Union[type, str, None]) -> Optional[type]:
    """Accept int/float/str/bool or their names; anything else is a programming error."""
    if dtype is None:
        return None
    if isinstance(dtype, str):
        dtype = _DTYPE_NAMES.get(dtype, dtype)
    if dtype not in DTYPE_RULES:
        raise ValueError(f"dtype must be one of int, float, str, bool; got {dtype!r}")
    return dtype


def cast_value(dtype: Optional[type], text: str) -> Any:
    """The variable value of a typed gen; untyped gens keep their text."""
    if dtype is None:
        return text
    try:
        return DTYPE_RULES[dtype].cast(text)
    except ValueError as e:
        raise ValueError(f"generated text {text!r} is not a valid {dtype.__name__}") from e


def _as_list(x: Union[None, str, Sequence[str]]) -> List[str]:
    if x is None:
        return []
    if isinstance(x, str):
        return [x]
    return list(x)


# ---------------------------------------------------------------------------------------------
# Sampling parameters
# ---------------------------------------------------------------------------------------------


@dataclass
class SglSamplingParams:
    """Frontend sampling parameters; per-gen overrides are merged onto the program defaults."""

    max_new_tokens: int = 128
    min_new_tokens: int = 0
    n: int = 1
    stop: Union[str, Sequence[str]] = ()
    stop_token_ids: Sequence[int] = ()
    stop_regex: Union[str, Sequence[str]] = ()
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    min_p: float = 0.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    ignore_eos: bool = False
    # Request-level logprob options (not sampling_params on the wire); None = not sent.
    return_logprob: Optional[bool] = None
    logprob_start_len: Optional[int] = None
    top_logprobs_num: Optional[int] = None
    return_text_in_logprobs: Optional[bool] = None
    json_schema: Optional[str] = None
    dtype: Optional[type] = None
    regex: Optional[str] = None

    @staticmethod
    def field_names() -> Tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(SglSamplingParams))

    def merged(self, overrides: Mapping[str, Any]) -> "SglSamplingParams":
        """A copy with every non-None override applied (None means 'inherit the default')."""
        return dataclasses.replace(self, **{k: v for k, v in overrides.items() if v is not None})

    def to_srt_kwargs(self) -> Dict[str, Any]:
        """The `sampling_params` object of a /generate request (dtype already turned into a regex)."""
        stop = _as_list(self.stop)
        regex = self.regex
        if self.dtype is not None:
            rule = DTYPE_RULES[normalize_dtype(self.dtype)]
            if regex is not None:
                warnings.warn(
                    f"dtype={self.dtype.__name__} replaces the regex {regex!r}", stacklevel=2
                )
            regex = rule.regex
            stop += [x for x in rule.extra_stop if x not in stop]
        out: Dict[str, Any] = {
            "max_new_tokens": self.max_new_tokens,
            "min_new_tokens": self.min_new_tokens,
            "n": self.n,
            "stop": stop,
            "stop_token_ids": list(self.stop_token_ids),
            "stop_regex": _as_list(self.stop_regex),
            "temperature": self.temperature,
            "top_p": self.top_p,
            "top_k": self.top_k,
            "min_p": self.min_p,
            "frequency_penalty": self.frequency_penalty,
            "presence_penalty": self.presence_penalty,
            "ignore_eos": self.ignore_eos,
        }
        # The server accepts at most one grammar; only send the one that is set.
        if regex is not None:
            out["regex"] = regex
        if self.json_schema is not None:
            out["json_schema"] = self.json_schema
        return out

    def logprob_kwargs(self) -> Dict[str, Any]:
        """Top-level /generate fields for logprobs, only those the program asked for."""
        names = (
            "return_logprob",
            "logprob_start_len",
            "top_logprobs_num",
            "return_text_in_logprobs",
        )
        return {k: getattr(self, k) for k in names if getattr(self, k) is not None}


# ---------------------------------------------------------------------------------------------
# Expression nodes
# ---------------------------------------------------------------------------------------------

_node_ids = itertools.count()


class StopTracing(Exception):
    """Raised while tracing when the program needs a value that only a real run has."""


def as_expr(x: Any) -> "SglExpr":
    if isinstance(x, SglExpr):
        return x
    if isinstance(x, str):
        return SglConstantText(x)
    raise TypeError(f"cannot append {type(x).__name__} to a program state; convert it to str first")


class SglExpr:
    def __init__(self) -> None:
        self.node_id = next(_node_ids)

    def __add__(self, other: Any) -> "SglExprList":
        return SglExprList([self, as_expr(other)])

    def __radd__(self, other: Any) -> "SglExprList":
        return SglExprList([as_expr(other), self])

    def flatten(self) -> List["SglExpr"]:
        return [self]

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if k != "node_id")
        return f"{type(self).__name__}({fields})"


class SglExprList(SglExpr):
    def __init__(self, exprs: Sequence[SglExpr]) -> None:
        super().__init__()
        self.exprs = list(exprs)

    def flatten(self) -> List[SglExpr]:
        return [leaf for e in self.exprs for leaf in e.flatten()]


class SglConstantText(SglExpr):
    def __init__(self, value: str) -> None:
        super().__init__()
        self.value = value


class SglGen(SglExpr):
    """Generate text into variable `name`; `overrides` holds only the parameters the call set."""

    def __init__(self, name: Optional[str], overrides: Dict[str, Any]) -> None:
        super().__init__()
        self.name = name
        self.overrides = overrides


class SglSelect(SglExpr):
    def __init__(
        self, name: Optional[str], choices: Sequence[str], temperature: float, choices_method: Any
    ) -> None:
        super().__init__()
        self.name = name
        self.choices = list(choices)
        self.temperature = temperature
        self.choices_method = choices_method


class SglRoleBegin(SglExpr):
    def __init__(self, role: str) -> None:
        super().__init__()
        self.role = role


class SglRoleEnd(SglExpr):
    def __init__(self, role: str) -> None:
        super().__init__()
        self.role = role


class SglVarScopeBegin(SglExpr):
    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name


class SglVarScopeEnd(SglExpr):
    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name


class SglCommitLazy(SglExpr):
    """Send the text so far to the backend as a prefill-only request (used before fork)."""


class SglConcateAndAppend(SglExpr):
    """Append to the parent what each forked state generated after the fork point."""

    def __init__(self, states: Sequence[Any]) -> None:
        super().__init__()
        self.states = list(states)


class SglArgument(SglExpr):
    """Placeholder for a program argument while tracing; using its value ends the trace."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name

    def __str__(self) -> str:
        raise StopTracing(self.name)

    def __format__(self, spec: str) -> str:
        raise StopTracing(self.name)

    def __getattr__(self, item: str) -> Any:
        if item.startswith("__"):  # protocol probes (copy, pickle, inspect) are not value uses
            raise AttributeError(item)
        raise StopTracing(self.name)

    def __getitem__(self, item: Any) -> Any:
        raise StopTracing(self.name)

    def __iter__(self) -> Any:
        raise StopTracing(self.name)

    def __len__(self) -> int:
        raise StopTracing(self.name)

    def __bool__(self) -> bool:
        raise StopTracing(self.name)


# ---------------------------------------------------------------------------------------------
# Programs
# ---------------------------------------------------------------------------------------------
