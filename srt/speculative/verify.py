"""Verification of draft tokens against the target's distribution at every verify position.

A request's verify rows are its pending token followed by its k drafts d_1..d_k; row j's logits
give the target's distribution p_j over the token after row j. Row j - 1 therefore judges d_j:
- greedy rows accept d_j iff it is p_{j-1}'s argmax (the output equals plain greedy decoding);
- sampled rows use the standard rule: accept with probability min(1, p(d) / q(d)), q the draft's
  distribution (a point mass for NGRAM drafts); at the first rejection the next token is drawn from
  the residual max(p - q, 0) renormalised, so the output is distributed exactly as the target's.
The accepted drafts plus one more token (that residual draw, or a draw from the row after the last
draft when all were accepted) are the step's output: between 1 and k + 1 tokens per request.
Random draws are keyed by (seed, output position) like the plain sampler's, with a salt per use.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

import torch

from sglang.srt.layers.sampler import (
    _filter,
    _nan_to_neg_inf,
    apply_logit_adjustments,
    bits_to_uniform,
    race_argmax_torch,
    reported_logprobs,
    row_hash,
)
from sglang.srt.sampling.sampling_batch_info import SamplingBatchInfo
from sglang.srt.speculative.draft_tree import depths_of
from sglang.srt.utils.device_copy import to_device, to_host_async

# Salts of the per-row uniforms (the plain sampler's own noise, unsalted, draws the emitted token).
ACCEPT_SALT = 0x5BD1E995
DRAFT_SALT = 0x68E31DA4


@dataclass
class VerifyLayout:
    """Where each request's rows are: rows [starts[r], starts[r] + 1 + num_drafts[r]). parents:
    None when every request's drafts are a chain; else per request the parent row of each of its
    rows (local indices, -1 for the pending token), a draft tree (draft_tree.py)."""

    starts: List[int]
    num_drafts: List[int]
    parents: Optional[List[List[int]]] = None
    # Drafts each request accepts whatever the target says (simulated_acceptance.py; None: judged).
    forced: Optional[List[int]] = None

    @classmethod
    def of(cls, num_drafts: List[int], parents: Optional[List[List[int]]] = None) -> "VerifyLayout":
        starts, s = [], 0
        for k in num_drafts:
            starts.append(s)
            s += 1 + k
        return cls(starts, list(num_drafts), parents)

    def depths(self) -> List[List[int]]:
        """Per request, the depth of each row (the chain's row index when there is no tree)."""
        if self.parents is None:
            return [list(range(1 + k)) for k in self.num_drafts]
        return [depths_of(par) for par in self.parents]

    @property
    def num_rows(self) -> int:
        return sum(1 + k for k in self.num_drafts)


@dataclass
class VerifyOutput:
    """Host lists, per request."""

    accept_lens: List[int]  # drafts accepted
    tokens: List[List[int]]  # accepted drafts + the one drawn after them
    invalid: List[bool]  # a row had nothing samplable (NaN logits)
    # Draft trees: per request the local rows of the accepted drafts, by depth (a chain's are
    # 1..accept_len, and then this is None).
    paths: Optional[List[List[int]]] = None
    logprobs: Optional[List[List[float]]] = None  # raw logprob of each emitted token
    top_logprobs_val: Optional[List[List[List[float]]]] = None
    top_logprobs_idx: Optional[List[List[List[int]]]] = None


def target_probs(logits: torch.Tensor, info: SamplingBatchInfo) -> torch.Tensor:
    """The distribution each row samples from: temperature, then top-k / top-p / min-p (rows of
    greedy requests are left as they are; their choice is the argmax)."""
    probs = torch.softmax(logits / info.temperatures, dim=-1)
    if info.need_top_k or info.need_top_p or info.need_min_p:
        probs = _filter(probs, info)
    return probs


def row_uniforms(info: SamplingBatchInfo, salt: int) -> torch.Tensor:
    """One uniform in (0, 1) per row, a pure function of (seed, output position, salt)."""
    return bits_to_uniform(row_hash(info.seeds ^ salt, info.steps))


def judged_logits(logits: torch.Tensor, info: SamplingBatchInfo, return_logprob: bool):
    """The rows' logits as the sampler sees them (float, penalties and masks applied, NaN as
    -inf), the log-softmax logprobs are read from (None without; see reported_logprobs), each row's
    argmax and whether a row has nothing samplable (its argmax is then 0)."""
    logits = logits.float()
    raw_lp = reported_logprobs(logits, info) if return_logprob else None
    logits = logits.clone() if return_logprob else logits
    apply_logit_adjustments(logits, info)
    logits = _nan_to_neg_inf(logits)
    best, greedy_pick = logits.max(dim=-1)
    dead = best == float("-inf")
    greedy_pick = torch.where(dead, torch.zeros_like(greedy_pick), greedy_pick)
    return logits, raw_lp, greedy_pick, dead


def launch_verify(
    logits: torch.Tensor,
    verify_ids: torch.Tensor,
    layout: VerifyLayout,
    info: SamplingBatchInfo,
    draft_probs: Optional[torch.Tensor] = None,
    top_logprobs_num: int = 0,
    return_logprob: bool = False,
) -> "PendingVerify":
    """logits [R, V] at every verify row, verify_ids [R] the rows' input tokens, info per row
    (steps = the output position each row predicts), draft_probs [R, V] the draft's distribution
    behind the token that follows each row (None: point masses, as NGRAM drafts are).

    Only device work is queued (no host sync): the overlap loop builds its next batch meanwhile."""
    R = logits.shape[0]
    dev = logits.device
    logits, raw_lp, greedy_pick, dead = judged_logits(logits, info, return_logprob)

    # The draft each row judges: the input token of the next row of the same request.
    k = to_device(torch.tensor(layout.num_drafts, dtype=torch.int64), dev)
    starts = to_device(torch.tensor(layout.starts, dtype=torch.int64), dev)
    row_req = torch.repeat_interleave(
        torch.arange(len(layout.starts), device=dev), 1 + k, output_size=R
    )
    local = torch.arange(R, device=dev) - starts[row_req]
    judges = local < k[row_req]  # rows that have a draft after them
    nxt = torch.clamp(torch.arange(R, device=dev) + 1, max=R - 1)
    draft = torch.where(judges, verify_ids[nxt], torch.zeros_like(verify_ids))

    if info.is_all_greedy:
        accept = judges & (greedy_pick == draft)
        emit_if_rejected = emit_if_final = greedy_pick
    else:
        probs = target_probs(logits, info)
        p_d = probs.gather(1, draft.unsqueeze(1)).squeeze(1)
        if draft_probs is None:
            q_d = torch.ones_like(p_d)
            residual = probs.scatter(1, draft.unsqueeze(1), 0.0)
        else:
            q_d = draft_probs.gather(1, draft.unsqueeze(1)).squeeze(1)
            residual = torch.clamp(probs - draft_probs, min=0.0)
        u = row_uniforms(info, ACCEPT_SALT)
        sampled_accept = u * q_d < p_d  # u < p / q without dividing by a zero q
        accept = judges & torch.where(info.greedy, greedy_pick == draft, sampled_accept)
        mass = residual.sum(dim=-1, keepdim=True)
        residual = torch.where(mass > 0, residual / mass.clamp_min(1e-30), probs)
        rows = row_hash(info.seeds, info.steps)
        from_p = race_argmax_torch(probs, rows)
        from_residual = race_argmax_torch(residual, rows)
        emit_if_final = torch.where(info.greedy, greedy_pick, from_p)
        emit_if_rejected = torch.where(info.greedy, greedy_pick, from_residual)

    if layout.forced is not None:
        forced = to_device(torch.tensor(layout.forced, dtype=torch.int64), dev)
        accept = judges & (local < forced[row_req])
    # Leading accepted drafts per request: a cumulative product over each request's rows.
    acc = accept.to(torch.int64)
    accept_lens = torch.zeros(len(layout.starts), dtype=torch.int64, device=dev)
    if R:
        run = _segment_cumprod(acc, row_req, starts)
        accept_lens.index_add_(0, row_req, run * judges.to(torch.int64))
    final_row = starts + accept_lens
    rejected = accept_lens < k
    last_tok = torch.where(rejected, emit_if_rejected[final_row], emit_if_final[final_row])
    pending = PendingVerify(
        layout, to_host_async(verify_ids), to_host_async(accept_lens), to_host_async(last_tok)
    )
    pending.dead = to_host_async(dead)
    if return_logprob:
        # Row j of a request emits its next row's input while j < accept_len, then last_tok; the
        # rows after that emit nothing (the host drops them).
        emitted = torch.where(local < accept_lens[row_req], draft, last_tok[row_req])
        pending.queue_logprobs(raw_lp, emitted, top_logprobs_num)
    pending.mark_copies_queued(dev)
    return pending


class PendingVerify:
    """A launched verification; result() waits for its copies and builds the host lists."""

    def __init__(
        self,
        layout: VerifyLayout,
        ids: torch.Tensor,
        accept_lens: torch.Tensor,
        last_tok: torch.Tensor,
    ):
        self.layout = layout
        self.ids, self.accept_lens, self.last_tok = ids, accept_lens, last_tok
        self.dead: Optional[torch.Tensor] = None
        self.logprobs: Optional[torch.Tensor] = None
        self.top_val: Optional[torch.Tensor] = None
        self.top_idx: Optional[torch.Tensor] = None
        self.on_path: Optional[torch.Tensor] = None  # draft trees: [R] rows on the accepted path
        self.event: Optional[torch.cuda.Event] = None
        self._out: Optional[VerifyOutput] = None

    def queue_logprobs(self, raw_lp: torch.Tensor, emitted: torch.Tensor, top: int) -> None:
        """Copies of each row's raw logprob of the token it emits, and of its top `top`."""
        self.logprobs = to_host_async(raw_lp.gather(1, emitted.unsqueeze(1)).squeeze(1))
        if top > 0:
            v, i = raw_lp.topk(min(top, raw_lp.shape[-1]), dim=-1)
            self.top_val, self.top_idx = to_host_async(v), to_host_async(i)

    def mark_copies_queued(self, device: torch.device) -> None:
        """The copies are all queued: on CUDA an event behind them tells when the host has them."""
        if device.type == "cuda":
            self.event = torch.cuda.Event()
            self.event.record()

    def result(self) -> VerifyOutput:
        if self._out is None:
            if self.event is not None:
                self.event.synchronize()
            self._out = self._to_host()
        return self._out

    def _to_host(self) -> VerifyOutput:
        ids_h, acc_h, last_h = self.ids.tolist(), self.accept_lens.tolist(), self.last_tok.tolist()
        dead_h = self.dead.tolist()
        out = VerifyOutput(accept_lens=acc_h, tokens=[], invalid=[])
        # The rows each request emits from, in order: the pending token's and the accepted drafts'.
        emit_rows: List[List[int]] = []
        if self.on_path is None:
            for r, s in enumerate(self.layout.starts):
                emit_rows.append(list(range(s, s + acc_h[r] + 1)))
        else:
            path_h = self.on_path.tolist()
            out.paths = []
            for r, s in enumerate(self.layout.starts):
                rows = [j for j in range(s, s + 1 + self.layout.num_drafts[r]) if path_h[j]]
                emit_rows.append(rows)
                out.paths.append([j - s for j in rows[1:]])
        for r, rows in enumerate(emit_rows):
            out.tokens.append([ids_h[j] for j in rows[1:]] + [last_h[r]])
            out.invalid.append(any(dead_h[j] for j in rows))
        if self.logprobs is not None:
            lp = self.logprobs.tolist()
            tv = self.top_val.tolist() if self.top_val is not None else None
            ti = self.top_idx.tolist() if self.top_idx is not None else None
            out.logprobs, out.top_logprobs_val, out.top_logprobs_idx = [], [], []
            for rows in emit_rows:
                out.logprobs.append([lp[j] for j in rows])
                out.top_logprobs_val.append([tv[j] for j in rows] if tv is not None else [])
                out.top_logprobs_idx.append([ti[j] for j in rows] if ti is not None else [])
        return out


def _segment_cumprod(x: torch.Tensor, seg: torch.Tensor, starts: torch.Tensor) -> torch.Tensor:
    """Cumulative product of 0/1 values restarting at each segment: 1 while every value so far in
    the segment is 1."""
    zeros_before = torch.cumsum(1 - x, dim=0)
    base = torch.where(
        starts > 0, zeros_before[(starts - 1).clamp_min(0)], torch.zeros_like(starts)
    )
    return (zeros_before - base[seg] == 0).to(torch.int64)
