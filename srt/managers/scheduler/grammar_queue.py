"""Requests waiting for their grammar to compile, and the vocabulary masks of constrained rows.

A request leaves the queue only once every TP rank has settled it, so all ranks admit it in the
same step."""

from __future__ import annotations

from typing import Callable, List, Optional, Tuple

from sglang.srt.constrained.grammar_manager import GrammarManager
from sglang.srt.core.req import Req
from sglang.srt.distributed.parallel_state import tp_all_gather_object
from sglang.srt.managers.scheduler.schedule_batch import ScheduleBatch
from sglang.srt.sampling.sampling_batch_info import SamplingBatchInfo


class GrammarQueue:
    def __init__(self, manager: Optional[GrammarManager], vocab_size: int, device: str):
        """manager None: constrained decoding is off (--grammar-backend none, or no tokenizer)."""
        self.manager = manager
        self.vocab_size = vocab_size
        self.device = device

    @property
    def enabled(self) -> bool:
        return self.manager is not None

    def num_waiting(self) -> int:
        return self.manager.num_waiting() if self.manager is not None else 0

    def submit(self, req: Req) -> None:
        self.manager.submit(req)

    def poll(self) -> Tuple[List[Req], List[Tuple[Req, str]]]:
        """(compiled, failed with their messages) agreed by every rank."""
        if not self.num_waiting():
            return [], []
        agreed = set.intersection(*tp_all_gather_object(self.manager.ready_rids()))
        return self.manager.pop_ready(agreed)

    def abort_matching(self, reqs: List[Req], match: Callable[[Req], bool]) -> None:
        if self.manager is None:
            return
        for req in reqs:
            if match(req) and req.grammar is None and req.sampling_params.has_grammar():
                self.manager.abort(req.rid)

    def attach_masks(self, batch: ScheduleBatch, info: SamplingBatchInfo) -> None:
        """Fill the vocabulary bitmask of constrained rows (unconstrained rows stay all-allowed)."""
        grammars = [(i, r.grammar) for i, r in enumerate(batch.reqs) if r.grammar is not None]
        if not grammars:
            return
        first = grammars[0][1]
        mask = first.allocate_vocab_mask(self.vocab_size, batch.batch_size(), self.device)
        for i, g in grammars:
            if not batch.reqs[i].finished():
                g.fill_vocab_mask(mask, i)
        info.vocab_mask = first.move_vocab_mask(mask, self.device)
        info.apply_vocab_mask = type(first).apply_vocab_mask

    def attach_verify_masks(
        self,
        reqs: List[Req],
        starts: List[int],
        verify_ids: List[int],
        num_drafts: List[int],
        info: SamplingBatchInfo,
    ) -> None:
        """Speculative verify rows: row starts[i] + j of a constrained request gets the grammar's
        mask after its first j drafts (the matcher advances through them, then rolls back). A
        draft the grammar forbids has probability 0 at the row that judges it, so it is rejected;
        the rows after it are never reached and stay all-allowed."""
        grammars = [(i, r.grammar) for i, r in enumerate(reqs) if r.grammar is not None]
        if not grammars:
            return
        first = grammars[0][1]
        rows = sum(1 + k for k in num_drafts)
        mask = first.allocate_vocab_mask(self.vocab_size, rows, self.device)
        for i, g in grammars:
            if reqs[i].finished():
                continue
            s = starts[i]
            g.fill_vocab_mask(mask, s)
            advanced = 0
            for j in range(1, num_drafts[i] + 1):
                if g.is_terminated() or not g.accept_token(verify_ids[s + j]):
                    break
                advanced += 1
                g.fill_vocab_mask(mask, s + j)
            g.rollback(advanced)
        info.vocab_mask = first.move_vocab_mask(mask, self.device)
        info.apply_vocab_mask = type(first).apply_vocab_mask
