"""The attention backend interface: kernels that read K/V through req_to_token slot indices."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

import torch

if TYPE_CHECKING:
    from sglang.srt.core.forward_batch_info import ForwardBatch
    from sglang.srt.layers.radix_attention import RadixAttention


@dataclass
class KVStoreTarget:
    """Where one layer's new K/V rows go: buffer[loc[i]] = row i / scale (for a fused rotary + store)."""

    k_buffer: torch.Tensor
    v_buffer: torch.Tensor
    loc: torch.Tensor
    k_scale: float
    v_scale: float


class AttentionBackend:
    """Stores this pass's K/V into the pool, then attends each query to its request's slots."""

    def kv_store_target(
        self, layer: "RadixAttention", forward_batch: "ForwardBatch"
    ) -> Optional[KVStoreTarget]:
        """A backend whose pool layout the fused rotary + store kernel can write returns the target;
        the layer then stores its K/V there itself and calls forward with save_kv_cache=False."""
        return None

    def init_forward_metadata(self, forward_batch: "ForwardBatch") -> None:
        """Per-pass precomputation shared by all layers (index tensors, split counts...). For a DECODE
        pass it must also record the new tokens' slots in the device req_to_token: the scheduler
        writes only the host mirror for decode (a backend may fuse this into its own kernels)."""
        fb = forward_batch
        if fb.forward_mode.is_decode():
            fb.req_to_token_pool.record_decode_slots(
                fb.req_pool_indices, fb.positions, fb.out_cache_loc
            )

    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: "RadixAttention",
        forward_batch: "ForwardBatch",
        save_kv_cache: bool = True,
    ) -> torch.Tensor:
        if forward_batch.forward_mode.is_decode():
            return self.forward_decode(q, k, v, layer, forward_batch, save_kv_cache)
        return self.forward_extend(q, k, v, layer, forward_batch, save_kv_cache)

    def forward_extend(self, q, k, v, layer, forward_batch, save_kv_cache=True) -> torch.Tensor:
        raise NotImplementedError

    def forward_decode(self, q, k, v, layer, forward_batch, save_kv_cache=True) -> torch.Tensor:
        raise NotImplementedError

    # ---- CUDA graphs (decode) ----
    # The graph runner calls init_cuda_graph_state once, then for each captured batch size the
    # capture hook INSIDE the capture (device work it queues is replayed with the graph), and before
    # each replay the replay hook with the padded static buffers (host-side work, or device work that
    # must not be in the graph). Padded rows have req_pool_indices 0 and seq_lens equal to
    # get_cuda_graph_seq_len_fill_value(), reading the dummy row / slot 0.
    supports_cuda_graph = False

    def init_cuda_graph_state(self, max_bs: int) -> None:
        raise NotImplementedError

    def init_forward_metadata_capture_cuda_graph(
        self,
        bs: int,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
        out_cache_loc: torch.Tensor,
    ) -> None:
        """Also records the slots (see init_forward_metadata), inside the graph."""
        raise NotImplementedError

    def init_forward_metadata_replay_cuda_graph(
        self, bs: int, req_pool_indices: torch.Tensor, seq_lens: torch.Tensor
    ) -> None:
        raise NotImplementedError

    def get_cuda_graph_seq_len_fill_value(self) -> int:
        return 1
