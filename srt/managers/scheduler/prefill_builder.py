"""Forming the next prefill batch: the waiting queue in policy order, admitted on the token budget
(PrefillAdder), the chunked request continued first, and with priority scheduling, running requests
of much lower priority preempted to make room."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import List, Optional

from sglang.srt.core.req import Req, ReqStatus
from sglang.srt.managers.scheduler.cache_report import find_prompt_break
from sglang.srt.managers.scheduler.priority import PriorityOrder
from sglang.srt.managers.scheduler.schedule_batch import ScheduleBatch
from sglang.srt.managers.scheduler.schedule_policy import (
    AddReqResult,
    InBatchPrefixFilter,
    PrefillAdder,
    SchedulePolicy,
)
from sglang.srt.managers.scheduler.scheduler_state import KVPools, SchedulerState
from sglang.srt.managers.scheduler.scheduler_stats import SchedulerStats


@dataclass(frozen=True)
class PrefillConfig:
    max_running_requests: int
    max_prefill_tokens: int
    chunked_prefill_size: Optional[int]
    radix_cache: bool
    mixed_chunk: bool
    priority_scheduling: bool
    preemption_threshold: int
    cache_report: bool = False
    draft_reserve_per_req: int = 0  # speculative decoding: drafts verified per request per step


class PrefillBuilder:
    def __init__(
        self,
        state: SchedulerState,
        pools: KVPools,
        policy: SchedulePolicy,
        order: PriorityOrder,
        stats: SchedulerStats,
        config: PrefillConfig,
    ):
        self.state = state
        self.pools = pools
        self.policy = policy
        self.order = order
        self.stats = stats
        self.config = config

    def build(self, new_token_ratio: float, admit: bool = True) -> Optional[ScheduleBatch]:
        """admit False: only a request already mid-prefill goes on (its next chunk)."""
        state, pools, cfg = self.state, self.pools, self.config
        if state.chunked_req is not None and state.chunked_req.finished():
            state.chunked_req = None
        if not state.waiting_queue and state.chunked_req is None:
            return None
        self.policy.calc_priority(state.waiting_queue)
        running = state.running_batch
        room = min(
            cfg.max_running_requests - len(running.reqs), pools.req_to_token_pool.available_size()
        )
        room = room if admit else 0
        if (
            admit
            and room <= 0
            and state.waiting_queue
            and self._preempt_for_slot(state.waiting_queue[0])
        ):
            room = 1
        if room <= 0 and state.chunked_req is None:
            return None
        mixed = len(running.reqs) if cfg.mixed_chunk and not running.is_empty() else 0
        adder = PrefillAdder(
            pools.tree_cache,
            pools.allocator,
            running.reqs,
            new_token_ratio,
            cfg.max_prefill_tokens,
            cfg.chunked_prefill_size,
            mixed,
            pools.page_size,
            draft_reserve_per_req=cfg.draft_reserve_per_req,
        )
        chunked = state.chunked_req
        if chunked is not None:
            # The previous chunk's slots join the tree (or stay the request's own, without radix) and
            # become this chunk's prefix.
            pools.tree_cache.cache_unfinished_req(chunked, chunked=True)
            chunked.init_next_round_input()
            state.chunked_req = adder.add_chunked_req(chunked)
        self._admit(adder, room, chunked is not None)
        if not adder.can_run_list:
            return None
        if adder.new_chunked_req is not None:
            state.chunked_req = adder.new_chunked_req
        admitted = {id(r) for r in adder.can_run_list}
        state.waiting_queue = [r for r in state.waiting_queue if id(r) not in admitted]
        for r in adder.can_run_list:
            if cfg.cache_report and r.prompt_break is None and not r.was_retracted():
                r.prompt_break = find_prompt_break(r, pools.tree_cache)
            r.status = ReqStatus.RUNNING
            if r.queue_time_start is None:
                r.queue_time_start = time.monotonic()
        batch = pools.new_batch(adder.can_run_list)
        batch.prepare_for_extend()
        # Publish the prompts to the tree now, not when the pass returns: the next batch (built while
        # this one runs) can already match them, and the device computes this pass's KV first.
        for r in batch.reqs:
            pools.tree_cache.cache_unfinished_req(r, chunked=r is state.chunked_req)
        self.stats.log_prefill(adder)
        if mixed and not batch.return_logprob:
            self._mix_running_into(batch)
        return batch

    def _admit(self, adder: PrefillAdder, room: int, continuing_chunk: bool) -> None:
        in_batch = InBatchPrefixFilter(enabled=self.config.radix_cache)
        for req in list(self.state.waiting_queue):
            if len(adder.can_run_list) - (1 if continuing_chunk else 0) >= room:
                break
            if not self.pools.tree_cache.prefetch_ready(req):
                continue  # its storage prefetch is still running (the policy says wait)
            req.init_next_round_input(self.pools.tree_cache)
            if in_batch.should_wait(req):
                continue  # it shares a long uncached prefix with a request in this batch: next round hits it
            res = adder.add_one_req(req, has_chunked_req=self.state.chunked_req is not None)
            if res == AddReqResult.CONTINUE or req in adder.can_run_list:
                in_batch.add(req)
            if res != AddReqResult.CONTINUE:
                if res == AddReqResult.NO_TOKEN and self._try_preempt(adder, req):
                    continue
                break

    def _mix_running_into(self, batch: ScheduleBatch) -> None:
        """--enable-mixed-chunk: the running batch's decode step rides along in this extend pass."""
        running = self.state.running_batch
        running.filter_batch()
        running.exclude_finishing()
        if not running.is_empty() and running.check_decode_mem():
            batch.mix_with_running(running)
            self.state.running_batch = self.pools.new_batch([])

    # ------------------------------------------------------------------ priority preemption
    def _try_preempt(self, adder: PrefillAdder, req: Req) -> bool:
        """Push out much lower-priority running requests to fit `req` in the pool."""
        if not self.config.priority_scheduling:
            return False
        victims = adder.preempt_to_schedule(
            req, self.state.running_batch.reqs, self.config.preemption_threshold, self.order
        )
        if not victims:
            return False
        self._preempt(victims)
        adder.running_reqs = self.state.running_batch.reqs
        return adder.add_one_req(req, self.state.chunked_req is not None) == AddReqResult.CONTINUE

    def _preempt_for_slot(self, req: Req) -> bool:
        """Every running slot taken: the least-preferred running request makes way if `req` beats it
        by more than the threshold."""
        if not self.config.priority_scheduling:
            return False
        cands = [r for r in self.state.running_batch.reqs if not r.finished()]
        if not cands:
            return False
        worst = self.order.least_preferred(cands)
        if self.order.margin(req, worst) <= self.config.preemption_threshold:
            return False
        self._preempt([worst])
        return True

    def _preempt(self, victims: List[Req]) -> None:
        """Release the victims' KV (their prefix stays cached) and queue them to run again later."""
        for v in victims:
            self.pools.release(v, is_insert=False)
            v.reset_for_retract()
            self.state.waiting_queue.append(v)
        running = self.state.running_batch
        keep = [i for i, r in enumerate(running.reqs) if r not in victims]
        running.filter_batch(keep_indices=keep)
