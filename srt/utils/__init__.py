"""Helpers with no place in a layer of their own. MultiprocessingSerializer is importable from here,
where SGLang's trainers look for it (loaded on first use: most helpers here need no torch)."""

from typing import Any

__all__ = ["MultiprocessingSerializer"]


def __getattr__(name: str) -> Any:
    if name == "MultiprocessingSerializer":
        from sglang.srt.utils.tensor_serializer import MultiprocessingSerializer

        return MultiprocessingSerializer
    raise AttributeError(name)
