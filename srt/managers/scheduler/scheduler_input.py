"""Scheduler intake: new requests (the checks that need the pool, clamping, queue limits), aborts,
expiry of requests that waited too long, and control messages."""

from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass
from typing import Any, Callable, List, Optional

import zmq

from sglang.srt.core.finish_reason import FinishAbort
from sglang.srt.core.input_limits import InputLimits
from sglang.srt.core.io_struct.ipc import recv_obj, send_obj
from sglang.srt.core.io_struct.to_scheduler import (
    CONTROL_MESSAGES,
    AbortReq,
    TokenizedGenerateReqInput,
)
from sglang.srt.core.req import Req
from sglang.srt.distributed.parallel_state import tp_broadcast_object
from sglang.srt.managers.scheduler.grammar_queue import GrammarQueue
from sglang.srt.managers.scheduler.output_streamer import OutputStreamer
from sglang.srt.managers.scheduler.priority import PriorityOrder
from sglang.srt.managers.scheduler.scheduler_state import KVPools, SchedulerState

logger = logging.getLogger(__name__)

QUEUE_FULL_MESSAGE = "The request queue is full."
WAITING_TIMEOUT_MESSAGE = "Request waiting timeout reached."
ABORT_MESSAGE = "Aborted by AbortReq."
IDLE_POLL_MS = 50


@dataclass(frozen=True)
class IntakeConfig:
    max_queued_requests: Optional[int]
    request_waiting_timeout: Optional[float]
    priority_scheduling: bool
    serializer: str
    tp_rank: int


