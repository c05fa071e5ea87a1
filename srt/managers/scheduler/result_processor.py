"""Processing a pass's results: append each request's token (and logprobs), finish it by the stop
rules, give a finished request's KV back (its prompt and output join the tree), then stream."""

from __future__ import annotations

import time

from sglang.srt.core.finish_reason import FinishAbort
from sglang.srt.core.req import Req, ReqStatus
from sglang.srt.managers.scheduler.loop_profiler import LoopProfiler
from sglang.srt.managers.scheduler.output_streamer import OutputStreamer
from sglang.srt.managers.scheduler.overlap import GenerationResult
from sglang.srt.managers.scheduler.scheduler_state import KVPools, LaunchedBatch, SchedulerState
from sglang.srt.managers.scheduler.scheduler_stats import SchedulerStats


class ResultProcessor:
    def __init__(
        self,
        state: SchedulerState,
        pools: KVPools,
        streamer: OutputStreamer,
        stats: SchedulerStats,
        tokenizer,
        overlap: bool,
        prof: LoopProfiler,
    ):
        self.state = state
        self.pools = pools
        self.streamer = streamer
        self.stats = stats
        self.tokenizer = tokenizer
        self.overlap = overlap
        self.prof = prof
        # Speculative decoding: TARGET_VERIFY passes are folded in by the spec decoder.
        self.verify_handler = None

    def process_batch_result(self, launched: LaunchedBatch) -> None:
        if launched.forward_mode.is_target_verify():
            with self.prof.phase("process"):
                self.verify_handler(launched, self)
            self.prof.count("decode_batches")
            self.prof.count("rows", len(launched.reqs))
            return
        if not self.overlap:
            # The next decode's inputs, without a host round trip.
            launched.batch.output_ids = launched.pending.device_ids
        with self.prof.phase("wait"):
            result = launched.pending.get()
        with self.prof.phase("process"):
            self._process_result(launched, result)
        self.prof.count(
            "prefill_batches" if launched.forward_mode.is_extend() else "decode_batches"
        )
        self.prof.count("rows", len(launched.reqs))

    def _process_result(self, launched: LaunchedBatch, result: GenerationResult) -> None:
        allocator = self.pools.allocator
        allocator.free_group_begin()
        try:
            if launched.forward_mode.is_decode():
                self._process_decode(launched, result)
            else:
                self._process_prefill(launched, result)
        finally:
            allocator.free_group_end()
        self.stats.record_forward(launched)
        self.streamer.stream_output(
            [r for r in launched.reqs if r.status is not ReqStatus.RETRACTED]
        )

    # ------------------------------------------------------------------ prefill / mixed
    def _process_prefill(self, launched, result) -> None:
        lp_off = 0
        for i, req in enumerate(launched.reqs):
            is_ext = i < launched.n_extend
            n_lp = launched.logprob_lens[i] if is_ext and launched.logprob_lens else 0
            if launched.samples[i]:
                req.inflight_tokens -= 1
            if req.finished() or req.status is ReqStatus.RETRACTED:
                lp_off += n_lp
                continue
            if is_ext and req.return_logprob:
                self._collect_input_logprobs(req, result, lp_off, n_lp)
            lp_off += n_lp
            if not launched.samples[i]:
                if req.aborting():  # aborted between chunks
                    req.check_finished()
                    self.release_finished(req)
                continue
            if is_ext and req.return_logprob:
                self._finalize_input_logprobs(req)
            if req.sampling_params.max_new_tokens == 0:
                req.check_finished()  # prefill only: length 0, nothing appended
            else:
                self._append_token(req, result, i)
            if req.finished():
                self.release_finished(req)

    def _collect_input_logprobs(self, req: Req, result: GenerationResult, off: int, n: int) -> None:
        if result.input_token_logprobs is None or n == 0:
            return
        req.temp_input_token_logprobs.extend(result.input_token_logprobs[off : off + n])
        if req.top_logprobs_num > 0 and result.input_top_logprobs_val is not None:
            k = req.top_logprobs_num
            for j in range(off, off + n):
                req.temp_input_top_logprobs.append(
                    list(
                        zip(
                            result.input_top_logprobs_val[j][:k],
                            result.input_top_logprobs_idx[j][:k],
                        )
                    )
                )

    def _finalize_input_logprobs(self, req: Req) -> None:
        """Prompt logprobs of tokens [start, len): the first is None (nothing precedes it here)."""
        start = req.logprob_start_len
        ids = req.origin_input_ids[start:]
        if not ids:
            req.input_token_logprobs, req.input_top_logprobs = [], []
            return
        vals = [None] + list(req.temp_input_token_logprobs)
        req.input_token_logprobs = [[v, t] for v, t in zip(vals, ids)]
        if req.top_logprobs_num > 0:
            req.input_top_logprobs = [None] + list(req.temp_input_top_logprobs)
        req.temp_input_token_logprobs, req.temp_input_top_logprobs = [], []

    # ------------------------------------------------------------------ decode
    def _process_decode(self, launched, result) -> None:
        for i, req in enumerate(launched.reqs):
            req.inflight_tokens -= 1
            if req.finished() or req.status is ReqStatus.RETRACTED:
                continue  # its extra token (overlap loop) is dropped; its KV was released already
            self._append_token(req, result, i)
            if req.finished():
                self.release_finished(req)

    def _append_token(self, req: Req, result, i: int) -> None:
        tok = result.next_token_ids[i]
        req.output_ids.append(tok)
        if req.first_token_time is None:
            req.first_token_time = time.monotonic()
        if req.return_logprob and result.next_token_logprobs is not None:
            req.output_token_logprobs.append([result.next_token_logprobs[i], tok])
            if req.top_logprobs_num > 0 and result.top_logprobs_val is not None:
                k = req.top_logprobs_num
                req.output_top_logprobs.append(
                    list(zip(result.top_logprobs_val[i][:k], result.top_logprobs_idx[i][:k]))
                )
        if req.grammar is not None:
            self.grammar_accept(req, tok)
        invalid = bool(result.invalid[i]) if result.invalid else False
        req.check_finished(self.tokenizer, invalid=invalid)

    def release_finished(self, req: Req) -> None:
        """A finished request gives its KV back (into the tree) and is forgotten."""
        self.pools.release(req)
        self.state.rid_to_req.pop(req.rid, None)
        if self.state.chunked_req is req:
            self.state.chunked_req = None

    @staticmethod
    def grammar_accept(req: Req, tok: int) -> None:
        if not req.grammar.accept_token(tok):
            # Only decoding can tell that a grammar leads nowhere (no token may follow this output):
            # the request ends with an abort that names the cause, as a bad request, not a server fault.
            req.request_abort(
                FinishAbort(
                    f"The grammar allows no continuation after {len(req.output_ids) - 1} output tokens "
                    f"(token {tok} was rejected).",
                    400,
                    "BadRequestError",
                )
            )
