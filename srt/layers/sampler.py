"""Sampler: logits -> next token ids (+ logprobs), on the device, with no host synchronisation.

Random draws come from a counter-based hash of (seed, output position, token id), so a request
with a given seed gets the same tokens whatever batch it lands in, on any device.
Logprobs reported for the sampled positions are those of the temperature-scaled distribution (before
penalties and top-k / top-p / min-p filtering), as SGLang reports them: an RL loss takes them as the
rollout policy's probabilities. SGLANG_RETURN_ORIGINAL_LOGPROB=1 reports the model's own
distribution instead. Greedy rows have temperature 1: both are the raw distribution there.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import List, Optional, Tuple

import torch

from sglang.srt.sampling.sampling_batch_info import SamplingBatchInfo

logger = logging.getLogger(__name__)

_MASK32 = 0xFFFFFFFF
# On CUDA the noise, the division and the argmax run as one Triton kernel (same hash, same ties),
# and plain greedy rows as two (same NaN / inf / tie rules); SGLANG_TORCH_SAMPLER=1 keeps the torch
# paths (benchmarks compare the two).
FUSED_RACE = os.environ.get("SGLANG_TORCH_SAMPLER", "0") != "1"
RETURN_ORIGINAL_LOGPROB = os.environ.get("SGLANG_RETURN_ORIGINAL_LOGPROB", "").lower() in (
    "1",
    "true",
)


def reported_logprobs(logits: torch.Tensor, info: SamplingBatchInfo) -> torch.Tensor:
    """The log-distribution a row's logprobs are read from (float logits, before adjustments)."""
    if RETURN_ORIGINAL_LOGPROB or info.is_all_greedy:
        return torch.log_softmax(logits, dim=-1)
    return torch.log_softmax(logits / info.temperatures, dim=-1)


@dataclass
class SampleOutput:
    next_token_ids: torch.Tensor  # [bs] int64
    invalid: Optional[torch.Tensor] = None  # [bs] bool: nothing was samplable (NaN logits)
    next_token_logprobs: Optional[torch.Tensor] = None
    top_logprobs_val: Optional[torch.Tensor] = None  # [bs, max_k]
    top_logprobs_idx: Optional[torch.Tensor] = None


def _fmix32(h: torch.Tensor) -> torch.Tensor:
    """murmur3 finaliser on values held in int64 (products wrap mod 2^64; we keep the low 32 bits)."""
    h = h ^ (h >> 16)
    h = (h * 0x85EBCA6B) & _MASK32
    h = h ^ (h >> 13)
    h = (h * 0xC2B2AE35) & _MASK32
    return h ^ (h >> 16)


def row_hash(seeds: torch.Tensor, steps: torch.Tensor) -> torch.Tensor:
    """[bs] 32-bit hashes (in int64) of (seed, output position): the per-row half of the noise."""
    return _fmix32((seeds & _MASK32) ^ _fmix32((steps * 0x9E3779B1 + 0x7F4A7C15) & _MASK32))


def noise_from_row_hash(rows: torch.Tensor, vocab: int) -> torch.Tensor:
    """[bs, vocab] uniforms in (0, 1) from the row hashes and the token ids."""
    cols = torch.arange(vocab, device=rows.device, dtype=torch.int64)
    return bits_to_uniform(
        _fmix32(((rows[:, None] ^ (cols[None, :] * 0x27D4EB2F)) + 0x165667B1) & _MASK32)
    )


def uniform_noise(seeds: torch.Tensor, steps: torch.Tensor, vocab: int) -> torch.Tensor:
    """[bs, vocab] uniforms in (0, 1), a pure function of (seed, step, token id)."""
    return noise_from_row_hash(row_hash(seeds, steps), vocab)


def bits_to_uniform(h: torch.Tensor) -> torch.Tensor:
    """32-bit hashes -> uniforms strictly inside (0, 1).

    23 bits only: (2^23 - 0.5) / 2^23 is exact in float32, so u never rounds to 1 (-log u would be 0,
    and 0/0 = NaN would win the argmax and pick a masked token)."""
    return ((h >> 9).to(torch.float32) + 0.5) * (1.0 / (1 << 23))


def apply_logit_adjustments(logits: torch.Tensor, info: SamplingBatchInfo) -> None:
    """Bias, penalties, min_new_tokens and grammar masks, in place."""
    if info.logit_bias is not None:
        logits += info.logit_bias
    if info.output_counts is not None:
        logits -= info.frequency_penalties * info.output_counts
        logits -= info.presence_penalties * (info.output_counts > 0).to(logits.dtype)
    if info.repetition_penalties is not None:
        pen = torch.where(logits > 0, 1.0 / info.repetition_penalties, info.repetition_penalties)
        logits.copy_(torch.where(info.seen_mask, logits * pen, logits))
    if info.min_tokens_block is not None:
        logits.masked_fill_(info.min_tokens_block, float("-inf"))
    if info.vocab_mask is not None and info.apply_vocab_mask is not None:
        info.apply_vocab_mask(logits, info.vocab_mask)


