"""The decode step under speculative decoding: draft, verify in one target pass, accept.

Per step each running request gets up to num_draft_tokens - 1 drafts (fewer near its length or
context limit; none while its penalties or min_new_tokens depend on the exact history; a grammar's
mask is computed for each verify row after the drafts before it). Its pending token and drafts get
slots at positions cur..cur+k and run as one TARGET_VERIFY pass; the verifier keeps the accepted
drafts plus one token, the slots after the kept ones go back, and the tokens are appended one at a
time through the usual finish rules (a stop string or EOS inside the accepted run ends the request
there). When the pool cannot hold every request's verify slots, the step runs without drafts;
when it cannot hold even that, requests are retracted as in plain decode. NGRAM, and a draft
model with topk > 1 (tree_search.py), may propose a draft tree instead of a chain (draft_tree.py):
its nodes get slots at positions cur..cur+k in breadth-first order, each node runs as a decode row
that sees the prefix and its own ancestors (ScheduleBatch), the verdict follows the tree
(tree_verify.py), and the accepted branch's KV is copied to the positions it now holds.

Under the overlap loop drafting needs the last pass's tokens on the host, so the scheduler processes
every pass in flight before it plans a verify pass; what still overlaps the pass on the device is
the host work that does not need its verdict: intake, the next prefill (launched while the verify
pass runs), and the sending of the previous verdict's tokens.
"""

from __future__ import annotations

import logging
import time
from typing import Callable, List, Optional

import torch

from sglang.srt.configs.sections import SpecSection
from sglang.srt.core.req import Req, ReqStatus
from sglang.srt.managers.scheduler.grammar_queue import GrammarQueue
from sglang.srt.managers.scheduler.overlap import PendingResult
from sglang.srt.managers.scheduler.result_processor import ResultProcessor
from sglang.srt.managers.scheduler.retraction import DecodeUpdater
from sglang.srt.managers.scheduler.schedule_batch import ScheduleBatch
from sglang.srt.managers.scheduler.scheduler_state import KVPools, LaunchedBatch, SchedulerState
from sglang.srt.mem_cache.common import evict_for
from sglang.srt.sampling.sampling_batch_info import SamplingBatchInfo
from sglang.srt.speculative.draft_tree import DraftTree
from sglang.srt.speculative.simulated_acceptance import SimulatedAcceptance
from sglang.srt.speculative.tree_verify import launch_tree_verify
from sglang.srt.speculative.verify import (
    PendingVerify,
    VerifyLayout,
    VerifyOutput,
    launch_verify,
)
from sglang.srt.utils.device_copy import to_device

logger = logging.getLogger(__name__)


