"""EAGLE drafting with the head's KV in a paged pool: the passes of eagle_proposer.py, run by a
ModelRunner of the head (eagle_model.py) that shares the target's request table.

The head's entry for position p (token p + 1 over the feature of p) lives in the slot the target's
table holds for p, in the head's own one-layer pool, as STANDALONE's draft model keeps its KV. A
request's head KV is valid for positions [0, kv_end): absorbing new target features writes
positions from kv_end on, drafts write the slots the verify pass allocated for the drafts (dropped
again after it: they came from draft features), and positions before a request's first feature (a
radix-cache prefix) read whatever the head wrote when that prefix was computed. Chain steps, short
absorbs and tree frontiers are decode batches, so the head's graphs replay them; long absorbs (a
prompt chunk) are extend passes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, List

import torch

from sglang.srt.configs.sections import SpecSection
from sglang.srt.core.forward_batch_info import build_decode_batch, build_extend_batch
from sglang.srt.core.req import Req
from sglang.srt.speculative.eagle_proposer import EagleProposer, keep_features
from sglang.srt.speculative.scratch_grid import ScratchGrid
from sglang.srt.speculative.tree_search import ROOT, TreeSearch

if TYPE_CHECKING:
    from sglang.srt.model_executor.model_runner import ModelRunner


def eagle_decode_rows(spec: SpecSection) -> int:
    """Decode rows per request the head's graphs hold: an absorb after a verify (the pending token
    and every accepted draft: the head's KV past the pending token came from draft features), and
    a tree frontier's topk."""
    if spec.topk > 1:
        return max(spec.topk, spec.num_steps + 1)
    return spec.num_draft_tokens


