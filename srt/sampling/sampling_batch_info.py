"""SamplingBatchInfo: one batch's sampling parameters as device tensors.

Built on the host from the requests just before sampling, so that history-dependent parts
(penalty counts, min_new_tokens, grammar masks) see every token already accepted.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, List, Optional

import torch

from sglang.srt.utils.device_copy import to_device

if TYPE_CHECKING:
    from sglang.srt.core.req import Req


@dataclass
class SamplingBatchInfo:
    temperatures: torch.Tensor  # [bs, 1] float32 (1.0 for greedy rows, which use argmax)
    top_ps: torch.Tensor  # [bs]
    top_ks: torch.Tensor  # [bs] int64
    min_ps: torch.Tensor  # [bs]
    greedy: torch.Tensor  # [bs] bool
    seeds: torch.Tensor  # [bs] int64
    steps: torch.Tensor  # [bs] int64: output position being sampled (keys the seeded noise)
    is_all_greedy: bool
    need_top_p: bool
    need_top_k: bool
    need_min_p: bool
    vocab_size: int
    # Optional, history-dependent adjustments (None when no request needs them).
    logit_bias: Optional[torch.Tensor] = None  # [bs, V]
    frequency_penalties: Optional[torch.Tensor] = None  # [bs, 1]
    presence_penalties: Optional[torch.Tensor] = None  # [bs, 1]
    output_counts: Optional[torch.Tensor] = None  # [bs, V]
    repetition_penalties: Optional[torch.Tensor] = None  # [bs, 1]
    seen_mask: Optional[torch.Tensor] = None  # [bs, V] bool: token in prompt or output
    min_tokens_block: Optional[torch.Tensor] = (
        None  # [bs, V] bool: stop tokens blocked by min_new_tokens
    )
    vocab_mask: Optional[torch.Tensor] = None  # grammar bitmask
    apply_vocab_mask: Optional[Callable[[torch.Tensor, torch.Tensor], None]] = None

    # The requests (by identity) this info was built for, and whether any has history terms.
    built_for: Optional[tuple] = None
    has_history: bool = True

    @classmethod
    def for_decode(
        cls,
        reqs: List["Req"],
        vocab_size: int,
        device: str,
        previous: Optional["SamplingBatchInfo"],
    ) -> "SamplingBatchInfo":
        """The decode step's info: the previous step's, with only the sampling positions moved on,
        when the batch holds the same requests in the same order and none has history-dependent
        terms (penalties, min_new_tokens, logit bias, a grammar); built afresh otherwise. A new
        object either way: a pass still in flight may read the previous one."""
        key = tuple(id(r) for r in reqs)
        if previous is None or previous.has_history or previous.built_for != key:
            return cls.from_reqs(reqs, vocab_size, device)
        steps = torch.tensor(
            [len(r.output_ids) + r.inflight_tokens for r in reqs], dtype=torch.int64
        )
        return dataclasses.replace(previous, steps=to_device(steps, device))

    @classmethod
    def from_reqs(cls, reqs: List["Req"], vocab_size: int, device: str) -> "SamplingBatchInfo":
        """Each request's sampling position counts tokens still in flight (req.inflight_tokens, overlap loop)."""
        sps = [r.sampling_params for r in reqs]
        greedy = [sp.is_greedy() for sp in sps]
        temps = [1.0 if g else sp.temperature for g, sp in zip(greedy, sps)]
        top_ks = [min(sp.top_k, vocab_size) for sp in sps]
        # Two packed copies (floats, ints) instead of seven small ones.
        floats = to_device(
            torch.tensor(
                [temps, [sp.top_p for sp in sps], [sp.min_p for sp in sps]], dtype=torch.float32
            ),
            device,
        )
        ints = to_device(
            torch.tensor(
                [
                    top_ks,
                    [int(g) for g in greedy],
                    [_seed_of(r) for r in reqs],
                    [len(r.output_ids) + r.inflight_tokens for r in reqs],
                ],
                dtype=torch.int64,
            ),
            device,
        )
        info = cls(
            temperatures=floats[0].view(-1, 1),
            top_ps=floats[1],
            top_ks=ints[0],
            min_ps=floats[2],
            greedy=ints[1].bool(),
            seeds=ints[2],
            steps=ints[3],
            is_all_greedy=all(greedy),
            need_top_p=any(sp.top_p < 1.0 for sp, g in zip(sps, greedy) if not g),
            need_top_k=any(k < vocab_size for k, g in zip(top_ks, greedy) if not g),
            need_min_p=any(sp.min_p > 0 for sp, g in zip(sps, greedy) if not g),
            vocab_size=vocab_size,
        )
        info._add_history_terms(reqs, device)
        info.built_for = tuple(id(r) for r in reqs)
        info.has_history = (
            info.logit_bias is not None
            or info.output_counts is not None
            or info.repetition_penalties is not None
            or any(r.grammar is not None for r in reqs)
            or any(r.sampling_params.min_new_tokens for r in reqs)
        )
        return info

    def _add_history_terms(self, reqs: List["Req"], device: str) -> None:
        bs, V = len(reqs), self.vocab_size
        sps = [r.sampling_params for r in reqs]
        if any(sp.logit_bias for sp in sps):
            bias = torch.zeros((bs, V), dtype=torch.float32)
            for i, sp in enumerate(sps):
                for tid, val in (sp.logit_bias or {}).items():
                    bias[i, int(tid)] += float(val)
            self.logit_bias = to_device(bias, device)
        if any(sp.frequency_penalty or sp.presence_penalty for sp in sps):
            counts = torch.zeros((bs, V), dtype=torch.float32)
            for i, r in enumerate(reqs):
                if r.output_ids:
                    ids = torch.tensor(r.output_ids, dtype=torch.int64).clamp_(0, V - 1)
                    counts[i].index_add_(0, ids, torch.ones(len(ids)))
            self.output_counts = to_device(counts, device)
            self.frequency_penalties = to_device(
                torch.tensor([sp.frequency_penalty for sp in sps]).view(-1, 1), device
            )
            self.presence_penalties = to_device(
                torch.tensor([sp.presence_penalty for sp in sps]).view(-1, 1), device
            )
        if any(sp.repetition_penalty != 1.0 for sp in sps):
            seen = torch.zeros((bs, V), dtype=torch.bool)
            for i, r in enumerate(reqs):
                ids = torch.tensor(r.origin_input_ids + r.output_ids, dtype=torch.int64).clamp_(
                    0, V - 1
                )
                seen[i, ids] = True
            self.seen_mask = to_device(seen, device)
            self.repetition_penalties = to_device(
                torch.tensor([sp.repetition_penalty for sp in sps]).view(-1, 1), device
            )
        blocked = [
            (i, r)
            for i, r in enumerate(reqs)
            if len(r.output_ids) + r.inflight_tokens < r.sampling_params.min_new_tokens
        ]
        if blocked:
            block = torch.zeros((bs, V), dtype=torch.bool)
            for i, r in blocked:
                stop_ids = set(r.sampling_params.stop_token_ids or [])
                if not r.sampling_params.ignore_eos:
                    stop_ids |= set(r.eos_token_ids)
                for t in stop_ids:
                    if 0 <= t < V:
                        block[i, t] = True
            self.min_tokens_block = to_device(block, device)


def _seed_of(req: "Req") -> int:
    """A request's sampling seed: its own, or one drawn once at first use, so reruns are reproducible."""
    sp = req.sampling_params
    if sp.sampling_seed is not None:
        return int(sp.sampling_seed) & 0x7FFFFFFF
    if req.auto_seed is None:
        req.auto_seed = random.getrandbits(31)
    return req.auto_seed
