"""ForwardBatch: the device-side description of one forward pass.

EXTEND runs new tokens of each request against its cached prefix (prefill, chunked prefill);
DECODE runs one token per request; MIXED is an extend batch whose tail rows are decode requests
(extend length 1), used by --enable-mixed-chunk; TARGET_VERIFY is speculative decoding's step, whose
pass runs as a decode batch with one row per verified token.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import IntEnum, auto
from typing import Any, List, Optional, Tuple

import numpy as np
import torch


class ForwardMode(IntEnum):
    EXTEND = auto()
    DECODE = auto()
    MIXED = auto()
    # Speculative decoding: the scheduler's step that checks each request's pending token and
    # drafts. Its forward pass is a DECODE batch of one row per token (ScheduleBatch builds it;
    # a draft tree's rows read the request table through rows of their own, one per node).
    TARGET_VERIFY = auto()

    def is_extend(self) -> bool:
        return self in (ForwardMode.EXTEND, ForwardMode.MIXED)

    def is_decode(self) -> bool:
        return self == ForwardMode.DECODE

    def is_mixed(self) -> bool:
        return self == ForwardMode.MIXED

    def is_target_verify(self) -> bool:
        return self == ForwardMode.TARGET_VERIFY


@dataclass
class ForwardBatch:
    forward_mode: ForwardMode
    batch_size: int
    input_ids: torch.Tensor  # [num_tokens] int64 (may hold negative future ids before resolution)
    positions: torch.Tensor  # [num_tokens] int64
    req_pool_indices: torch.Tensor  # [bs] int64
    seq_lens: torch.Tensor  # [bs] int64, length including this pass's tokens
    out_cache_loc: torch.Tensor  # [num_tokens] int64 KV slots written by this pass
    seq_lens_cpu: Optional[torch.Tensor] = None
    seq_lens_sum: int = 0

    # Extend only.
    extend_num_tokens: int = 0
    extend_seq_lens: Optional[torch.Tensor] = None  # [bs] device
    extend_prefix_lens: Optional[torch.Tensor] = None  # [bs] device
    extend_start_loc: Optional[torch.Tensor] = None  # [bs] device
    extend_seq_lens_cpu: List[int] = field(default_factory=list)
    extend_prefix_lens_cpu: List[int] = field(default_factory=list)
    max_extend_len: int = 0

    # Logprobs.
    return_logprob: bool = False
    top_logprobs_nums: Optional[List[int]] = None
    extend_logprob_start_lens_cpu: Optional[List[int]] = (
        None  # per request, relative to the extend part
    )
    extend_logprob_lens_cpu: Optional[List[int]] = (
        None  # per request, prompt-logprob positions here
    )
    extend_input_logprob_token_ids: Optional[torch.Tensor] = (
        None  # next-token ids of logprob positions
    )

    # Set by the model runner.
    req_to_token_pool: Any = None
    token_to_kv_pool: Any = None
    attn_backend: Any = None
    # HiCache: copies into this pass's prefix slots, one event per layer (CUDA); attention at
    # layer i waits for copy i only.
    kv_layer_waits: Any = None
    # Set by the CUDA-graph runner when padding the batch.
    num_padded: int = 0
    # EAGLE drafts read the target's hidden states at every position of the pass: None (the
    # default) keeps none; () the final (normed) hidden states; layer ids those layers' outputs,
    # concatenated. Returned in LogitsProcessorOutput.hidden_states; such a pass is never replayed
    # from a CUDA graph.
    capture_hidden: Optional[Tuple[int, ...]] = None
    # Decode: the device block [positions; req_pool_indices; seq_lens; out_cache_loc] ([4, bs] int64)
    # that those four fields are views of, so the graph runner copies it in one go.
    decode_packed: Optional[torch.Tensor] = None
    # An EAGLE head's passes: each row's input feature [num_tokens, H] (the target's hidden state,
    # or the head's own output one draft step earlier), read beside input_ids.
    spec_features: Optional[torch.Tensor] = None


def build_extend_batch(
    input_ids: list,
    prefix_lens: list,
    extend_lens: list,
    rows: list,
    out_cache_loc: torch.Tensor,
    device: str,
    mode: ForwardMode = ForwardMode.EXTEND,
) -> ForwardBatch:
    """An EXTEND (or MIXED) ForwardBatch from host lists; every per-token and per-request index array
    travels in one packed host-to-device copy."""
    bs = len(rows)
    seq_lens = [p + e for p, e in zip(prefix_lens, extend_lens)]
    positions = (
        torch.cat(
            [torch.arange(p, p + e, dtype=torch.int64) for p, e in zip(prefix_lens, extend_lens)]
        )
        if bs
        else torch.empty(0, dtype=torch.int64)
    )
    starts = [0] * bs
    for i in range(1, bs):
        starts[i] = starts[i - 1] + extend_lens[i - 1]
    seq_lens_cpu = torch.tensor(seq_lens, dtype=torch.int64)
    ids, pos, rows_d, seq_d, loc, ext_d, pre_d, start_d = to_device_packed(
        [
            torch.tensor(input_ids, dtype=torch.int64),
            positions,
            torch.tensor(rows, dtype=torch.int64),
            seq_lens_cpu,
            out_cache_loc,
            torch.tensor(extend_lens, dtype=torch.int64),
            torch.tensor(prefix_lens, dtype=torch.int64),
            torch.tensor(starts, dtype=torch.int64),
        ],
        device,
    )
    return ForwardBatch(
        forward_mode=mode,
        batch_size=bs,
        input_ids=ids,
        positions=pos,
        req_pool_indices=rows_d,
        seq_lens=seq_d,
        out_cache_loc=loc,
        seq_lens_cpu=seq_lens_cpu,
        seq_lens_sum=sum(seq_lens),
        extend_num_tokens=sum(extend_lens),
        extend_seq_lens=ext_d,
        extend_prefix_lens=pre_d,
        extend_start_loc=start_d,
        extend_seq_lens_cpu=list(extend_lens),
        extend_prefix_lens_cpu=list(prefix_lens),
        max_extend_len=max(extend_lens) if bs else 0,
    )


def build_decode_batch(
    input_ids: torch.Tensor, seq_lens: list, rows: list, out_cache_loc: torch.Tensor, device: str
) -> ForwardBatch:
    """A DECODE ForwardBatch; seq_lens include the token being decoded. input_ids may already be on device.

    positions, rows, seq_lens and slots go to the device as one [4, bs] int64 block (one copy); the
    CUDA-graph runner copies that block into its static buffers with one more copy."""
    n = len(rows)
    loc_on_host = out_cache_loc.device.type == "cpu"
    # Rows padded to PACK_ALIGN_ELEMS so each row view is 128-byte aligned whatever bs is. Filled
    # through numpy: this runs every decode step and torch's small host ops cost ~3x more.
    width = packed_offsets([n])[-1]
    host = torch.zeros((4 if loc_on_host else 3, width), dtype=torch.int64)
    block = host.numpy()
    block[2, :n] = seq_lens
    np.subtract(block[2, :n], 1, out=block[0, :n])
    block[1, :n] = rows
    if loc_on_host:
        block[3, :n] = out_cache_loc.numpy()
    dev = _to(host, device)[:, :n]
    seq_lens_cpu = host[2, :n]
    return ForwardBatch(
        forward_mode=ForwardMode.DECODE,
        batch_size=len(rows),
        input_ids=_to(input_ids, device),
        positions=dev[0],
        req_pool_indices=dev[1],
        seq_lens=dev[2],
        out_cache_loc=dev[3] if loc_on_host else out_cache_loc,
        seq_lens_cpu=seq_lens_cpu,
        seq_lens_sum=sum(seq_lens),
        decode_packed=dev if loc_on_host else None,
    )


# Each view of a packed copy starts on a 128-byte boundary. Triton specialises a kernel on whether
# each pointer argument is 16-byte aligned; unaligned views at offsets that depend on the batch's
# token and request counts would compile a new variant (a stall of about a second) the first time a
# new parity combination of those counts shows up while serving.
PACK_ALIGN_ELEMS = 16


def packed_offsets(sizes: List[int]) -> List[int]:
    """Start offsets (in int64 elements) of each segment of a packed copy, each rounded up to
    PACK_ALIGN_ELEMS, plus the total length as the last entry."""
    offs, off = [], 0
    for n in sizes:
        offs.append(off)
        off += -(-n // PACK_ALIGN_ELEMS) * PACK_ALIGN_ELEMS
    return offs + [off]


def pack_host(tensors: List[torch.Tensor]) -> Tuple[torch.Tensor, List[int]]:
    """One flat int64 host tensor holding every tensor at its packed_offsets start, and the offsets."""
    offs = packed_offsets([t.numel() for t in tensors])
    flat = torch.zeros(offs[-1], dtype=torch.int64)
    for t, o in zip(tensors, offs):
        flat[o : o + t.numel()] = t.reshape(-1)
    return flat, offs


def unpack(flat: torch.Tensor, offs: List[int], shapes: List[torch.Size]) -> List[torch.Tensor]:
    """Views of `flat` (host or device) in the shapes packed by pack_host."""
    return [flat[o : o + math.prod(s)].view(s) for o, s in zip(offs, shapes)]


def to_device_packed(tensors: List[torch.Tensor], device: str) -> List[torch.Tensor]:
    """Move several small int64 host tensors to `device` with one pinned copy; returns device views
    in the same order, each 128-byte aligned (tensors already on the device pass through untouched)."""
    dev_type = torch.device(device).type
    host = [t for t in tensors if t.device.type != dev_type]
    if not host or dev_type == "cpu":
        return list(tensors)
    flat, offs = pack_host(host)
    views = iter(unpack(_to(flat, device), offs, [t.shape for t in host]))
    return [t if t.device.type == dev_type else next(views) for t in tensors]


def _to(t: torch.Tensor, device: str) -> torch.Tensor:
    """Host -> device without a host sync: a pinned copy (the caching host allocator recycles the
    pinned block once the copy's stream has passed it), non-blocking."""
    if t.device.type == torch.device(device).type:
        return t
    if t.numel() == 0:
        return t.to(device)
    return t.pin_memory().to(device, non_blocking=True)
