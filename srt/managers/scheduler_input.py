"""Scheduler intake: new requests (validation, clamping, queue limits), aborts, and control messages."""

from __future__ import annotations

import logging
import time
from typing import Any, List, Optional

import zmq

from sglang.srt.distributed.parallel_state import tp_all_gather_object, tp_broadcast_object
from sglang.srt.managers.io_struct import (
    AbortReq,
    FlushCacheReqInput,
    FlushCacheReqOutput,
    GetInternalStateReq,
    GetInternalStateReqOutput,
    TokenizedGenerateReqInput,
)
from sglang.srt.managers.req import FinishAbort, Req
from sglang.srt.utils.ipc import recv_obj, send_obj

logger = logging.getLogger(__name__)

QUEUE_FULL_MESSAGE = "The request queue is full."
WAITING_TIMEOUT_MESSAGE = "Request waiting timeout reached."
IDLE_POLL_MS = 50


class SchedulerInputMixin:
    # ------------------------------------------------------------------ receiving
    def recv_requests(self, block: bool) -> List[Any]:
        if self.recv_from_tokenizer is None:
            return []
        if block and not self.recv_from_tokenizer.poll(IDLE_POLL_MS):
            return []
        out = []
        while True:
            try:
                out.append(recv_obj(self.recv_from_tokenizer, self.server_args.ipc_serializer, zmq.NOBLOCK))
            except zmq.ZMQError:
                return out

    def recv_and_process_requests(self, block: bool = False) -> None:
        reqs = self.recv_requests(block)
        expired = self._expired_waiting() if self.tp_rank == 0 else []
        # Rank 0 alone reads the socket and the clock; every rank applies the same decisions, so all
        # ranks build identical batches.
        reqs, expired = tp_broadcast_object((reqs, expired))
        for obj in reqs:
            self.process_input_request(obj)
        self.poll_grammar_queue()
        self.expire_waiting(expired)

    def process_input_request(self, obj: Any) -> None:
        if isinstance(obj, TokenizedGenerateReqInput):
            self.handle_generate_request(obj)
        elif isinstance(obj, AbortReq):
            self.abort_request(obj)
        elif isinstance(obj, FlushCacheReqInput):
            ok, msg = self.flush_cache()
            self._reply(FlushCacheReqOutput(ok, msg))
        elif isinstance(obj, GetInternalStateReq):
            self._reply(GetInternalStateReqOutput(self.internal_state()))
        else:
            logger.error("Scheduler got an unknown message %s", type(obj).__name__)

    def _reply(self, obj: Any) -> None:
        if self.send_to_tokenizer is not None:
            send_obj(self.send_to_tokenizer, obj, self.server_args.ipc_serializer)

    # ------------------------------------------------------------------ new requests
    def handle_generate_request(self, recv: TokenizedGenerateReqInput) -> None:
        req = Req(
            recv.rid,
            recv.input_text,
            recv.input_ids,
            recv.sampling_params,
            return_logprob=recv.return_logprob,
            logprob_start_len=recv.logprob_start_len,
            top_logprobs_num=recv.top_logprobs_num,
            stream=recv.stream,
            priority=recv.priority,
            extra_key=recv.extra_key,
            eos_token_ids=self.eos_token_ids,
            vocab_size=self.model_config.vocab_size,
        )
        req.auto_seed = self.seed_rng.getrandbits(31)
        self.rid_to_req[req.rid] = req
        err = self._validate(req)
        if err is not None:
            self.finish_early(req, err, 400, "BadRequestError")
            return
        self._clamp_max_new_tokens(req)
        if req.return_logprob and req.logprob_start_len < 0:
            req.logprob_start_len = len(req.origin_input_ids)  # output logprobs only
        if not req.return_logprob:
            req.logprob_start_len = -1
        if req.sampling_params.has_grammar():
            if not self.submit_grammar(req):
                return
        if self._abort_on_queue_limit(req):
            return
        req.wait_queue_entry_time = time.monotonic()
        self.waiting_queue.append(req)

    def _validate(self, req: Req) -> Any:
        n = len(req.origin_input_ids)
        if n == 0:
            return "The input is empty."
        if n > self.max_req_input_len:
            return self.input_limits.too_long_message(n)
        if req.return_logprob and req.logprob_start_len > n:
            return f"logprob_start_len ({req.logprob_start_len}) is greater than the input length ({n})."
        vocab = self.model_config.vocab_size
        if any(t < 0 or t >= vocab for t in req.origin_input_ids):
            return f"Input token ids must be in [0, {vocab})."
        return None

    def _clamp_max_new_tokens(self, req: Req) -> None:
        sp = req.sampling_params
        n = len(req.origin_input_ids)
        ps = self.page_size
        room = min(self.max_req_len - n - 1, self.max_total_num_tokens - (n + ps - 1) // ps * ps - ps - 1)
        want = sp.max_new_tokens if sp.max_new_tokens is not None else 1 << 30
        sp.max_new_tokens = max(0, min(want, room))
        if sp.min_new_tokens > sp.max_new_tokens:
            sp.min_new_tokens = sp.max_new_tokens

    def _abort_on_queue_limit(self, req: Req) -> bool:
        limit = self.server_args.max_queued_requests
        if limit is None or len(self.waiting_queue) + 1 <= limit:
            return False
        victim = req
        msg = QUEUE_FULL_MESSAGE
        if self.server_args.enable_priority_scheduling:
            sign = self.policy.priority_sign
            worst = max(self.waiting_queue, key=lambda r: ((r.priority or 0) * sign, r.wait_queue_entry_time))
            if ((worst.priority or 0) - (req.priority or 0)) * sign > 0:
                victim, msg = worst, "The request is aborted by a higher priority request."
                self.waiting_queue.remove(worst)
        self.finish_early(victim, msg, 503, "ServiceUnavailable")
        return victim is req

    def finish_early(self, req: Req, message: str, status: Optional[int], err_type: Optional[str]) -> None:
        """Finish a request that holds no KV (never admitted, or retracted) and tell the client."""
        req.finished_reason = FinishAbort(message, status, err_type)
        self.rid_to_req.pop(req.rid, None)
        self.stream_output([req])

    def _expired_waiting(self) -> List[str]:
        timeout = self.server_args.request_waiting_timeout
        if not timeout or not self.waiting_queue:
            return []
        now = time.monotonic()
        return [
            r.rid
            for r in self.waiting_queue
            if r.req_pool_idx is None and not r.output_ids and now - r.wait_queue_entry_time > timeout
        ]

    def expire_waiting(self, rids: List[str]) -> None:
        if not rids:
            return
        gone = set(rids)
        expired = [r for r in self.waiting_queue if r.rid in gone]
        self.waiting_queue = [r for r in self.waiting_queue if r.rid not in gone]
        for r in expired:
            self.finish_early(r, WAITING_TIMEOUT_MESSAGE, 503, "ServiceUnavailable")

    # ------------------------------------------------------------------ aborts
    def abort_request(self, recv: AbortReq) -> None:
        def match(r: Req) -> bool:
            return recv.abort_all or r.rid == recv.rid

        # 1. Waiting queue: nothing is held, finish now.
        victims = [r for r in self.waiting_queue if match(r)]
        if victims:
            gone = {id(r) for r in victims}
            self.waiting_queue = [r for r in self.waiting_queue if id(r) not in gone]
            for r in victims:
                self.finish_early(r, "Abort in waiting queue", None, None)
        # 2. Grammar queue: the manager drops it; the next poll reports it as aborted.
        self.abort_grammar_waiting(match)
        # 3. Running or mid-prefill: marked, finished by the loop through the normal release path.
        for r in (
            list(self.running_batch.reqs) + ([self.chunked_req] if self.chunked_req else []) + self._inflight_reqs()
        ):
            if match(r) and not r.finished() and r.to_finish is None:
                r.to_finish = FinishAbort("Aborted by AbortReq.")

    def _inflight_reqs(self) -> List[Req]:
        out: List[Req] = []
        for _batch, launched, _pending in self.pending:
            out.extend(launched.reqs)
        if self.last_batch is not None and self.last_batch.forward_mode.is_extend():
            out.extend(self.last_batch.reqs)
        return out

    # ------------------------------------------------------------------ control
    def flush_cache(self) -> tuple:
        if not self._is_fully_idle():
            return False, "Cache not flushed: there are running or waiting requests."
        self.tree_cache.reset()
        self.allocator.clear()
        self.req_to_token_pool.clear()
        return True, "Cache flushed."

    def internal_state(self) -> dict:
        return {
            "dp_rank": self.dp_rank,
            "max_total_num_tokens": self.max_total_num_tokens,
            "max_running_requests": self.max_running_requests,
            "context_len": self.context_len,
            "chunked_prefill_size": self.chunked_prefill_size,
            "page_size": self.page_size,
            "num_running_reqs": self.running_batch.batch_size(),
            "num_waiting_reqs": len(self.waiting_queue),
            "token_usage": self.token_usage(),
            "last_gen_throughput": self.last_gen_throughput,
            "cache_hit_rate": self.cache_hit_rate(),
            "num_retractions_total": self.num_retracted_total,
            "new_token_ratio": self.new_token_ratio,
            "available_tokens": self.allocator.available_size(),
            "evictable_tokens": self.tree_cache.evictable_size(),
            "protected_tokens": self.tree_cache.protected_size(),
            "prefill_input_tokens_total": self.total_prefill_input_tokens,
            "prefill_cached_tokens_total": self.total_prefill_cached_tokens,
            "num_decode_steps": self.num_decode_steps,
        }

    # ------------------------------------------------------------------ grammar
    def _init_grammar(self) -> None:
        self.grammar_manager = None
        if self.server_args.grammar_backend == "none" or self.tokenizer is None:
            return
        from sglang.srt.constrained.factory import make_grammar_backend
        from sglang.srt.constrained.grammar_manager import GrammarManager

        backend = make_grammar_backend(
            self.server_args, self.tokenizer, self.model_config.vocab_size, sorted(self.eos_token_ids)
        )
        self.grammar_manager = GrammarManager(backend)

    def grammar_queue_nonempty(self) -> bool:
        return self.grammar_manager is not None and self.grammar_manager.num_waiting() > 0

    def submit_grammar(self, req: Req) -> bool:
        """Park the request until its grammar compiles. Returns False if it was answered already."""
        if self.grammar_manager is None:
            self.finish_early(req, "Constrained decoding is disabled on this server.", 400, "BadRequestError")
            return False
        self.grammar_manager.submit(req)
        return False

    def poll_grammar_queue(self) -> None:
        if not self.grammar_queue_nonempty():
            return
        # A request leaves the grammar queue only once every rank has settled it.
        agreed = set.intersection(*tp_all_gather_object(self.grammar_manager.ready_rids()))
        ready, failed = self.grammar_manager.pop_ready(agreed)
        for req, msg in failed:
            if msg.startswith("Aborted"):
                self.finish_early(req, msg, None, None)
            else:
                self.finish_early(req, msg, 400, "BadRequestError")
        for req in ready:
            if not self._abort_on_queue_limit(req):
                req.wait_queue_entry_time = time.monotonic()
                self.waiting_queue.append(req)

    def abort_grammar_waiting(self, match) -> None:
        if self.grammar_manager is None:
            return
        for rid in list(self.rid_to_req):
            req = self.rid_to_req[rid]
            if match(req) and req.grammar is None and req.sampling_params.has_grammar():
                self.grammar_manager.abort(rid)

    def attach_grammar_masks(self, batch, info) -> None:
        """Fill the vocabulary bitmask of constrained rows (unconstrained rows stay all-allowed)."""
        grammars = [(i, r.grammar) for i, r in enumerate(batch.reqs) if r.grammar is not None]
        if not grammars:
            return
        first = grammars[0][1]
        mask = first.allocate_vocab_mask(self.model_config.vocab_size, batch.batch_size(), self.device)
        for i, g in grammars:
            if not batch.reqs[i].finished():
                g.fill_vocab_mask(mask, i)
        info.vocab_mask = first.move_vocab_mask(mask, self.device)
        info.apply_vocab_mask = type(first).apply_vocab_mask
