"""Verification of draft trees (draft_tree.py): each node is judged by its parent's row.

A request's rows are its pending token (the root) and its draft nodes, breadth-first, so the
children of a node are consecutive rows. At a node whose distribution is p:
- greedy rows follow the child whose token is p's argmax (siblings are distinct: at most one);
- sampled rows try the children in order, each accepted with probability p'(c), where p' is p with
  the earlier (rejected) siblings' tokens removed and renormalised; when none is accepted the next
  token is drawn from p without any child's token. Drafts are point masses (chosen, not sampled,
  by the proposer), and this rule emits each token with probability exactly p(token).
The accepted path is followed from the root; its drafts plus the token drawn at its last node are
the step's output, as for a chain (verify.py, whose chain rule this equals on a chain).
"""

from __future__ import annotations

from typing import List

import torch

from sglang.srt.layers.sampler import bits_to_uniform, race_argmax_torch, row_hash
from sglang.srt.sampling.sampling_batch_info import SamplingBatchInfo
from sglang.srt.speculative.verify import (
    ACCEPT_SALT,
    PendingVerify,
    VerifyLayout,
    judged_logits,
    target_probs,
)
from sglang.srt.utils.device_copy import to_device, to_host_async


def _structure(layout: VerifyLayout) -> List[List[int]]:
    """Host lists per row: global parent row (a root is its own parent), first sibling row,
    sibling rank, depth, request index, and whether it is a root."""
    parent, first, rank, depth, req, root = [], [], [], [], [], []
    for r, (s, par) in enumerate(zip(layout.starts, layout.parents)):
        d = [0] * len(par)
        for j, p in enumerate(par):
            if p < 0:
                parent.append(s + j)
                first.append(s + j)
                rank.append(0)
            else:
                d[j] = d[p] + 1
                parent.append(s + p)
                # Children of one parent are consecutive rows: the first is where the run starts.
                sib = j > 0 and par[j - 1] == p
                first.append(first[-1] if sib else s + j)
                rank.append(rank[-1] + 1 if sib else 0)
            depth.append(d[j])
            req.append(r)
            root.append(int(p < 0))
    return [parent, first, rank, depth, req, root]


def launch_tree_verify(
    logits: torch.Tensor,
    verify_ids: torch.Tensor,
    layout: VerifyLayout,
    info: SamplingBatchInfo,
    top_logprobs_num: int = 0,
    return_logprob: bool = False,
) -> PendingVerify:
    """logits [R, V] at every row, verify_ids [R] the rows' tokens, info per row (steps = the
    output position each row predicts). Device work only: no host sync."""
    R, dev = logits.shape[0], logits.device
    B = len(layout.starts)
    logits, raw_lp, greedy_pick, dead = judged_logits(logits, info, return_logprob)

    host = torch.tensor(_structure(layout), dtype=torch.int64)
    parent, first, rank, depth, row_req, root = to_device(host, dev).unbind(0)
    root = root.bool()
    ids = verify_ids.to(torch.int64)
    greedy_ok = greedy_pick[parent] == ids

    if info.is_all_greedy:
        ok = ~root & greedy_ok
        emit = greedy_pick
    else:
        probs = target_probs(logits, info)
        p_c = torch.where(root, torch.zeros((), device=dev), probs[parent, ids])
        ex = torch.cumsum(p_c, dim=0) - p_c  # exclusive: the mass of the rows before
        before = (ex - ex[first]).clamp(0.0, 1.0)  # earlier siblings' mass
        u = bits_to_uniform(row_hash(info.seeds[parent] ^ (ACCEPT_SALT + rank), info.steps[parent]))
        sampled_ok = u * (1.0 - before).clamp_min(0.0) < p_c
        ok = ~root & torch.where(info.greedy[parent], greedy_ok, sampled_ok)
        # At the path's last node: p without any child's token (a leaf keeps p).
        residual = probs.clone()
        residual.index_put_((parent, ids), torch.where(root, 0.0, -p_c), accumulate=True)
        residual = residual.clamp_min(0.0)
        mass = residual.sum(dim=-1, keepdim=True)
        residual = torch.where(mass > 0, residual / mass.clamp_min(1e-30), probs)
        from_residual = race_argmax_torch(residual, row_hash(info.seeds, info.steps))
        emit = torch.where(info.greedy, greedy_pick, from_residual)

    if layout.forced is not None:  # simulated acceptance: the first child down to that depth
        forced = to_device(torch.tensor(layout.forced, dtype=torch.int64), dev)
        ok = ~root & (rank == 0) & (depth <= forced[row_req])
    # The first accepted child of each node is the one followed.
    okc = ok.to(torch.int64)
    ok_ex = torch.cumsum(okc, dim=0) - okc
    chosen = ok & (ok_ex - ok_ex[first] == 0)
    on_path = root.clone()
    for _ in range(int(host[3].max()) if R else 0):  # the deepest row's depth
        on_path = root | (chosen & on_path[parent])
    # Rows of a request are breadth-first: the last row on its path is the deepest.
    rows = torch.arange(R, device=dev)
    final_row = torch.full((B,), -1, dtype=torch.int64, device=dev)
    final_row.scatter_reduce_(0, row_req, torch.where(on_path, rows, -1), reduce="amax")
    accept_lens = depth[final_row]
    last_tok = emit[final_row]
    pending = PendingVerify(
        layout, to_host_async(verify_ids), to_host_async(accept_lens), to_host_async(last_tok)
    )
    pending.dead = to_host_async(dead)
    pending.on_path = to_host_async(on_path)
    if return_logprob:
        # A row on the path emits its followed child's token, the last one the drawn token.
        nxt = torch.zeros(R, dtype=torch.int64, device=dev)
        nxt.index_put_((parent,), torch.where(on_path & ~root, ids, 0), accumulate=True)
        emitted = torch.where(rows == final_row[row_req], last_tok[row_req], nxt)
        pending.queue_logprobs(raw_lp, emitted, top_logprobs_num)
    pending.mark_copies_queued(dev)
    return pending
