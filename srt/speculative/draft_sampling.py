"""How a draft model or head picks its tokens: the target's sampling rule on the draft's logits.

Greedy rows take the argmax; sampled rows draw from the draft's distribution with noise salted
apart from the target's, and that distribution is kept for the rejection rule (a greedy row's is
a point mass on its argmax)."""

from __future__ import annotations

from typing import List, Optional, Tuple

import torch

from sglang.srt.core.req import Req
from sglang.srt.layers.sampler import race_argmax_torch, row_hash
from sglang.srt.sampling.sampling_batch_info import SamplingBatchInfo
from sglang.srt.speculative.verify import DRAFT_SALT, target_probs


def draft_info(reqs: List[Req], vocab: int, device: str, step: int) -> SamplingBatchInfo:
    """The requests' sampling parameters for drafting their (step + 1)-th draft."""
    info = SamplingBatchInfo.from_reqs(reqs, vocab, device)
    info.steps = info.steps + 1 + step  # the 1-based index of the drafted token, as verify
    return info


def choose_drafts(
    logits: torch.Tensor, info: SamplingBatchInfo
) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
    """Each row's draft token (int64, on the logits' device: the next draft step takes it as its
    input without a host round trip) and the draft distribution behind it (None if all rows are
    greedy)."""
    logits = logits.float()
    greedy = logits.argmax(dim=-1)
    if info.is_all_greedy:
        return greedy, None
    probs = target_probs(logits, info)
    sampled = race_argmax_torch(probs, row_hash(info.seeds ^ DRAFT_SALT, info.steps))
    toks = torch.where(info.greedy, greedy, sampled)
    point = torch.zeros_like(probs).scatter_(1, greedy.unsqueeze(1), 1.0)
    probs = torch.where(info.greedy.unsqueeze(1), point, probs)
    return toks, probs
