"""SglFunction: a decorated frontend program, and how it is run (once, or over a batch)."""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from sglang.lang.interpreter import run_program, run_program_batch
from sglang.lang.ir import SglSamplingParams

_SAMPLING_NAMES = frozenset(SglSamplingParams.field_names())


def _split_run_kwargs(kwargs: Dict[str, Any]) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """run()/run_batch() keywords are either sampling defaults or program arguments."""
    sampling = {k: kwargs.pop(k) for k in list(kwargs) if k in _SAMPLING_NAMES}
    return sampling, kwargs


class SglFunction:
    """A frontend program: a Python function whose first parameter is the state `s`."""

    def __init__(
        self, func: Callable[..., Any], bind_arguments: Optional[Dict[str, Any]] = None
    ) -> None:
        params = list(inspect.signature(func).parameters.values())
        if not params or params[0].name != "s":
            raise TypeError(
                f"the first parameter of an sgl.function must be named 's' ({func.__name__})"
            )
        self.func = func
        self.arg_names = [p.name for p in params[1:]]
        self.arg_defaults = {
            p.name: p.default for p in params[1:] if p.default is not inspect.Parameter.empty
        }
        self.bind_arguments = dict(bind_arguments or {})
        functools.update_wrapper(self, func)

    def bind(self, **kwargs: Any) -> "SglFunction":
        unknown = [k for k in kwargs if k not in self.arg_names]
        if unknown:
            raise TypeError(f"{self.func.__name__}() has no parameter(s) {unknown}")
        return SglFunction(self.func, {**self.bind_arguments, **kwargs})

    def arguments(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Dict[str, Any]:
        """Map positional and keyword arguments onto parameter names (bound ones fill the gaps)."""
        if len(args) > len(self.arg_names):
            raise TypeError(
                f"{self.func.__name__}() takes {len(self.arg_names)} arguments after s, got {len(args)}"
            )
        out = {**self.bind_arguments, **dict(zip(self.arg_names, args))}
        for k, v in kwargs.items():
            if k not in self.arg_names:
                raise TypeError(f"{self.func.__name__}() got an unexpected argument {k!r}")
            out[k] = v
        missing = [n for n in self.arg_names if n not in out and n not in self.arg_defaults]
        if missing:
            raise TypeError(f"{self.func.__name__}() is missing argument(s) {missing}")
        return out

    def run(self, *args: Any, stream: bool = False, backend: Any = None, **kwargs: Any) -> Any:
        """Run once. Keywords named like SglSamplingParams fields set the defaults of every gen."""
        sampling, program_kwargs = _split_run_kwargs(dict(kwargs))
        return run_program(
            self,
            resolve_backend(backend),
            self.arguments(args, program_kwargs),
            SglSamplingParams().merged(sampling),
            stream=stream,
        )

    def run_batch(
        self,
        batch_kwargs: Sequence[Mapping[str, Any]],
        *,
        backend: Any = None,
        num_threads: Union[int, str] = "auto",
        progress_bar: bool = False,
        **sampling: Any,
    ) -> List[Any]:
        """Run once per argument dict on a thread pool; returns the states in input order."""
        sampling, extra = _split_run_kwargs(dict(sampling))
        if extra:
            raise TypeError(f"unknown run_batch keyword(s) {sorted(extra)}")
        arguments = [self.arguments((), kw) for kw in batch_kwargs]
        return run_program_batch(
            self,
            resolve_backend(backend),
            arguments,
            SglSamplingParams().merged(sampling),
            num_threads=num_threads,
            progress_bar=progress_bar,
        )

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.run(*args, **kwargs)


def resolve_backend(backend: Any) -> Any:
    """The given backend, else the default one set with sgl.set_default_backend."""
    from sglang.lang.global_config import global_config

    backend = backend or global_config.default_backend
    if backend is None:
        raise RuntimeError(
            "no backend: pass backend=... or call sgl.set_default_backend(...) first"
        )
    return backend
