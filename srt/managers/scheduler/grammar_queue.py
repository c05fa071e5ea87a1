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
        self.attach_row_masks(batch.reqs, info)

    def attach_row_masks(self, row_reqs: List[Optional[Req]], info: SamplingBatchInfo) -> None:
        """The same for a batch with any number of rows per request: row i samples for
        row_reqs[i] (None: a row no grammar constrains, such as a verify row of a draft)."""
        grammars = [
            (i, r.grammar)
            for i, r in enumerate(row_reqs)
            if r is not None and r.grammar is not None
        ]
        if not grammars:
            return
        first = grammars[0][1]
        mask = first.allocate_vocab_mask(self.vocab_size, len(row_reqs), self.device)
        for i, g in grammars:
            if not row_reqs[i].finished():
                g.fill_vocab_mask(mask, i)
        info.vocab_mask = first.move_vocab_mask(mask, self.device)
        info.apply_vocab_mask = type(first).apply_vocab_mask