class PagedEagleProposer(EagleProposer):
    def __init__(
        self,
        spec: SpecSection,
        runner: "ModelRunner",
        target_runner: "ModelRunner",
        chunk: int,
    ):
        super().__init__(spec, runner.model.head, target_runner.vocab_size, target_runner.device)
        if runner.req_to_token_pool is not target_runner.req_to_token_pool:
            raise ValueError("the head's runner must be built on the target's request table")
        self.runner = runner
        self.pool = target_runner.req_to_token_pool
        self.chunk = chunk or 1 << 30
        self.decode_rows = eagle_decode_rows(spec)
        # Tree search's scratch slots: after every slot the target's allocator can hand out.
        self.scratch_base = target_runner.max_total_num_tokens + target_runner.page_size

    # ------------------------------------------------------------------ passes
    @torch.no_grad()
    def _absorb_rows(self, reqs: List[Req], ends: List[int], room: int = 0):
        """The head over each request's stored features of positions [kv_end, end) (as
        EagleProposer's); returns its output feature and logits at each request's last row, and
        no round cache (the pool is the cache)."""
        rows, starts, toks, feats = [], [], [], []
        for r, end in zip(reqs, ends):
            start, f = self._state(r).take(end)
            rows.append(r.req_pool_idx)
            starts.append(start)
            toks.append(r.all_ids()[start + 1 : end + 1])
            feats.append(f)
        if max(e - s for s, e in zip(starts, ends)) <= self.decode_rows:
            return (*self._absorb_as_decode(rows, starts, ends, toks, feats), None)
        return (*self._absorb_as_extend(rows, starts, ends, toks, feats), None)

    def _absorb_as_decode(self, rows, starts, ends, toks, feats):
        """A decode row per position (each layer stores every row's KV before any row attends, so
        row p sees the rows before it); the outputs at each request's last row."""
        d_rows, lens, last = [], [], []
        for row, s, e in zip(rows, starts, ends):
            d_rows.extend([row] * (e - s))
            lens.extend(range(s + 1, e + 1))
            last.append(len(lens) - 1)
        out = self._decode(d_rows, lens, torch.tensor(sum(toks, [])), torch.cat(feats))
        pick = torch.tensor(last, device=out.next_token_logits.device)
        return out.hidden_states[pick], out.next_token_logits[pick]

    def _absorb_as_extend(self, rows, starts, ends, toks, feats):
        """Extend passes of at most `chunk` tokens per request; the outputs of each one's last."""
        hidden: List[torch.Tensor] = [None] * len(rows)
        logits: List[torch.Tensor] = [None] * len(rows)
        done = [0] * len(rows)
        while True:
            todo = [i for i in range(len(rows)) if starts[i] + done[i] < ends[i]]
            if not todo:
                return torch.stack(hidden), torch.stack(logits)
            ids, pre, ext, locs, fs = [], [], [], [], []
            for i in todo:
                a = done[i]
                n = min(ends[i] - starts[i] - a, self.chunk)
                ids.extend(toks[i][a : a + n])
                fs.append(feats[i][a : a + n])
                pre.append(starts[i] + a)
                ext.append(n)
                locs.append(self.pool.read(rows[i], starts[i] + a, starts[i] + a + n))
                done[i] = a + n
            fb = build_extend_batch(
                ids, pre, ext, [rows[i] for i in todo], torch.cat(locs), self.device
            )
            fb.spec_features = torch.cat(fs)
            out = self.runner.forward(fb)
            for n, i in enumerate(todo):
                hidden[i], logits[i] = out.hidden_states[n], out.next_token_logits[n]

    def _decode(self, rows: List[int], lens: List[int], tokens: torch.Tensor, feats):
        """One head decode pass: row i reads tokens[i] over feats[i] at position lens[i] - 1 of
        table row rows[i], into the slot the table holds there. The outputs are copies (a
        replayed graph's buffers are rewritten by the next replay)."""
        locs = torch.tensor(
            [int(self.pool.req_to_token_cpu[row, n - 1]) for row, n in zip(rows, lens)],
            dtype=torch.int64,
        )
        fb = build_decode_batch(tokens, lens, rows, locs, self.device)
        fb.spec_features = feats
        out = self.runner.forward(fb)
        out.hidden_states = out.hidden_states.clone()
        out.next_token_logits = out.next_token_logits.float()
        return out

    # ------------------------------------------------------------------ drafting
    def _chain_drafter(self, sub: List[Req], cur: List[int], ks: List[int]):
        feat, logits, _ = self._absorb_rows(sub, cur)

        def advance(live, step, toks, kept):
            nonlocal feat
            if kept is not None:
                feat = feat[kept]
            # The step-th draft at position cur + step - 1, in the slot verify holds there.
            rows = [sub[j].req_pool_idx for j in live]
            out = self._decode(rows, [cur[j] + step for j in live], toks, feat)
            feat = out.hidden_states
            return out.next_token_logits

        return logits, advance

    def _tree_expander(
        self, reqs: List[Req], searches: List[TreeSearch], lasts: List[int], cur: List[int]
    ):
        # The head's entries sit one position before the draft model's (a node at depth d is at
        # cur + d - 1), so its scratch grid is a draft model's with the pending token one earlier.
        grid = ScratchGrid(self.pool, self.spec, self.scratch_base, reqs, [c - 1 for c in cur])
        absorbed = []

        def catch_up(rs: List[Req], before: List[int]) -> torch.Tensor:
            hidden, logits, _ = self._absorb_rows(rs, [c + 1 for c in before])
            absorbed.append(hidden)
            return logits

        logprobs = torch.log_softmax(grid.catch_up_logits(catch_up), dim=-1)
        out_feat = [{ROOT: absorbed[0][b]} for b in range(len(reqs))]

        def expand(live: List[int], depth: int) -> torch.Tensor:
            fb = grid.frontier_batch(live, [searches[b] for b in live], depth, self.device)
            fb.spec_features = torch.stack(
                [out_feat[b][searches[b].parents[n]] for b in live for n in searches[b].frontier]
            )
            out = self.runner.forward(fb)
            keep_features(out_feat, searches, live, out.hidden_states.clone())
            return torch.log_softmax(out.next_token_logits.float(), dim=-1)

        return logprobs, expand
