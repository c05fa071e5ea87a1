"""Processing a pass's results (append tokens, finish, cache) and streaming them to the detokenizer."""

from __future__ import annotations

import time
from typing import List, Optional

from sglang.srt.managers.io_struct import BatchTokenIDOutput
from sglang.srt.managers.req import Req
from sglang.srt.utils.ipc import send_obj

# A non-streaming request is still flushed this often so the detokenizer's window stays small.
FORCE_STREAM_INTERVAL = 50
# Prompt tokens before the output that seed the incremental detokenizer's window.
INIT_DETOKENIZE_OFFSET = 5


class SchedulerOutputMixin:
    def process_batch_result(self, batch, launched, pending) -> None:
        if not self.overlap:
            batch.output_ids = pending.device_ids  # the next decode's inputs, without a host round trip
        with self.loop_prof.phase("wait"):
            result = pending.get()
        with self.loop_prof.phase("process"):
            self._process_result(batch, launched, result)
        self.loop_prof.count("prefill_batches" if launched.forward_mode.is_extend() else "decode_batches")
        self.loop_prof.count("rows", len(launched.reqs))

    def _process_result(self, batch, launched, result) -> None:
        self.allocator.free_group_begin()
        try:
            if launched.forward_mode.is_decode():
                self._process_decode(launched, result)
            else:
                self._process_prefill(launched, result)
        finally:
            self.allocator.free_group_end()
        self.record_forward(launched, result)
        self.stream_output([r for r in launched.reqs if not r.is_retracted])

    # ------------------------------------------------------------------ prefill / mixed
    def _process_prefill(self, launched, result) -> None:
        lp_off = 0
        for i, req in enumerate(launched.reqs):
            is_ext = i < launched.n_extend
            n_lp = launched.logprob_lens[i] if is_ext and launched.logprob_lens else 0
            if launched.samples[i]:
                req.inflight_tokens -= 1
            if req.finished() or req.is_retracted:
                lp_off += n_lp
                continue
            if is_ext and req.return_logprob:
                self._collect_input_logprobs(req, result, lp_off, n_lp)
            lp_off += n_lp
            if not launched.samples[i]:
                if req.to_finish is not None:  # aborted between chunks
                    req.check_finished()
                    self._on_finished(req)
                continue
            if is_ext and req.return_logprob:
                self._finalize_input_logprobs(req)
            if req.sampling_params.max_new_tokens == 0:
                req.check_finished()  # prefill only: length 0, nothing appended
            else:
                self._append_token(req, result, i)
            if req.finished():
                self._on_finished(req)

    def _collect_input_logprobs(self, req: Req, result, off: int, n: int) -> None:
        if result.input_token_logprobs is None or n == 0:
            return
        req.temp_input_token_logprobs.extend(result.input_token_logprobs[off : off + n])
        if req.top_logprobs_num > 0 and result.input_top_logprobs_val is not None:
            k = req.top_logprobs_num
            for j in range(off, off + n):
                req.temp_input_top_logprobs.append(
                    list(zip(result.input_top_logprobs_val[j][:k], result.input_top_logprobs_idx[j][:k]))
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
            if req.finished() or req.is_retracted:
                continue  # its extra token (overlap loop) is dropped; its KV was released already
            self._append_token(req, result, i)
            if req.finished():
                self._on_finished(req)

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

    def _on_finished(self, req: Req) -> None:
        self.release_req(req)
        if self.chunked_req is req:
            self.chunked_req = None

    def grammar_accept(self, req: Req, tok: int) -> None:
        if not req.grammar.accept_token(tok):
            from sglang.srt.managers.req import FinishAbort

            # Only decoding can tell that a grammar leads nowhere (no token may follow this output):
            # the request ends with an abort that names the cause, as a bad request, not a server fault.
            req.to_finish = FinishAbort(
                f"The grammar allows no continuation after {len(req.output_ids) - 1} output tokens "
                f"(token {tok} was rejected).",
                400,
                "BadRequestError",
            )

    # ------------------------------------------------------------------ streaming
    def stream_output(self, reqs: List[Req]) -> None:
        if self.send_to_detokenizer is None:
            return
        out: Optional[BatchTokenIDOutput] = None
        for req in reqs:
            if not self._should_output(req):
                continue
            if out is None:
                out = _empty_batch_output()
            self._add_output(out, req)
        if out is not None:
            send_obj(self.send_to_detokenizer, out, self.server_args.ipc_serializer)

    def _should_output(self, req: Req) -> bool:
        if req.finished():
            if req.finished_output:
                return False
            req.finished_output = True
            return True
        n = len(req.output_ids)
        if n == req.send_token_offset:
            return False
        if req.stream:
            interval = req.sampling_params.stream_interval or self.server_args.stream_interval
            ok = n % interval == 1 if interval > 1 else True
            return ok and not req.check_match_stop_str_prefix(self.tokenizer)
        return n % FORCE_STREAM_INTERVAL == 0

    def _add_output(self, out: BatchTokenIDOutput, req: Req) -> None:
        new_ids = req.output_ids[req.send_token_offset :]
        if req.read_offset is None:
            # First message: the detokenizer's window starts a few prompt tokens back.
            prompt = req.origin_input_ids
            req.surr_offset = max(len(prompt) - INIT_DETOKENIZE_OFFSET, 0)
            req.read_offset = len(prompt)
            decode_ids = prompt[req.surr_offset :] + new_ids
            read_offset = req.read_offset - req.surr_offset
        else:
            decode_ids = new_ids
            read_offset = -1
        req.send_token_offset = len(req.output_ids)
        sp = req.sampling_params
        reason = req.finished_reason.to_json() if req.finished_reason is not None else None
        out.rids.append(req.rid)
        out.finished_reasons.append(reason)
        out.decode_ids.append(decode_ids)
        out.read_offsets.append(read_offset)
        out.output_ids.append(new_ids)
        out.skip_special_tokens.append(sp.skip_special_tokens)
        out.spaces_between_special_tokens.append(sp.spaces_between_special_tokens)
        out.no_stop_trim.append(sp.no_stop_trim)
        out.prompt_tokens.append(len(req.origin_input_ids))
        out.completion_tokens.append(len(req.output_ids))
        out.cached_tokens.append(req.cached_tokens)
        out.retraction_counts.append(req.retraction_count)
        self._add_logprobs(out, req)
        qt = (req.queue_time_start - req.wait_queue_entry_time) if req.queue_time_start else None
        out.queue_times.append(qt)
        out.first_token_times.append((req.first_token_time - req.arrival_time) if req.first_token_time else None)

    def _add_logprobs(self, out: BatchTokenIDOutput, req: Req) -> None:
        if not req.return_logprob:
            for lst in (
                out.input_token_logprobs,
                out.input_top_logprobs,
                out.output_token_logprobs,
                out.output_top_logprobs,
            ):
                lst.append(None)
            return
        if not req.input_logprobs_sent and req.input_token_logprobs is not None:
            out.input_token_logprobs.append(req.input_token_logprobs)
            out.input_top_logprobs.append(req.input_top_logprobs if req.top_logprobs_num else None)
            req.input_logprobs_sent = True
        else:
            out.input_token_logprobs.append([] if req.input_logprobs_sent else None)
            out.input_top_logprobs.append(None)
        s = req.send_output_logprobs_offset
        out.output_token_logprobs.append(req.output_token_logprobs[s:])
        out.output_top_logprobs.append(req.output_top_logprobs[s:] if req.top_logprobs_num else None)
        req.send_output_logprobs_offset = len(req.output_token_logprobs)


def _empty_batch_output() -> BatchTokenIDOutput:
    return BatchTokenIDOutput(
        rids=[],
        finished_reasons=[],
        decode_ids=[],
        read_offsets=[],
        output_ids=[],
        skip_special_tokens=[],
        spaces_between_special_tokens=[],
        no_stop_trim=[],
        prompt_tokens=[],
        completion_tokens=[],
        cached_tokens=[],
        retraction_counts=[],
    )
