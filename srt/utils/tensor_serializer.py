"""Named tensors as bytes, for /update_weights_from_tensor: SGLang's MultiprocessingSerializer
interface (a trainer imports it from sglang.srt.utils), so payloads built by its clients load here.

serialize pickles with torch's multiprocessing reductions: a CUDA tensor travels as a CUDA IPC
handle (no copy), a CPU tensor as a shared-memory handle (under torch's file_system sharing
strategy; the default file_descriptor one only reaches processes that share the sender's
multiprocessing authkey, such as the Engine's own schedulers), and a plain `pickle.dumps` payload
carries the data itself. deserialize never runs a general unpickler on what a client sent: only the
constructors those three forms use are resolved, and anything else is refused."""

from __future__ import annotations

import base64
import io
import pickle
from multiprocessing.reduction import ForkingPickler
from typing import Any, Union

import torch
import torch.multiprocessing

# (module, name) -> allowed; a callable entry replaces the global with a safer one.
_TORCH_TYPES = {"Tensor", "Size", "device"}
_ALLOWED = {
    ("multiprocessing.resource_sharer", "DupFd"),
    ("torch.nn.parameter", "Parameter"),
    ("torch.storage", "UntypedStorage"),
    ("torch.storage", "TypedStorage"),
    ("torch._utils", "_rebuild_tensor_v2"),
    ("torch._utils", "_rebuild_parameter"),
    ("collections", "OrderedDict"),
    ("sglang.srt.weight_sync.tensor_bucket", "FlattenedTensorMetadata"),
}


def _load_storage_bytes(b: bytes) -> Any:
    # torch's own hook for a plainly pickled storage is a full torch.load; weights only here.
    return torch.load(io.BytesIO(b), weights_only=True)


class _TensorUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if module == "torch.multiprocessing.reductions" and name.startswith("rebuild_"):
            return getattr(torch.multiprocessing.reductions, name)
        if module == "torch" and (
            name in _TORCH_TYPES
            or isinstance(getattr(torch, name, None), torch.dtype)
            or name.endswith("Storage")
        ):
            return getattr(torch, name)
        if (module, name) == ("torch.storage", "_load_from_bytes"):
            return _load_storage_bytes
        if (module, name) in _ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"a tensor payload may not refer to {module}.{name}")


class MultiprocessingSerializer:
    @staticmethod
    def serialize(obj: Any, output_str: bool = False) -> Union[bytes, str]:
        """output_str: base64 text, for a JSON body."""
        buf = io.BytesIO()
        ForkingPickler(buf).dump(obj)
        data = buf.getvalue()
        return base64.b64encode(data).decode("ascii") if output_str else data

    @staticmethod
    def deserialize(data: Union[bytes, str]) -> Any:
        """ValueError for text that is not base64 or a payload that is not tensors."""
        if isinstance(data, str):
            try:
                data = base64.b64decode(data, validate=True)
            except ValueError as e:
                raise ValueError(f"a serialized tensor payload is not base64: {e}") from None
        try:
            return _TensorUnpickler(io.BytesIO(data)).load()
        except Exception as e:  # noqa: BLE001 - whatever a client's bytes do, it is their 400
            raise ValueError(f"not a tensor payload: {e}") from None


def bucket_tensors_of(payload: Any) -> list:
    """The (name, tensor) pairs of a "flattened_bucket" payload: {"flattened_tensor", "metadata"}
    (or a list of such buckets)."""
    from sglang.srt.weight_sync.tensor_bucket import FlattenedTensorBucket

    buckets = payload if isinstance(payload, list) else [payload]
    out = []
    for b in buckets:
        if not isinstance(b, dict) or set(b) != {"flattened_tensor", "metadata"}:
            raise ValueError("a flattened_bucket payload is {flattened_tensor, metadata}")
        flat, meta = b["flattened_tensor"], b["metadata"]
        if not isinstance(flat, torch.Tensor) or not isinstance(meta, list):
            raise ValueError("a flattened_bucket payload is {flattened_tensor, metadata}")
        out += FlattenedTensorBucket(flattened_tensor=flat, metadata=meta).reconstruct_tensors()
    return out


def named_tensors_of(payload: Any) -> list:
    """The (name, tensor) pairs of a deserialized payload (a list of pairs or a name -> tensor dict)."""
    items = payload.items() if isinstance(payload, dict) else payload
    try:
        pairs = [(n, t) for n, t in items]
    except (TypeError, ValueError):
        raise ValueError("a tensor payload must be a list of (name, tensor) pairs") from None
    for n, t in pairs:
        if not isinstance(n, str) or not isinstance(t, torch.Tensor):
            raise ValueError("a tensor payload must be a list of (name, tensor) pairs")
    return pairs