def _has_adjustments(info: SamplingBatchInfo) -> bool:
    return (
        info.logit_bias is not None
        or info.output_counts is not None
        or info.repetition_penalties is not None
        or info.min_tokens_block is not None
        or info.vocab_mask is not None
    )


def _nan_to_neg_inf(logits: torch.Tensor) -> torch.Tensor:
    """NaN never reaches the argmax; +inf counts as the largest float."""
    return torch.nan_to_num(
        logits, nan=float("-inf"), posinf=torch.finfo(logits.dtype).max, neginf=float("-inf")
    )


def _pick_greedy(logits: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """One max pass over NaN-free logits gives the greedy ids and the dead rows (every logit -inf <=>
    the max is -inf); dead rows get id 0. First maximum wins."""
    best, ids = logits.max(dim=-1)
    dead = best == float("-inf")
    return torch.where(dead, torch.zeros_like(ids), ids), dead


def greedy_torch(logits: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """(ids, dead) of float32 logits by the sampler's greedy rule: the fused kernel's reference."""
    return _pick_greedy(_nan_to_neg_inf(logits))


def sample(
    logits: torch.Tensor,
    info: SamplingBatchInfo,
    return_logprob: bool = False,
    top_logprobs_nums: Optional[List[int]] = None,
) -> SampleOutput:
    if (
        info.is_all_greedy
        and not return_logprob
        and logits.is_cuda
        and FUSED_RACE
        and not _has_adjustments(info)
    ):
        # Plain greedy decode on CUDA: two small kernels on the raw logits instead of a float copy,
        # nan_to_num, a single-row max (28 us at batch 1 for 128k logits) and three more ops.
        fused = _fused("greedy_argmax", logits)
        if fused is not None:
            return SampleOutput(next_token_ids=fused[0], invalid=fused[1])
    logits = logits.float()
    raw_logprobs = reported_logprobs(logits, info) if return_logprob else None
    logits = logits.clone() if return_logprob else logits
    apply_logit_adjustments(logits, info)
    logits = _nan_to_neg_inf(logits)
    greedy_ids, dead = _pick_greedy(logits)
    ids = greedy_ids
    if not info.is_all_greedy:
        ids = torch.where(dead, torch.zeros_like(ids), _sample_filtered(logits, info, greedy_ids))
    out = SampleOutput(next_token_ids=ids, invalid=dead)
    if return_logprob:
        out.next_token_logprobs = raw_logprobs.gather(1, ids.unsqueeze(1)).squeeze(1)
        k = min(
            max(top_logprobs_nums or [0]), raw_logprobs.shape[-1]
        )  # validated upstream; never crash here
        if k > 0:
            out.top_logprobs_val, out.top_logprobs_idx = raw_logprobs.topk(k, dim=-1)
    return out


def _sample_filtered(
    logits: torch.Tensor, info: SamplingBatchInfo, greedy_ids: torch.Tensor
) -> torch.Tensor:
    probs = torch.softmax(logits / info.temperatures, dim=-1)
    if info.need_top_k or info.need_top_p or info.need_min_p:
        probs = _filter(probs, info)
    # Exponential race: argmax p / E with E ~ Exp(1) draws a token with probability p (Gumbel-max).
    rows = row_hash(info.seeds, info.steps)
    sampled = _fused("race_argmax", probs, rows) if probs.is_cuda and FUSED_RACE else None
    if sampled is None:
        sampled = race_argmax_torch(probs, rows)
    return torch.where(info.greedy, greedy_ids, sampled)


def race_argmax_torch(probs: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """argmax_v probs / -log u(row hash, v) per row, first id on ties: the race with the noise in memory."""
    return (probs / (-torch.log(noise_from_row_hash(rows, probs.shape[-1])))).argmax(dim=-1)


def _fused(kernel: str, *args):
    """A Triton sampling kernel of triton_ops/sampling.py, or None (and the torch paths from then on)
    if it cannot be built here."""
    global FUSED_RACE
    try:
        from sglang.srt.layers.triton_ops import sampling

        return getattr(sampling, kernel)(*args)
    except Exception as e:  # noqa: BLE001 - a Triton / driver mismatch must not take sampling down
        logger.warning("fused sampling kernel %s unavailable, using the torch path: %s", kernel, e)
        FUSED_RACE = False
        return None


def _filter(probs: torch.Tensor, info: SamplingBatchInfo) -> torch.Tensor:
    sorted_p, order = probs.sort(dim=-1, descending=True)
    ranks = torch.arange(probs.shape[-1], device=probs.device)[None, :]
    keep = ranks < info.top_ks[:, None]
    if info.need_top_p:
        cum = sorted_p.cumsum(dim=-1)
        keep &= (cum - sorted_p) <= info.top_ps[:, None]
    if info.need_min_p:
        keep &= sorted_p >= sorted_p[:, :1] * info.min_ps[:, None]
    keep[:, 0] = True  # the most likely token always survives
    sorted_p = sorted_p * keep
    out = torch.zeros_like(probs).scatter_(1, order, sorted_p)
    return out / out.sum(dim=-1, keepdim=True)
