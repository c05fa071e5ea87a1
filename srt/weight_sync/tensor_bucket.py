"""Many tensors sent as one: a flat byte buffer and where each tensor lies in it, for
/update_weights_from_tensor with load_format "flattened_bucket". One CUDA IPC handle then carries a
whole bucket instead of one per tensor. The module path and field names are SGLang's, so buckets
pickled by its clients (sglang.srt.weight_sync.tensor_bucket) load here too."""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

import torch


@dataclass
class FlattenedTensorMetadata:
    name: str
    shape: torch.Size
    dtype: torch.dtype
    start_idx: int  # in bytes of a uint8 buffer (elements of a buffer of the tensors' dtype)
    end_idx: int
    numel: int


class FlattenedTensorBucket:
    supports_multi_dtypes = True

    def __init__(
        self,
        named_tensors: Optional[Sequence[Tuple[str, torch.Tensor]]] = None,
        flattened_tensor: Optional[torch.Tensor] = None,
        metadata: Optional[List[FlattenedTensorMetadata]] = None,
    ):
        """From named tensors (packed here), or from a received buffer and its metadata."""
        if named_tensors is not None:
            if not named_tensors:
                raise ValueError("a tensor bucket needs at least one tensor")
            parts, self.metadata, at = [], [], 0
            for name, t in named_tensors:
                raw = t.detach().contiguous().reshape(-1).view(torch.uint8)
                parts.append(raw)
                self.metadata.append(
                    FlattenedTensorMetadata(name, t.shape, t.dtype, at, at + raw.numel(), t.numel())
                )
                at += raw.numel()
            self.flattened_tensor = torch.cat(parts)
        elif flattened_tensor is not None and metadata is not None:
            self.flattened_tensor, self.metadata = flattened_tensor, list(metadata)
        else:
            raise ValueError("give named_tensors, or flattened_tensor and metadata")

    def get_flattened_tensor(self) -> torch.Tensor:
        return self.flattened_tensor

    def get_metadata(self) -> List[FlattenedTensorMetadata]:
        return self.metadata

    def reconstruct_tensors(self) -> List[Tuple[str, torch.Tensor]]:
        """Views into the buffer, no copies; ValueError for metadata that does not fit it."""
        flat, out = self.flattened_tensor.reshape(-1), []
        for m in self.metadata:
            if not 0 <= m.start_idx <= m.end_idx <= flat.numel():
                raise ValueError(f"bucket entry {m.name} lies outside the buffer")
            piece = flat[m.start_idx : m.end_idx]
            if flat.dtype == torch.uint8 and m.dtype != torch.uint8:
                try:
                    piece = piece.view(m.dtype)
                except RuntimeError:  # an offset not aligned to the dtype's size
                    piece = piece.clone().view(m.dtype)
            if piece.numel() != m.numel or torch.Size(m.shape).numel() != m.numel:
                raise ValueError(f"bucket entry {m.name} has {piece.numel()} values, not {m.numel}")
            out.append((m.name, piece.view(m.shape)))
        return out
