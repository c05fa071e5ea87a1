"""The two memory pools: request rows (ReqToTokenPool) and per-token KV slots (MHATokenToKVPool).

req_to_token[row, pos] is the KV slot holding token `pos` of the request that owns `row`. Row 0
and slot 0 are dummies for padded CUDA-graph rows. The scheduler reads slot numbers only from the
host mirror `req_to_token_cpu`, so it never waits on the device.
"""

from __future__ import annotations

from typing import List, Optional, Sequence

import numpy as np
import torch

from sglang.srt.utils.device_copy import to_device


class ReqToTokenPool:
    def __init__(self, size: int, max_context_len: int, device: str, scratch_rows: int = 0):
        """scratch_rows: device-only rows after the requests' (from scratch_base on) that draft
        tree verify passes fill, one per tree node (the request's prefix, then the node's path)."""
        self.size = size
        self.max_context_len = max_context_len
        self.device = device
        self.scratch_base = size + 1
        self.num_scratch = scratch_rows
        self.req_to_token = torch.zeros(
            (size + 1 + scratch_rows, max_context_len), dtype=torch.int32, device=device
        )
        if torch.device(device).type == "cpu":
            self.req_to_token_cpu = self.req_to_token
        else:
            self.req_to_token_cpu = torch.zeros((size + 1, max_context_len), dtype=torch.int32)
        self._mirror_np = self.req_to_token_cpu.numpy()
        self.free_slots: List[int] = list(range(1, size + 1))

    def available_size(self) -> int:
        return len(self.free_slots)

    def alloc(self, n: int = 1) -> Optional[List[int]]:
        if n > len(self.free_slots):
            return None
        out, self.free_slots = self.free_slots[:n], self.free_slots[n:]
        return out

    def free(self, idx: int) -> None:
        self.free_slots.append(idx)

    def clear(self) -> None:
        self.free_slots = list(range(1, self.size + 1))

    def write(self, row: int, start: int, slots: torch.Tensor) -> None:
        """Record `slots` as positions [start, start+len) of `row` (host mirror and device table)."""
        end = start + len(slots)
        self.req_to_token_cpu[row, start:end] = slots.to(torch.int32)
        if self.req_to_token_cpu is not self.req_to_token:
            self.req_to_token[row, start:end] = to_device(slots.to(torch.int32), self.device)

    def write_batch(
        self,
        rows: Sequence[int],
        positions: Sequence[int],
        slots: torch.Tensor,
        on_device: bool = True,
    ) -> None:
        """Scatter one slot per (row, position) into the host mirror and, with on_device, the device
        table. A DECODE pass records its new slots on the device itself (write_device, inside the CUDA
        graph), so the decode step passes on_device=False and queues no copy or kernel here.
        rows / positions are host ints (lists or CPU tensors); slots is a CPU int tensor."""
        r, p, s = (
            np.asarray(rows, dtype=np.int64),
            np.asarray(positions, dtype=np.int64),
            slots.numpy(),
        )
        # Through numpy: torch's index_put on small host tensors costs ~3x more host time per step.
        self._mirror_np[r, p] = s
        if not on_device or self.req_to_token_cpu is self.req_to_token:
            return
        # One pinned [3, n] copy instead of three pageable ones.
        packed = torch.from_numpy(np.stack([r, p, s.astype(np.int64)]))
        rd, pd, sd = packed.pin_memory().to(self.device, non_blocking=True)
        self.write_device(rd, pd, sd)

    def write_device(
        self, rows: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor
    ) -> None:
        """req_to_token[rows[i], positions[i]] = slots[i] from tensors already on the table's device
        (the host mirror is not touched; on the CPU they are the same tensor)."""
        self.req_to_token[rows, positions] = slots.to(torch.int32)

    def copy_prefixes(self, dst_rows: torch.Tensor, src_rows: torch.Tensor, length: int) -> None:
        """Device table: dst_rows[i][:length] = src_rows[i][:length] (tensors on the device)."""
        if length > 0 and dst_rows.numel():
            self.req_to_token[dst_rows, :length] = self.req_to_token[src_rows, :length]

    def record_decode_slots(
        self, rows: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor
    ) -> None:
        """A decode pass's own record of its new slots in the device table. Where the host mirror
        is the table (the CPU) the scheduler has already written them, and the pass must not write
        again: on the CPU overlap loop it runs on the forward worker after the host has moved on,
        and a row freed meanwhile (an abort, a finish) may already hold another request's slots."""
        if self.req_to_token_cpu is not self.req_to_token:
            self.write_device(rows, positions, slots)

    def read(self, row: int, start: int, end: int) -> torch.Tensor:
        return self.req_to_token_cpu[row, start:end].to(torch.int64)


class MHATokenToKVPool:
    """Per-layer K and V buffers of shape [size + page_size, kv_heads, head_dim]."""

    def __init__(
        self,
        size: int,
        page_size: int,
        dtype: torch.dtype,
        head_num: int,
        head_dim: int,
        layer_num: int,
        device: str,
        v_head_dim: Optional[int] = None,
    ):
        self.size = size
        self.page_size = page_size
        self.dtype = dtype
        self.head_num = head_num
        self.head_dim = head_dim
        self.v_head_dim = v_head_dim or head_dim
        self.layer_num = layer_num
        self.device = device
        # fp8 is stored as uint8-compatible float8 and read back with a per-layer scale (default 1.0).
        self.store_dtype = dtype
        rows = size + page_size
        self.k_buffer = [
            torch.zeros((rows, head_num, head_dim), dtype=dtype, device=device)
            for _ in range(layer_num)
        ]
        self.v_buffer = [
            torch.zeros((rows, head_num, self.v_head_dim), dtype=dtype, device=device)
            for _ in range(layer_num)
        ]
        self.k_scale = [1.0] * layer_num
        self.v_scale = [1.0] * layer_num

    @staticmethod
    def bytes_per_token(
        head_num: int,
        head_dim: int,
        layer_num: int,
        dtype: torch.dtype,
        v_head_dim: Optional[int] = None,
    ) -> int:
        elem = torch.empty(0, dtype=dtype).element_size()
        return head_num * (head_dim + (v_head_dim or head_dim)) * layer_num * elem

    def get_key_buffer(self, layer_id: int) -> torch.Tensor:
        return self.k_buffer[layer_id]

    def get_value_buffer(self, layer_id: int) -> torch.Tensor:
        return self.v_buffer[layer_id]

    def set_kv_buffer(
        self, layer_id: int, loc: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> None:
        if k.dtype != self.dtype:
            ks, vs = self.k_scale[layer_id], self.v_scale[layer_id]
            k = (k / ks if ks != 1.0 else k).to(self.dtype)
            v = (v / vs if vs != 1.0 else v).to(self.dtype)
        self.k_buffer[layer_id][loc] = k
        self.v_buffer[layer_id][loc] = v

    def move_kv(self, dst: torch.Tensor, src: torch.Tensor) -> None:
        """Copy the KV of slots `src` into slots `dst` in every layer (raw, scales unchanged). All
        sources are read before any destination is written, so the two may overlap."""
        src = src.to(self.device, non_blocking=True)
        dst = dst.to(self.device, non_blocking=True)
        for buf in (*self.k_buffer, *self.v_buffer):
            buf[dst] = buf[src]
