"""TritonAttnBackend: the CUDA attention backend built on our Triton kernels (no flashinfer needed).

Per pass, init_forward_metadata computes on the device what every layer shares: for decode the
per-request KV split counts and the split-KV workspaces (one prologue kernel, which also records the
new tokens' slots in req_to_token, as every backend's decode metadata step must); for extend nothing
beyond the ForwardBatch's own index tensors. Each layer then stores its new K/V into the pool (Triton
scatter, casting to the pool dtype) and runs the extend or decode kernel, which read K/V through
req_to_token.

CUDA graphs (decode): init_cuda_graph_state preallocates the split counts and workspaces for the
largest captured batch. The capture hook runs inside the graph capture, so its device work (the
prologue over the static seq_lens, rows and slots) is replayed with the graph; the replay hook only
re-points the metadata at the [:bs] views and queues no device work.

fp8 KV (--kv-cache-dtype fp8_e4m3): the pool stores K / k_scale and V / v_scale as float8_e4m3fn;
store_kv divides on the way in, and the kernels widen fp8 tiles in registers and apply the scales
to the logits and to P.V, so no dequantised copy of the pool is ever made.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

import torch

from sglang.srt.layers.attention.base_attn_backend import AttentionBackend, KVStoreTarget
from sglang.srt.layers.attention.triton_ops.decode_attention import (
    decode_attention_fwd,
    decode_head_programs,
)
from sglang.srt.layers.attention.triton_ops.decode_prologue import decode_prologue
from sglang.srt.layers.attention.triton_ops.extend_attention import extend_attention_fwd
from sglang.srt.layers.triton_ops.kv_store import store_kv

if TYPE_CHECKING:
    from sglang.srt.core.forward_batch_info import ForwardBatch
    from sglang.srt.layers.radix_attention import RadixAttention

# Most splits of one request's KV in decode, at any batch size.
DEFAULT_MAX_KV_SPLITS = 16
# At batch sizes too small to fill the device with DEFAULT_MAX_KV_SPLITS splits per request (batch 1
# with 8 kv heads makes 128 programs, one per SM), the cap rises so the split rule can reach its
# target of `waves` programs per SM: a long context is then read by every SM at once. The cap is a
# function of the batch size alone, so each CUDA graph has a fixed grid.
LONG_MAX_KV_SPLITS = 64
_SPLIT_WAVES = 3  # compute_num_kv_splits' default target of programs per SM
# Up to MID_SPLITS_MAX_BS rows the cap is at least MID_MAX_KV_SPLITS, so that one long request
# among short ones can be cut into as many splits as its share of the batch's work asks for. Above
# that the stage-1 grid (bs x heads x cap, the programs past a request's split count exiting at
# once) costs more than a long request gains. SGLANG_MID_MAX_KV_SPLITS sets it for A/B runs.
MID_MAX_KV_SPLITS = int(os.environ.get("SGLANG_MID_MAX_KV_SPLITS", 32))
MID_SPLITS_MAX_BS = 64


def max_kv_splits_for(bs: int, head_programs: int, num_sms: int, floor: int) -> int:
    """The split cap of a batch: `floor` (at least MID_MAX_KV_SPLITS up to MID_SPLITS_MAX_BS
    rows), raised (up to LONG_MAX_KV_SPLITS) until bs x head programs x cap reaches the split
    rule's target of _SPLIT_WAVES programs per SM."""
    if bs <= MID_SPLITS_MAX_BS:
        floor = max(floor, MID_MAX_KV_SPLITS)
    want = -(-_SPLIT_WAVES * num_sms // max(bs * head_programs, 1))
    return max(floor, min(LONG_MAX_KV_SPLITS, want))


@dataclass
class DecodeMetadata:
    num_kv_splits: torch.Tensor  # [bs] int32
    attn_logits: torch.Tensor  # [bs, H, max_splits, Dv] float32 workspace
    attn_lse: torch.Tensor  # [bs, H, max_splits] float32 workspace
    max_splits: int = DEFAULT_MAX_KV_SPLITS


# Deterministic inference: decode splits of this many tokens, at most DETERMINISTIC_MAX_SPLITS, at
# every batch size (a request's split points must follow its own length alone).
DETERMINISTIC_SPLIT_LEN = 256
DETERMINISTIC_MAX_SPLITS = 16


class TritonAttnBackend(AttentionBackend):
    supports_cuda_graph = True

    def __init__(
        self,
        model_runner,
        max_kv_splits: int = DEFAULT_MAX_KV_SPLITS,
        num_sms: Optional[int] = None,
    ):
        cfg = model_runner.model_config
        tp = getattr(model_runner, "tp_size", 1)
        self.device = model_runner.device
        self.num_heads = cfg.num_attention_heads // tp
        self.num_kv_heads = cfg.kv_heads_per_rank(tp)
        self.v_head_dim = cfg.head_dim
        self.max_kv_splits = max_kv_splits
        section = getattr(model_runner, "model_section", None)
        self.deterministic = bool(getattr(section, "enable_deterministic_inference", False))
        if num_sms is None:
            num_sms = (
                torch.cuda.get_device_properties(model_runner.gpu_id).multi_processor_count
                if torch.device(self.device).type == "cuda"
                else 132
            )
        self.num_sms = num_sms
        # The table CUDA-graph captures record slots into (eager passes use their ForwardBatch's pool).
        pool = getattr(model_runner, "req_to_token_pool", None)
        self.req_to_token = pool.req_to_token if pool is not None else None
        self.decode_meta: Optional[DecodeMetadata] = None
        self._graph_logits: Optional[torch.Tensor] = None  # init_cuda_graph_state's workspaces

    # ------------------------------------------------------------------ per pass
    def splits_cap(self, bs: int) -> int:
        if self.deterministic:
            return DETERMINISTIC_MAX_SPLITS
        heads = decode_head_programs(self.num_heads, self.num_kv_heads)
        return max_kv_splits_for(bs, heads, self.num_sms, self.max_kv_splits)

    def _new_decode_meta(self, bs: int) -> DecodeMetadata:
        cap = self.splits_cap(bs)
        f32 = dict(dtype=torch.float32, device=self.device)
        return DecodeMetadata(
            num_kv_splits=torch.empty(bs, dtype=torch.int32, device=self.device),
            attn_logits=torch.empty((bs, self.num_heads, cap, self.v_head_dim), **f32),
            attn_lse=torch.empty((bs, self.num_heads, cap), **f32),
            max_splits=cap,
        )

    def _decode_prologue(
        self,
        seq_lens: torch.Tensor,
        req_pool_indices: torch.Tensor,
        out_cache_loc: torch.Tensor,
        meta: DecodeMetadata,
        req_to_token: torch.Tensor,
    ) -> None:
        """Split counts and the new tokens' req_to_token entries, in one kernel."""
        decode_prologue(
            seq_lens,
            self.num_heads,
            self.num_kv_heads,
            meta.max_splits,
            meta.num_kv_splits,
            self.num_sms,
            req_to_token,
            req_pool_indices,
            out_cache_loc,
            fixed_split_len=DETERMINISTIC_SPLIT_LEN if self.deterministic else None,
        )

    def init_forward_metadata(self, forward_batch: "ForwardBatch") -> None:
        fb = forward_batch
        if fb.forward_mode.is_decode():
            meta = self._new_decode_meta(fb.batch_size)
            self._decode_prologue(
                fb.seq_lens,
                fb.req_pool_indices,
                fb.out_cache_loc,
                meta,
                fb.req_to_token_pool.req_to_token,
            )
            self.decode_meta = meta
        # Extend needs only the ForwardBatch's own index tensors (and max_extend_len on the host).

    # ------------------------------------------------------------------ kernels
    def kv_store_target(
        self, layer: "RadixAttention", forward_batch: "ForwardBatch"
    ) -> Optional[KVStoreTarget]:
        pool = forward_batch.token_to_kv_pool
        lid = layer.layer_id
        return KVStoreTarget(
            pool.get_key_buffer(lid),
            pool.get_value_buffer(lid),
            forward_batch.out_cache_loc,
            pool.k_scale[lid],
            pool.v_scale[lid],
        )

    @staticmethod
    def _store(
        layer: "RadixAttention", forward_batch: "ForwardBatch", k: torch.Tensor, v: torch.Tensor
    ) -> None:
        pool = forward_batch.token_to_kv_pool
        lid = layer.layer_id
        store_kv(
            pool.get_key_buffer(lid),
            pool.get_value_buffer(lid),
            forward_batch.out_cache_loc,
            k,
            v,
            pool.k_scale[lid],
            pool.v_scale[lid],
        )

    def forward_extend(self, q, k, v, layer, forward_batch, save_kv_cache=True):
        pool = forward_batch.token_to_kv_pool
        lid = layer.layer_id
        if save_kv_cache:
            self._store(layer, forward_batch, k, v)
        H, D, Dv = layer.tp_q_head_num, layer.head_dim, layer.v_head_dim
        q3 = q.view(-1, H, D)
        o = torch.empty((q3.shape[0], H, Dv), dtype=q.dtype, device=q.device)
        fb = forward_batch
        extend_attention_fwd(
            q3,
            k,
            v,
            o,
            pool.get_key_buffer(lid),
            pool.get_value_buffer(lid),
            fb.req_to_token_pool.req_to_token,
            fb.req_pool_indices,
            fb.seq_lens,
            fb.extend_seq_lens,
            fb.extend_start_loc,
            fb.max_extend_len,
            layer.scaling,
            layer.logit_cap,
            k_scale=pool.k_scale[lid],
            v_scale=pool.v_scale[lid],
            keys_from_pool=self.deterministic,
        )
        return o.view(-1, H * Dv)

    def forward_decode(self, q, k, v, layer, forward_batch, save_kv_cache=True):
        pool = forward_batch.token_to_kv_pool
        lid = layer.layer_id
        if save_kv_cache:
            self._store(layer, forward_batch, k, v)
        H, D, Dv = layer.tp_q_head_num, layer.head_dim, layer.v_head_dim
        bs = forward_batch.batch_size
        q3 = q.view(bs, H, D)
        o = torch.empty((bs, H, Dv), dtype=q.dtype, device=q.device)
        meta = self.decode_meta
        fb = forward_batch
        decode_attention_fwd(
            q3,
            pool.get_key_buffer(lid),
            pool.get_value_buffer(lid),
            o,
            fb.req_to_token_pool.req_to_token,
            fb.req_pool_indices,
            fb.seq_lens,
            meta.attn_logits,
            meta.attn_lse,
            meta.num_kv_splits,
            meta.max_splits,
            layer.scaling,
            layer.logit_cap,
            k_scale=pool.k_scale[lid],
            v_scale=pool.v_scale[lid],
            deterministic=self.deterministic,
        )
        return o.view(bs, H * Dv)

    # ------------------------------------------------------------------ CUDA graphs
    def init_cuda_graph_state(self, max_bs: int) -> None:
        # One flat workspace, viewed per captured batch size with that size's split cap.
        rows = max(b * self.splits_cap(b) for b in range(1, max_bs + 1))
        f32 = dict(dtype=torch.float32, device=self.device)
        self._graph_splits = torch.empty(max_bs, dtype=torch.int32, device=self.device)
        self._graph_logits = torch.empty(rows * self.num_heads * self.v_head_dim, **f32)
        self._graph_lse = torch.empty(rows * self.num_heads, **f32)

    def _graph_views(self, bs: int) -> DecodeMetadata:
        assert self._graph_logits is not None, "init_cuda_graph_state was not called"
        cap, H, Dv = self.splits_cap(bs), self.num_heads, self.v_head_dim
        return DecodeMetadata(
            self._graph_splits[:bs],
            self._graph_logits[: bs * H * cap * Dv].view(bs, H, cap, Dv),
            self._graph_lse[: bs * H * cap].view(bs, H, cap),
            cap,
        )

    def init_forward_metadata_capture_cuda_graph(
        self,
        bs: int,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
        out_cache_loc: torch.Tensor,
    ) -> None:
        """Called inside the capture: every replay recomputes the split counts and records the slots."""
        meta = self._graph_views(bs)
        assert self.req_to_token is not None, (
            "CUDA graphs need the model runner's req_to_token_pool"
        )
        self._decode_prologue(
            seq_lens[:bs], req_pool_indices[:bs], out_cache_loc[:bs], meta, self.req_to_token
        )
        self.decode_meta = meta

    def init_forward_metadata_replay_cuda_graph(
        self, bs: int, req_pool_indices: torch.Tensor, seq_lens: torch.Tensor
    ) -> None:
        self.decode_meta = self._graph_views(bs)

    def get_cuda_graph_seq_len_fill_value(self) -> int:
        return 1
