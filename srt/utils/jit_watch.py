"""Report Triton kernels compiled while serving.

A kernel is compiled once per specialisation (which pointer arguments are 16-byte aligned, which
integer arguments are 1 or divisible by 16, the constexprs). A variant first needed mid-serving
stalls the whole batch for the compile (typically 0.3-2 s), which shows up as a TTFT / ITL tail.
Once the model runner is ready, every further compile is logged with its time, so such stalls can
be traced to the kernel and argument that caused them.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable, Dict, Optional

logger = logging.getLogger(__name__)

_state: Dict[str, Any] = {"installed": False, "serving": False, "starts": {}, "counts": {}}


def _name(kw: Dict[str, Any]) -> str:
    fn = kw.get("fn")
    return getattr(fn, "name", None) or str(kw.get("repr", "?")).split("[", 1)[0]


def _on_miss(chain: Optional[Callable]) -> Callable:
    def hook(**kw: Any) -> Optional[bool]:
        _state["starts"][str(kw.get("key"))] = time.perf_counter()
        return chain(**kw) if chain else None  # a truthy answer would make Triton skip the compile

    return hook


def _on_compiled(chain: Optional[Callable]) -> Callable:
    def hook(**kw: Any) -> Optional[bool]:
        try:
            _record(kw)
        except Exception:  # bookkeeping must never break a kernel launch
            logger.debug("jit_watch could not record a compile", exc_info=True)
        return chain(**kw) if chain else None

    return hook


def _record(kw: Dict[str, Any]) -> None:
    dt = time.perf_counter() - _state["starts"].pop(str(kw.get("key")), time.perf_counter())
    name = _name(kw)
    n = _state["counts"][name] = _state["counts"].get(name, 0) + 1
    if _state["serving"]:
        logger.warning(
            "Triton compiled %s variant #%d while serving in %.2f s: %s",
            name,
            n,
            dt,
            kw.get("repr", ""),
        )
    else:
        logger.debug("Triton compiled %s variant #%d in %.2f s", name, n, dt)


def install() -> bool:
    """Hook Triton's JIT cache (Triton >= 3.4 knobs); False where it is not available."""
    if _state["installed"]:
        return True
    try:
        from triton import knobs

        rt = knobs.runtime
        rt.jit_cache_hook = _on_miss(rt.jit_cache_hook)
        rt.jit_post_compile_hook = _on_compiled(rt.jit_post_compile_hook)
    except (ImportError, AttributeError):
        return False
    _state["installed"] = True
    return True


def mark_serving() -> None:
    """From now on every compile is a stall a request will see: log each one."""
    _state["serving"] = True


def compile_counts() -> Dict[str, int]:
    """Kernel name -> number of variants compiled in this process."""
    return dict(_state["counts"])
