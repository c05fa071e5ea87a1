"""msgpack wire format for the message dataclasses: each message is [type name, field dict]."""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, Type

import msgspec

from sglang.srt.core import finish_reason, prompt_break
from sglang.srt.core.io_struct import (
    batch_output,
    to_detokenizer,
    to_dp_controller,
    to_launcher,
    to_scheduler,
    to_tokenizer,
)
from sglang.srt.core.sampling_params import SamplingParams

_TYPES: Dict[str, Type] = {
    name: obj
    for module in (
        batch_output,
        to_scheduler,
        to_detokenizer,
        to_tokenizer,
        to_dp_controller,
        to_launcher,
        finish_reason,
        prompt_break,
    )
    for name, obj in vars(module).items()
    if dataclasses.is_dataclass(obj) and isinstance(obj, type)
}
_TYPES["SamplingParams"] = SamplingParams

_enc = msgspec.msgpack.Encoder()
_dec = msgspec.msgpack.Decoder()


def _to_plain(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {
            "__t": type(obj).__name__,
            "f": {f.name: _to_plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)},
        }
    if isinstance(obj, (list, tuple)):
        return [_to_plain(x) for x in obj]
    if isinstance(obj, dict):
        return {k: _to_plain(v) for k, v in obj.items()}
    return obj


def _from_plain(obj: Any) -> Any:
    if isinstance(obj, dict):
        if "__t" in obj and obj["__t"] in _TYPES:
            return _TYPES[obj["__t"]](**{k: _from_plain(v) for k, v in obj["f"].items()})
        return {k: _from_plain(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_from_plain(x) for x in obj]
    return obj


def encode(obj: Any) -> bytes:
    return _enc.encode(_to_plain(obj))


def decode(data: bytes) -> Any:
    return _from_plain(_dec.decode(data))