class SchedulerIntake:
    def __init__(
        self,
        state: SchedulerState,
        pools: KVPools,
        limits: InputLimits,
        grammar: GrammarQueue,
        streamer: OutputStreamer,
        order: PriorityOrder,
        config: IntakeConfig,
        eos_token_ids: set,
        vocab_size: int,
        seed: int,
        recv_sock: Optional[zmq.Socket],
        reply_sock: Optional[zmq.Socket],
    ):
        """Sockets None: nothing is received or replied (a scheduler driven in-process)."""
        self.state = state
        self.pools = pools
        self.limits = limits
        self.grammar = grammar
        self.streamer = streamer
        self.order = order
        self.config = config
        self.eos_token_ids = eos_token_ids
        self.vocab_size = vocab_size
        # Seeds for requests that give none, drawn identically on every TP rank.
        self.seed_rng = random.Random(seed)
        self.recv_sock = recv_sock
        self.reply_sock = reply_sock
        # Control messages the scheduler answers from its own state (flush, internal state).
        self.control: Optional[Callable[[Any], Any]] = None

    # ------------------------------------------------------------------ receiving
    def recv_requests(self, block: bool, wait_ms: int = IDLE_POLL_MS) -> List[Any]:
        if self.recv_sock is None:
            return []
        if block and not self.recv_sock.poll(wait_ms):
            return []
        out = []
        while True:
            try:
                out.append(recv_obj(self.recv_sock, self.config.serializer, zmq.NOBLOCK))
            except zmq.ZMQError:
                return out

    def recv_and_process_requests(self, block: bool = False, wait_ms: int = IDLE_POLL_MS) -> None:
        reqs = self.recv_requests(block, wait_ms)
        expired = self._expired_waiting() if self.config.tp_rank == 0 else []
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
        elif isinstance(obj, CONTROL_MESSAGES) and self.control is not None:
            out = self.control(obj)
            if out is not None:  # None: answered later (a weight update waits for the batch)
                self.reply(out)
        else:
            logger.error("Scheduler got an unknown message %s", type(obj).__name__)

    def reply(self, obj: Any) -> None:
        if self.reply_sock is not None:
            send_obj(self.reply_sock, obj, self.config.serializer)

    # ------------------------------------------------------------------ new requests
    def handle_generate_request(self, recv: TokenizedGenerateReqInput) -> None:
        req = Req(
            recv.rid,
            recv.input_ids,
            recv.sampling_params,
            return_logprob=recv.return_logprob,
            logprob_start_len=recv.logprob_start_len,
            top_logprobs_num=recv.top_logprobs_num,
            stream=recv.stream,
            priority=recv.priority,
            extra_key=recv.extra_key,
            eos_token_ids=self.eos_token_ids,
            vocab_size=self.vocab_size,
        )
        req.auto_seed = self.seed_rng.getrandbits(31)
        self.state.rid_to_req[req.rid] = req
        n = len(req.origin_input_ids)
        if n > self.limits.max_req_input_len:
            # The HTTP process checks this too; a data-parallel replica may have a smaller pool.
            self.finish_early(req, self.limits.too_long_message(n), 400, "BadRequestError")
            return
        self._clamp_max_new_tokens(req)
        if req.return_logprob and req.logprob_start_len < 0:
            req.logprob_start_len = len(req.origin_input_ids)  # output logprobs only
        if not req.return_logprob:
            req.logprob_start_len = -1
        if req.sampling_params.has_grammar():
            if not self.grammar.enabled:
                self.finish_early(
                    req, "Constrained decoding is disabled on this server.", 400, "BadRequestError"
                )
            else:
                self.grammar.submit(req)  # queued once compiled (poll_grammar_queue)
            return
        self.enqueue(req)

    def _clamp_max_new_tokens(self, req: Req) -> None:
        sp = req.sampling_params
        n = len(req.origin_input_ids)
        ps = self.pools.page_size
        max_req_len = min(self.limits.context_len - 1, self.pools.max_total_num_tokens - 1)
        room = min(
            max_req_len - n - 1, self.pools.max_total_num_tokens - (n + ps - 1) // ps * ps - ps - 1
        )
        want = sp.max_new_tokens if sp.max_new_tokens is not None else 1 << 30
        sp.max_new_tokens = max(0, min(want, room))
        if sp.min_new_tokens > sp.max_new_tokens:
            sp.min_new_tokens = sp.max_new_tokens

    def enqueue(self, req: Req) -> None:
        if self._abort_on_queue_limit(req):
            return
        req.wait_queue_entry_time = time.monotonic()
        self.state.waiting_queue.append(req)
        self.pools.tree_cache.prefetch(req)

    def _abort_on_queue_limit(self, req: Req) -> bool:
        """--max-queued-requests: refuse `req` (or, with priorities, evict a less preferred one)."""
        limit = self.config.max_queued_requests
        waiting = self.state.waiting_queue
        if limit is None or len(waiting) + 1 <= limit:
            return False
        victim, msg = req, QUEUE_FULL_MESSAGE
        if self.config.priority_scheduling:
            worst = self.order.least_preferred(waiting)
            if self.order.margin(req, worst) > 0:
                victim, msg = worst, "The request is aborted by a higher priority request."
                waiting.remove(worst)
        self.finish_early(victim, msg, 503, "ServiceUnavailable")
        return victim is req

    def finish_early(
        self, req: Req, message: str, status: Optional[int], err_type: Optional[str]
    ) -> None:
        """Finish a request that holds no KV (never admitted, or retracted) and tell the client."""
        req.finish(FinishAbort(message, status, err_type))
        self.pools.tree_cache.drop_prefetch(req)
        self.state.rid_to_req.pop(req.rid, None)
        self.streamer.stream_output([req])

    def _expired_waiting(self) -> List[str]:
        timeout = self.config.request_waiting_timeout
        waiting = self.state.waiting_queue
        if not timeout or not waiting:
            return []
        now = time.monotonic()
        return [
            r.rid
            for r in waiting
            if r.req_pool_idx is None
            and not r.output_ids
            and now - r.wait_queue_entry_time > timeout
        ]

    def expire_waiting(self, rids: List[str]) -> None:
        if not rids:
            return
        gone = set(rids)
        expired = [r for r in self.state.waiting_queue if r.rid in gone]
        self.state.waiting_queue = [r for r in self.state.waiting_queue if r.rid not in gone]
        for r in expired:
            self.finish_early(r, WAITING_TIMEOUT_MESSAGE, 503, "ServiceUnavailable")

    # ------------------------------------------------------------------ grammar
    def poll_grammar_queue(self) -> None:
        ready, failed = self.grammar.poll()
        for req, msg in failed:
            if msg.startswith("Aborted"):
                self.finish_early(req, msg, None, None)
            else:
                self.finish_early(req, msg, 400, "BadRequestError")
        for req in ready:
            self.enqueue(req)

    # ------------------------------------------------------------------ aborts
    def abort_request(self, recv: AbortReq) -> None:
        def match(r: Req) -> bool:
            return recv.abort_all or r.rid == recv.rid

        state = self.state
        # 1. Waiting queue: nothing is held, finish now.
        victims = [r for r in state.waiting_queue if match(r)]
        if victims:
            gone = {id(r) for r in victims}
            state.waiting_queue = [r for r in state.waiting_queue if id(r) not in gone]
            for r in victims:
                self.finish_early(r, "Abort in waiting queue", None, None)
        # 2. Grammar queue: the manager drops it; the next poll reports it as aborted.
        self.grammar.abort_matching(list(state.rid_to_req.values()), match)
        # 3. Running or mid-prefill: marked, finished by the loop through the normal release path.
        for r in state.live_reqs():
            if match(r):
                r.request_abort(FinishAbort(ABORT_MESSAGE))
