"""Streaming a batch's new tokens to the detokenizer (or, without a tokenizer, to the HTTP process).

A streaming request is sent every stream_interval tokens unless its tail may be the start of a stop
string (held until that is settled); a non-streaming one only when it finishes, and every
FORCE_STREAM_INTERVAL tokens so the detokenizer's window stays small."""

from __future__ import annotations

from typing import List, Optional

import zmq

from sglang.srt.core.io_struct.batch_output import CachedTokensDetails, SpecStats
from sglang.srt.core.io_struct.ipc import send_obj
from sglang.srt.core.io_struct.to_detokenizer import BatchTokenIDOutput
from sglang.srt.core.req import Req, ReqStatus

FORCE_STREAM_INTERVAL = 50
# Prompt tokens before the output that seed the incremental detokenizer's window.
INIT_DETOKENIZE_OFFSET = 5


class OutputStreamer:
    def __init__(
        self, sock: Optional[zmq.Socket], serializer: str, tokenizer, stream_interval: int
    ):
        """sock None: nothing is sent (a scheduler driven in-process, as the tests do)."""
        self.sock = sock
        self.serializer = serializer
        self.tokenizer = tokenizer
        self.stream_interval = stream_interval
        self.report_cache_tiers = False  # HiCache: send cached_tokens_details
        self.report_spec = False  # speculative decoding: send verify counts

    def stream_output(self, reqs: List[Req]) -> None:
        if self.sock is None:
            return
        out: Optional[BatchTokenIDOutput] = None
        for req in reqs:
            if not self._should_output(req):
                continue
            if out is None:
                out = _empty_batch_output()
            self._add_output(out, req)
        if out is not None:
            send_obj(self.sock, out, self.serializer)

    def _should_output(self, req: Req) -> bool:
        if req.status is ReqStatus.OUTPUT_SENT:
            return False
        if req.finished():
            req.status = ReqStatus.OUTPUT_SENT
            return True
        n = len(req.output_ids)
        if n == req.send_token_offset:
            return False
        if req.stream:
            interval = req.sampling_params.stream_interval or self.stream_interval
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
        out.rids.append(req.rid)
        out.finished_reasons.append(req.finished_reason if req.finished() else None)
        out.decode_ids.append(decode_ids)
        out.read_offsets.append(read_offset)
        out.output_ids.append(new_ids)
        out.skip_special_tokens.append(sp.skip_special_tokens)
        out.spaces_between_special_tokens.append(sp.spaces_between_special_tokens)
        out.no_stop_trim.append(sp.no_stop_trim)
        out.prompt_tokens.append(len(req.origin_input_ids))
        out.completion_tokens.append(len(req.output_ids))
        out.cached_tokens.append(req.cached_tokens)
        out.cached_tokens_details.append(
            CachedTokensDetails.of(
                req.cached_tokens, req.cached_host_tokens, req.cached_storage_tokens
            )
            if self.report_cache_tiers
            else None
        )
        out.spec_stats.append(
            SpecStats(req.spec_verify_ct, req.spec_drafted, req.spec_accepted, req.spec_accept_hist)
            if self.report_spec
            else None
        )
        out.retraction_counts.append(req.retraction_count)
        send_break = req.prompt_break is not None and not req.prompt_break_sent
        out.prompt_breaks.append(req.prompt_break if send_break else None)
        req.prompt_break_sent = req.prompt_break_sent or send_break
        self._add_logprobs(out, req)
        qt = (req.queue_time_start - req.wait_queue_entry_time) if req.queue_time_start else None
        out.queue_times.append(qt)
        out.first_token_times.append(
            (req.first_token_time - req.arrival_time) if req.first_token_time else None
        )

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
        out.output_top_logprobs.append(
            req.output_top_logprobs[s:] if req.top_logprobs_num else None
        )
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
