"""The host tier of the KV cache: per-layer K and V buffers in host memory, laid out like the device
pool (one row per token slot), with their own free slots. Pinned on CUDA so copies run
asynchronously and the copy kernel can read them directly. Slot 0 is a dummy, as on the device."""

from __future__ import annotations

import logging
from typing import Optional

import psutil
import torch

from sglang.srt.configs.sections import HiCacheSection

logger = logging.getLogger(__name__)

GB = 1 << 30
# Host memory left to the rest of the process (tokenizer, Python heap, other pools) when sizing.
HOST_MEM_HEADROOM = 0.1


def host_pool_tokens(section: HiCacheSection, device_tokens: int, bytes_per_token: int) -> int:
    """Tokens the host pool holds: --hicache-size GB, else --hicache-ratio x the device pool.
    Refuses (ValueError) a pool larger than the free host memory allows."""
    if section.size_gb > 0:
        tokens = section.size_gb * GB // bytes_per_token
    else:
        tokens = int(device_tokens * section.ratio)
    tokens = max(tokens, 1)
    need = tokens * bytes_per_token
    free = psutil.virtual_memory().available
    if need > free * (1 - HOST_MEM_HEADROOM):
        raise ValueError(
            f"The HiCache host pool needs {need / GB:.2f} GB ({tokens} tokens x {bytes_per_token} B) "
            f"but only {free / GB:.2f} GB of host memory is free: lower --hicache-ratio or set "
            "--hicache-size (GB)."
        )
    if tokens < device_tokens:
        logger.warning(
            "HiCache host pool (%d tokens) is smaller than the device pool (%d): under "
            "write_through it cannot hold a copy of everything on the device.",
            tokens,
            device_tokens,
        )
    return tokens


class HostKVPool:
    def __init__(
        self,
        size: int,
        layer_num: int,
        head_num: int,
        head_dim: int,
        v_head_dim: int,
        dtype: torch.dtype,
        pin_memory: bool,
    ):
        self.size = size
        self.layer_num = layer_num
        self.dtype = dtype
        self.pinned = pin_memory
        rows = size + 1
        self.k_buffer = [
            torch.zeros((rows, head_num, head_dim), dtype=dtype, pin_memory=pin_memory)
            for _ in range(layer_num)
        ]
        self.v_buffer = [
            torch.zeros((rows, head_num, v_head_dim), dtype=dtype, pin_memory=pin_memory)
            for _ in range(layer_num)
        ]
        elem = torch.empty(0, dtype=dtype).element_size()
        self.bytes_per_token = head_num * (head_dim + v_head_dim) * layer_num * elem
        self.clear()

    @classmethod
    def like(cls, device_pool, size: int) -> "HostKVPool":
        """A host pool with the device pool's shapes and dtype."""
        return cls(
            size,
            device_pool.layer_num,
            device_pool.head_num,
            device_pool.head_dim,
            device_pool.v_head_dim,
            device_pool.dtype,
            pin_memory=torch.device(device_pool.device).type == "cuda",
        )

    # ------------------------------------------------------------------ slots
    def clear(self) -> None:
        self.free_slots = torch.arange(1, self.size + 1, dtype=torch.int64)

    def available_size(self) -> int:
        return len(self.free_slots)

    def alloc(self, n: int) -> Optional[torch.Tensor]:
        if n > len(self.free_slots):
            return None
        out, self.free_slots = self.free_slots[:n], self.free_slots[n:]
        return out

    def free(self, slots: Optional[torch.Tensor]) -> None:
        if slots is not None and slots.numel():
            self.free_slots = torch.cat([self.free_slots, slots.to(torch.int64).flatten()])

    # ------------------------------------------------------------------ data (storage tier)
    def read_rows(self, slots: torch.Tensor) -> torch.Tensor:
        """[layers, 2, n, heads, dim] copy of the given rows (K and V need the same head dim)."""
        return torch.stack(
            [torch.stack([k[slots], v[slots]]) for k, v in zip(self.k_buffer, self.v_buffer)]
        )

    def write_rows(self, slots: torch.Tensor, data: torch.Tensor) -> None:
        """Inverse of read_rows."""
        for layer, (k, v) in enumerate(zip(self.k_buffer, self.v_buffer)):
            k[slots] = data[layer, 0]
            v[slots] = data[layer, 1]
