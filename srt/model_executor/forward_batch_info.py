"""ForwardBatch: the device-side description of one forward pass.

EXTEND runs new tokens of each request against its cached prefix (prefill, chunked prefill);
DECODE runs one token per request; MIXED is an extend batch whose tail rows are decode requests
(extend length 1), used by --enable-mixed-chunk; IDLE is an empty pass (a TP rank with no work).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum, auto
from typing import TYPE_CHECKING, Any, List, Optional

import torch

if TYPE_CHECKING:
    from sglang.srt.sampling.sampling_batch_info import SamplingBatchInfo


class ForwardMode(IntEnum):
    EXTEND = auto()
    DECODE = auto()
    MIXED = auto()
    IDLE = auto()

    def is_extend(self) -> bool:
        return self in (ForwardMode.EXTEND, ForwardMode.MIXED)

    def is_decode(self) -> bool:
        return self == ForwardMode.DECODE

    def is_mixed(self) -> bool:
        return self == ForwardMode.MIXED

    def is_idle(self) -> bool:
        return self == ForwardMode.IDLE


@dataclass
class ForwardBatch:
    forward_mode: ForwardMode
    batch_size: int
    input_ids: torch.Tensor          # [num_tokens] int64 (may hold negative future ids before resolution)
    positions: torch.Tensor          # [num_tokens] int64
    req_pool_indices: torch.Tensor   # [bs] int64
    seq_lens: torch.Tensor           # [bs] int64, length including this pass's tokens
    out_cache_loc: torch.Tensor      # [num_tokens] int64 KV slots written by this pass
    seq_lens_cpu: Optional[torch.Tensor] = None
    seq_lens_sum: int = 0

    # Extend only.
    extend_num_tokens: int = 0
    extend_seq_lens: Optional[torch.Tensor] = None       # [bs] device
    extend_prefix_lens: Optional[torch.Tensor] = None    # [bs] device
    extend_start_loc: Optional[torch.Tensor] = None      # [bs] device
    extend_seq_lens_cpu: List[int] = field(default_factory=list)
    extend_prefix_lens_cpu: List[int] = field(default_factory=list)
    max_extend_len: int = 0

    # Logprobs.
    return_logprob: bool = False
    top_logprobs_nums: Optional[List[int]] = None
    extend_logprob_start_lens_cpu: Optional[List[int]] = None  # per request, relative to the extend part
    extend_logprob_lens_cpu: Optional[List[int]] = None        # per request, prompt-logprob positions here
    extend_input_logprob_token_ids: Optional[torch.Tensor] = None  # next-token ids of logprob positions

    sampling_info: Optional["SamplingBatchInfo"] = None

    # Set by the model runner.
    req_to_token_pool: Any = None
    token_to_kv_pool: Any = None
    attn_backend: Any = None
    # Set by the CUDA-graph runner when padding the batch.
    num_padded: int = 0


def build_extend_batch(input_ids: list, prefix_lens: list, extend_lens: list, rows: list, out_cache_loc: torch.Tensor,
                       device: str, mode: ForwardMode = ForwardMode.EXTEND) -> ForwardBatch:
    """An EXTEND (or MIXED) ForwardBatch from host lists; one host-to-device copy per tensor."""
    bs = len(rows)
    seq_lens = [p + e for p, e in zip(prefix_lens, extend_lens)]
    positions = torch.cat([torch.arange(p, p + e, dtype=torch.int64) for p, e in zip(prefix_lens, extend_lens)]) \
        if bs else torch.empty(0, dtype=torch.int64)
    starts = [0] * bs
    for i in range(1, bs):
        starts[i] = starts[i - 1] + extend_lens[i - 1]
    seq_lens_cpu = torch.tensor(seq_lens, dtype=torch.int64)
    return ForwardBatch(
        forward_mode=mode,
        batch_size=bs,
        input_ids=_to(torch.tensor(input_ids, dtype=torch.int64), device),
        positions=_to(positions, device),
        req_pool_indices=_to(torch.tensor(rows, dtype=torch.int64), device),
        seq_lens=_to(seq_lens_cpu, device),
        out_cache_loc=_to(out_cache_loc, device),
        seq_lens_cpu=seq_lens_cpu,
        seq_lens_sum=sum(seq_lens),
        extend_num_tokens=sum(extend_lens),
        extend_seq_lens=_to(torch.tensor(extend_lens, dtype=torch.int64), device),
        extend_prefix_lens=_to(torch.tensor(prefix_lens, dtype=torch.int64), device),
        extend_start_loc=_to(torch.tensor(starts, dtype=torch.int64), device),
        extend_seq_lens_cpu=list(extend_lens),
        extend_prefix_lens_cpu=list(prefix_lens),
        max_extend_len=max(extend_lens) if bs else 0,
    )


def build_decode_batch(input_ids: torch.Tensor, seq_lens: list, rows: list, out_cache_loc: torch.Tensor,
                       device: str) -> ForwardBatch:
    """A DECODE ForwardBatch; seq_lens include the token being decoded. input_ids may already be on device."""
    seq_lens_cpu = torch.tensor(seq_lens, dtype=torch.int64)
    return ForwardBatch(
        forward_mode=ForwardMode.DECODE,
        batch_size=len(rows),
        input_ids=_to(input_ids, device),
        positions=_to(seq_lens_cpu - 1, device),
        req_pool_indices=_to(torch.tensor(rows, dtype=torch.int64), device),
        seq_lens=_to(seq_lens_cpu, device),
        out_cache_loc=_to(out_cache_loc, device),
        seq_lens_cpu=seq_lens_cpu,
        seq_lens_sum=sum(seq_lens),
    )


def _to(t: torch.Tensor, device: str) -> torch.Tensor:
    if t.device.type == torch.device(device).type:
        return t
    return t.pin_memory().to(device, non_blocking=True) if t.numel() > 0 else t.to(device)
