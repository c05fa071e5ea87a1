"""Giving a rank's device memory back while a trainer uses the GPU (/release_memory_occupation), and
taking it again (/resume_memory_occupation): the weights, the KV cache and the CUDA graphs.

A released tensor keeps its shape and its storage object, whose bytes are freed (resized to
nothing) and allocated again on resume; the KV cache comes back zeroed (the prefix cache was
flushed), the weights from a host copy with --enable-weights-cpu-backup and zeroed otherwise (the
trainer sends new ones). Allocation addresses change, so the CUDA graphs, which captured them, are
dropped on any release and captured again once everything is back."""

from __future__ import annotations

import logging
from typing import Callable, Dict, Iterable, List, Optional, Sequence

import torch

logger = logging.getLogger(__name__)

WEIGHTS, KV_CACHE, CUDA_GRAPH = "weights", "kv_cache", "cuda_graph"
TAGS = (WEIGHTS, KV_CACHE, CUDA_GRAPH)


def _storages(tensors: Iterable[torch.Tensor]) -> List[torch.UntypedStorage]:
    """Each distinct storage once (a tied LM head shares the embedding's)."""
    seen: Dict[int, torch.UntypedStorage] = {}
    for t in tensors:
        s = t.untyped_storage()
        if s.nbytes() and s.data_ptr() not in seen:
            seen[s.data_ptr()] = s
    return list(seen.values())


class _Released:
    """Storages whose bytes are gone, with their sizes (and host copies when kept)."""

    def __init__(self, tensors: Iterable[torch.Tensor], keep_copy: bool):
        self.storages = _storages(tensors)
        self.sizes = [s.nbytes() for s in self.storages]
        # .cpu() of a host storage is the storage itself, not a copy.
        self.copies: Optional[List[torch.UntypedStorage]] = (
            [s.clone() if s.device.type == "cpu" else s.cpu() for s in self.storages]
            if keep_copy
            else None
        )
        for s in self.storages:
            s.resize_(0)

    def nbytes(self) -> int:
        return sum(self.sizes)

    def restore(self) -> None:
        for i, (s, n) in enumerate(zip(self.storages, self.sizes)):
            s.resize_(n)
            if self.copies is not None:
                s.copy_(self.copies[i])
            else:
                torch.empty(0, dtype=torch.uint8, device=s.device).set_(s).zero_()


class MemoryOccupation:
    def __init__(
        self,
        weights: Callable[[], Iterable[torch.Tensor]],
        kv_buffers: Callable[[], Iterable[torch.Tensor]],
        graphs: Callable[[bool], None],
        weights_cpu_backup: bool,
    ):
        """graphs(True) captures the CUDA graphs (if the runner uses them), graphs(False) drops
        them."""
        self._sources = {WEIGHTS: weights, KV_CACHE: kv_buffers}
        self._graphs = graphs
        self._backup = weights_cpu_backup
        self.released: Dict[str, Optional[_Released]] = {}

    def check_tags(self, tags: Optional[Sequence[str]]) -> List[str]:
        """None means all of them; ValueError names an unknown tag."""
        tags = list(TAGS) if tags is None else list(tags)
        bad = [t for t in tags if t not in TAGS]
        if bad:
            raise ValueError(f"unknown memory tags {bad}: use {list(TAGS)}")
        return tags

    def release(self, tags: Optional[Sequence[str]]) -> str:
        tags = [t for t in self.check_tags(tags) if t not in self.released]
        if not self.released:
            self._graphs(False)  # they point into what is about to be freed
        freed = 0
        for tag in tags:
            if tag == CUDA_GRAPH:
                self.released[tag] = None
                continue
            part = _Released(self._sources[tag](), keep_copy=self._backup and tag == WEIGHTS)
            self.released[tag] = part
            freed += part.nbytes()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        return f"Released {', '.join(tags) or 'nothing new'} ({freed / (1 << 30):.2f} GiB)."

    def resume(self, tags: Optional[Sequence[str]]) -> str:
        tags = [t for t in self.check_tags(tags) if t in self.released]
        for tag in tags:
            part = self.released.pop(tag)
            if part is not None:
                part.restore()
        if not self.released:
            self._graphs(True)
        return f"Resumed {', '.join(tags) or 'nothing'}."

    def holds(self, tag: str) -> bool:
        """Whether that memory is in place (not released)."""
        return tag not in self.released