class SpecDecoder:
    def __init__(
        self,
        state: SchedulerState,
        pools: KVPools,
        decode: DecodeUpdater,
        spec: SpecSection,
        proposer,
        model_runner,
        grammar: GrammarQueue,
        context_len: int,
    ):
        self.state = state
        self.pools = pools
        self.decode = decode
        self.spec = spec
        self.proposer = proposer
        self.runner = model_runner
        self.grammar = grammar
        self.context_len = context_len
        self.vocab = model_runner.vocab_size
        self.device = model_runner.device
        self._unsent: List[Req] = []  # processed, not yet streamed
        self.num_tree_passes = 0  # verify passes with a draft tree (the rest verify chains)
        self._moves_src: List[int] = []  # this pass's KV moves of accepted tree nodes
        self._moves_dst: List[int] = []
        # SGLANG_SIMULATE_ACC_LEN: verdicts of a set acceptance instead of the target's.
        self.simulated = SimulatedAcceptance.from_env()
        if self.simulated is not None:
            logger.warning(
                "SGLANG_SIMULATE_ACC_LEN=%s (%s): drafts are accepted at that rate whatever the "
                "target says; outputs are NOT the model's (a benchmark setting)",
                self.simulated.accept_len,
                self.simulated.method,
            )
        # Per decoder: a benchmark may wrap its verdicts.
        self.launch_verify = launch_verify
        self.launch_tree_verify = launch_tree_verify

    # ------------------------------------------------------------------ building
    def update_running_batch(self) -> Optional[ScheduleBatch]:
        batch = self.decode.live_batch()
        if batch is None:
            return None
        budgets = [self._draft_budget(r) for r in batch.reqs]
        ks = self.proposer.plan(batch.reqs, budgets)
        if evict_for(self.pools.tree_cache, self.pools.allocator, batch.verify_slots_needed(ks)):
            self.decode.ratio.decay()
        else:
            # No room for the drafts: verify the pending tokens alone (a plain decode step), and
            # retract if even that does not fit.
            if not batch.check_decode_mem():
                self.decode._retract(batch)
                if batch.is_empty():
                    return None
            ks = [0] * len(batch.reqs)
        batch.prepare_for_verify(ks)
        batch.verify_input_ids, batch.draft_probs = self.proposer.draft(
            batch.reqs, ks, batch.prefix_lens
        )
        batch.spec_parents = _tree_parents(batch.reqs, ks)
        self.num_tree_passes += batch.spec_parents is not None
        return batch

    def _draft_budget(self, r: Req) -> int:
        sp = r.sampling_params
        if (
            sp.frequency_penalty
            or sp.presence_penalty
            or sp.repetition_penalty != 1.0
            or len(r.output_ids) < sp.min_new_tokens
        ):
            return 0  # the sampling rule depends on every accepted token: one at a time
        k = self.spec.max_drafts
        if sp.max_new_tokens is not None:
            k = min(k, sp.max_new_tokens - len(r.output_ids) - 1)
        k = min(k, self.context_len - 1 - r.kv_allocated_len - 1)
        return max(k, 0)

    # ------------------------------------------------------------------ launching
    def launch(self, batch: ScheduleBatch, submit: Optional[Callable] = None) -> LaunchedBatch:
        """Queue the verify pass and its verdict; nothing waits for the device here, so under the
        overlap loop the host goes on (intake, the next prefill) while the pass runs. submit: the
        CPU overlap loop's forward worker (None: queue on the device stream now)."""
        fb = batch.to_forward_batch()
        layout = VerifyLayout.of(batch.spec_num_drafts, batch.spec_parents)
        if self.simulated is not None:
            layout.forced = self.simulated.counts(batch.spec_num_drafts)
        row_reqs = [r for r, k in zip(batch.reqs, batch.spec_num_drafts) for _ in range(1 + k)]
        capture = self.proposer.capture
        fb.capture_hidden = capture
        top = max((r.top_logprobs_num for r in batch.reqs if r.return_logprob), default=0)

        def forward() -> torch.Tensor:
            with torch.no_grad():
                fwd = self.runner.forward(fb)
                if capture is not None:  # EAGLE: the target's features of the verified positions
                    self.proposer.on_verify_pass(batch.reqs, layout, fwd.hidden_states)
                return fwd.next_token_logits

        def check(logits: torch.Tensor) -> PendingVerify:
            with torch.no_grad():
                if layout.parents is not None:
                    return self.launch_tree_verify(
                        logits, fb.input_ids, layout, info, top, batch.return_logprob
                    )
                return self.launch_verify(
                    logits,
                    fb.input_ids,
                    layout,
                    info,
                    batch.draft_probs,
                    top_logprobs_num=top,
                    return_logprob=batch.return_logprob,
                )

        if submit is None:
            logits = forward()
            # The rows' sampling info (grammar masks included) is host work: built while the
            # forward runs.
            info = self._row_info(batch, layout, row_reqs)
            pending = PendingResult(check(logits).result)
        else:
            logits_f = submit(forward)
            info = self._row_info(batch, layout, row_reqs)
            verdict_f = submit(lambda: check(logits_f.result()).result())
            pending = PendingResult(verdict_f.result)
        return LaunchedBatch(
            batch=batch,
            pending=pending,
            reqs=list(batch.reqs),
            samples=[True] * batch.batch_size(),
            forward_mode=batch.forward_mode,
            n_extend=0,
            logprob_lens=[],
            launch_time=time.perf_counter(),
        )

    def _row_info(self, batch: ScheduleBatch, layout: VerifyLayout, row_reqs: List[Req]):
        info = SamplingBatchInfo.from_reqs(row_reqs, self.vocab, self.device)
        # The plain sampler keys its noise by the 1-based index of the token it draws (output
        # length + the token in flight); a row at depth j draws token len(output) + j + 1.
        steps = [
            len(r.output_ids) + 1 + j
            for r, depths in zip(batch.reqs, layout.depths())
            for j in depths
        ]
        info.steps = to_device(torch.tensor(steps, dtype=torch.int64), self.device)
        self.grammar.attach_verify_masks(
            batch.reqs, layout.starts, batch.verify_input_ids, layout.num_drafts, info
        )
        return info

    def _path_moves(self, req: Req, cur: int, path: List[int]) -> None:
        """A tree's accepted node at depth d holds its KV at table position cur + (its row); the
        sequence needs it at cur + d. Queue that copy (rows never precede their depth)."""
        moves = [(row, d) for d, row in enumerate(path, start=1) if row != d]
        if not moves:
            return
        slots = self.pools.req_to_token_pool.read(
            req.req_pool_idx, cur, cur + 1 + max(row for row, _ in moves)
        ).tolist()
        self._moves_src.extend(slots[row] for row, _ in moves)
        self._moves_dst.extend(slots[d] for _, d in moves)

    def _flush_moves(self) -> None:
        """One copy for the whole pass, before any later pass reads those slots (all sources are
        read before any destination is written, so moves may chain)."""
        if self._moves_src:
            src = torch.tensor(self._moves_src, dtype=torch.int64)
            dst = torch.tensor(self._moves_dst, dtype=torch.int64)
            self._moves_src, self._moves_dst = [], []
            self.runner.token_to_kv_pool.move_kv(dst, src)

    # ------------------------------------------------------------------ results
    def process(self, launched: LaunchedBatch, results: ResultProcessor) -> None:
        batch: ScheduleBatch = launched.batch
        out: VerifyOutput = launched.pending.get()
        allocator = self.pools.allocator
        allocator.free_group_begin()
        emitted = 0
        try:
            for i, req in enumerate(launched.reqs):
                emitted += self._apply(batch, i, req, out, results)
            self._flush_moves()
        finally:
            allocator.free_group_end()
        launched.num_tokens = emitted
        results.stats.record_verify(launched, out)
        # Sent by flush_outputs at the end of the step: under the overlap loop that is after the
        # next verify pass is queued, so the sending overlaps it.
        self._unsent.extend(r for r in launched.reqs if r.status is not ReqStatus.RETRACTED)

    def flush_outputs(self, results: ResultProcessor) -> None:
        if self._unsent:
            reqs, self._unsent = self._unsent, []
            results.streamer.stream_output(reqs)

    def _apply(
        self, batch: ScheduleBatch, i: int, req: Req, out: VerifyOutput, results: ResultProcessor
    ) -> int:
        if req.finished() or req.status is ReqStatus.RETRACTED:
            return 0
        cur, k, accepted = batch.prefix_lens[i], batch.spec_num_drafts[i], out.accept_lens[i]
        n = 0
        for j, tok in enumerate(out.tokens[i]):
            req.output_ids.append(tok)
            n += 1
            if req.first_token_time is None:
                req.first_token_time = time.monotonic()
            if req.return_logprob and out.logprobs is not None:
                req.output_token_logprobs.append([out.logprobs[i][j], tok])
                if req.top_logprobs_num > 0:
                    t = req.top_logprobs_num
                    req.output_top_logprobs.append(
                        list(zip(out.top_logprobs_val[i][j][:t], out.top_logprobs_idx[i][j][:t]))
                    )
            if req.grammar is not None:
                results.grammar_accept(req, tok)
            req.check_finished(
                results.tokenizer, invalid=out.invalid[i] and j == len(out.tokens[i]) - 1
            )
            if req.finished():
                break
        req.spec_verify_ct += 1
        req.spec_drafted += k
        req.spec_accepted += accepted
        if len(req.spec_accept_hist) <= self.spec.max_drafts:
            req.spec_accept_hist.extend(
                [0] * (self.spec.max_drafts + 1 - len(req.spec_accept_hist))
            )
        req.spec_accept_hist[accepted] += 1
        path = out.paths[i] if out.paths is not None else None
        self.proposer.on_verified(req, accepted, k, cur, path)
        if path is not None:
            self._path_moves(req, cur, path)
        # KV is valid for the pending token and the accepted drafts; never past the sequence.
        keep = min(cur + 1 + accepted, req.seqlen())
        if req.finished():
            req.kv_committed_len = keep  # release frees the rest
            results.release_finished(req)
        else:
            batch.trim_verify_allocation(req, keep)
        return n


def _tree_parents(reqs: List[Req], num_drafts: List[int]) -> Optional[List[List[int]]]:
    """Per request the parent row of each verify row, when some request's drafts are a tree."""
    if all(r.spec_tree is None for r in reqs):
        return None
    out = []
    for r, k in zip(reqs, num_drafts):
        tree = r.spec_tree if r.spec_tree is not None else DraftTree.chain(r.spec_drafts)
        assert tree.num_nodes >= k
        out.append(tree.row_parents()[: 1 + k])  # a breadth-first prefix is still a tree
    if all(p == j - 1 for par in out for j, p in enumerate(par)):
        return None  # the trees were cut back to chains (no room for drafts)
    return out
