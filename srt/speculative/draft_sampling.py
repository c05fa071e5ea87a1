"""How a draft model or head picks its tokens: the target's sampling rule on the draft's logits.

Greedy rows take the argmax; sampled rows draw from the draft's distribution with noise salted
apart from the target's, and that distribution is kept for the rejection rule (a greedy row's is
a point mass on its argmax)."""

from __future__ import annotations

import dataclasses
from typing import Callable, List, Optional, Tuple

import torch

from sglang.srt.core.req import Req
from sglang.srt.layers.sampler import race_argmax_torch, row_hash
from sglang.srt.sampling.sampling_batch_info import SamplingBatchInfo
from sglang.srt.speculative.verify import DRAFT_SALT, target_probs


def draft_info(reqs: List[Req], vocab: int, device: str) -> SamplingBatchInfo:
    """The requests' sampling parameters for their first draft, built once per draft: later draft
    steps take rows and step offsets of it (draft_step_info) instead of rebuilding it. Drafts
    follow the target's temperature and filters but not its history terms (penalties, bias, masks):
    verification judges each draft under those."""
    info = SamplingBatchInfo.from_reqs(reqs, vocab, device)
    return dataclasses.replace(
        info,
        steps=info.steps + 1,  # the 1-based index of the drafted token, as verify
        logit_bias=None,
        frequency_penalties=None,
        presence_penalties=None,
        output_counts=None,
        repetition_penalties=None,
        seen_mask=None,
        min_tokens_block=None,
        vocab_mask=None,
        apply_vocab_mask=None,
    )


def draft_step_info(
    base: SamplingBatchInfo, rows: Optional[torch.Tensor], step: int
) -> SamplingBatchInfo:
    """base's rows `rows` (None: all) for the (step + 1)-th draft; no host-to-device copy."""
    if rows is None:
        return dataclasses.replace(base, steps=base.steps + step) if step else base
    if base.is_all_greedy:  # choose_drafts reads nothing else of an all-greedy info
        return base
    return dataclasses.replace(
        base,
        temperatures=base.temperatures[rows],
        top_ps=base.top_ps[rows],
        top_ks=base.top_ks[rows],
        min_ps=base.min_ps[rows],
        greedy=base.greedy[rows],
        seeds=base.seeds[rows],
        steps=base.steps[rows] + step,
    )


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


def chain_verify_inputs(
    reqs: List[Req], drafts: List[List[int]], qs: List[List[torch.Tensor]], vocab: int, device
) -> Tuple[List[int], Optional[torch.Tensor]]:
    """The verify ids of chains (each request's pending token, then its drafts) and the draft
    distribution on each verify row that judges a draft ([rows, vocab]; zeros on each request's
    last row, which judges none; None if every chain was greedy)."""
    ids: List[int] = []
    for r, toks in zip(reqs, drafts):
        ids.append(r.output_ids[-1])
        ids.extend(toks)
    if not any(qs):
        return ids, None
    zero = torch.zeros((1, vocab), device=device)
    rows = [torch.cat([torch.stack(q) if q else zero[:0], zero]) for q in qs]
    return ids, torch.cat(rows, dim=0)


def draft_chains(
    base: SamplingBatchInfo,
    logits: torch.Tensor,
    lengths: List[int],
    advance: Callable[[List[int], int, torch.Tensor, Optional[torch.Tensor]], torch.Tensor],
) -> Tuple[List[List[int]], List[List[torch.Tensor]]]:
    """Chains of lengths[j] (>= 1) drafts for the rows j of `logits` (the drafter's output at each
    request's pending token; base: draft_info of the same requests). advance(live, step, toks,
    kept) runs the drafter once over the rows still drafting (`live`, ascending) fed their last
    drafts `toks`, and returns its logits there; kept (on the device) picks the live rows out of
    the previous step's rows, None when all stayed. Returns each row's drafts and their
    distributions ([] if all greedy)."""
    drafts: List[List[int]] = [[] for _ in lengths]
    qs: List[List[torch.Tensor]] = [[] for _ in lengths]
    live = list(range(len(lengths)))
    rows: Optional[torch.Tensor] = None  # live's indices into the first step's rows
    chosen: List[torch.Tensor] = []
    owners: List[int] = []
    step = 0
    # Drafts stay on the device from step to step (each step's input is the last step's choice);
    # the host reads them all once, after the last step is queued.
    while True:
        toks, q = choose_drafts(logits, draft_step_info(base, rows, step))
        chosen.append(toks)
        for n, j in enumerate(live):
            owners.append(j)
            if q is not None:
                qs[j].append(q[n])
        step += 1
        keep = [n for n, j in enumerate(live) if lengths[j] > step]
        if not keep:
            break
        kept = None
        if len(keep) < len(live):
            kept = torch.tensor(keep, device=toks.device)
            toks = toks[kept]
            rows = kept if rows is None else rows[kept]
            live = [live[n] for n in keep]
        logits = advance(live, step, toks, kept)
    for j, t in zip(owners, torch.cat(chosen).tolist()):
        drafts[j].append(t)
    return drafts, qs
