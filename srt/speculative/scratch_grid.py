"""Where a batch's tree searches run: scratch rows of the request table and scratch KV slots of
the drafter's pool, so frontier nodes decode as ordinary rows (and replay the drafter's graphs)
without touching the requests' own rows or slots."""

from __future__ import annotations

from typing import List

import torch

from sglang.srt.configs.sections import SpecSection
from sglang.srt.core.forward_batch_info import build_decode_batch
from sglang.srt.core.req import Req
from sglang.srt.speculative.tree_search import TreeSearch
from sglang.srt.utils.device_copy import to_device


class ScratchGrid:
    """Where one batch's tree searches run: request b's frontier node j reads the request table
    through scratch row (pool.scratch_base + b * topk + j), and a node run at depth d keeps its
    draft KV in slot slot_base + (b * (steps - 1) + d - 1) * topk + j until the search ends."""

    def __init__(self, pool, spec: SpecSection, slot_base: int, reqs: List[Req], cur: List[int]):
        self.pool, self.topk, self.steps = pool, spec.topk, spec.num_steps
        self.slot_base, self.reqs, self.cur = slot_base, reqs, cur
        self.node_slot: dict = {}  # (b, search node) -> its scratch slot
        assert len(reqs) * self.topk <= pool.num_scratch, "tree search rows exceed the scratch rows"

    def catch_up_logits(self, catch_up) -> torch.Tensor:
        """The draft's logits at each pending token; then every scratch row gets the prefix."""
        logits = catch_up(self.reqs, self.cur).float()
        dst = [self._row(b, j) for b in range(len(self.reqs)) for j in range(self.topk)]
        src = [r.req_pool_idx for r in self.reqs for _ in range(self.topk)]
        dev = self.pool.req_to_token.device
        idx = to_device(torch.tensor([dst, src], dtype=torch.int64), dev)
        self.pool.copy_prefixes(idx[0], idx[1], max(self.cur) + 1)
        return logits

    def _row(self, b: int, j: int) -> int:
        return self.pool.scratch_base + b * self.topk + j

    def frontier_batch(self, live: List[int], searches: List[TreeSearch], depth: int, device):
        """A decode batch of the frontier nodes (all at `depth`) of the live requests."""
        ids, seq_lens, rows, locs = [], [], [], []
        w_rows, w_pos, w_slots = [], [], []
        for b, search in zip(live, searches):
            c = self.cur[b]
            for j, node in enumerate(search.frontier):
                slot = self.slot_base + (b * (self.steps - 1) + depth - 1) * self.topk + j
                self.node_slot[(b, node)] = slot
                row = self._row(b, j)
                for d, a in enumerate(search.path(node), start=1):
                    w_rows.append(row)
                    w_pos.append(c + d)
                    w_slots.append(self.node_slot[(b, a)])
                ids.append(search.tokens[node])
                seq_lens.append(c + depth + 1)
                rows.append(row)
                locs.append(slot)
        dev = self.pool.req_to_token.device
        w = to_device(torch.tensor([w_rows, w_pos, w_slots], dtype=torch.int64), dev)
        self.pool.write_device(w[0], w[1], w[2])
        return build_decode_batch(
            torch.tensor(ids, dtype=torch.int64),
            seq_lens,
            rows,
            torch.tensor(locs, dtype=torch.int64),
            device,
        )
