"""The Scheduler process: one per TP rank, owning the device, the pools and the radix tree.

Each loop iteration: receive requests, pick the next batch (a prefill if one can be formed, else a
decode step of the running batch), launch it, and process the results of the previous launch
(overlap loop) or of this one (plain loop). Files beside this one hold the parts:
scheduler_input (intake, aborts, control), scheduler_output (results, streaming),
scheduler_stats (log lines, metrics), schedule_policy (queue order, admission),
schedule_batch (KV bookkeeping of a pass), overlap (FutureMap, asynchronous launch).
"""

from __future__ import annotations

import faulthandler
import logging
import os
import random
import signal
import sys
import time
from collections import deque
from dataclasses import dataclass
from typing import Deque, List, Optional

import torch
import zmq

from sglang.srt.configs.model_config import ModelConfig
from sglang.srt.distributed.init import init_distributed
from sglang.srt.distributed.parallel_state import tp_min_int
from sglang.srt.managers.input_limits import InputLimits
from sglang.srt.managers.invariant_checker import InvariantChecker
from sglang.srt.managers.io_struct import DPLoad, SchedulerReady
from sglang.srt.managers.loop_profiler import LoopProfiler
from sglang.srt.managers.overlap import BatchLauncher, FutureMap
from sglang.srt.managers.req import FinishAbort, Req
from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.managers.schedule_policy import AddReqResult, InBatchPrefixFilter, PrefillAdder, SchedulePolicy
from sglang.srt.managers.scheduler_input import SchedulerInputMixin
from sglang.srt.managers.scheduler_output import SchedulerOutputMixin
from sglang.srt.managers.scheduler_stats import SchedulerStatsMixin
from sglang.srt.mem_cache.common import release_kv_cache
from sglang.srt.model_executor.model_runner import ModelRunner, default_chunked_prefill_size
from sglang.srt.sampling.sampling_batch_info import SamplingBatchInfo
from sglang.srt.server_args import PortArgs, ServerArgs
from sglang.srt.utils import jit_watch
from sglang.srt.utils.ipc import make_socket, send_obj

logger = logging.getLogger(__name__)

INIT_NEW_TOKEN_RATIO = 0.7
MIN_NEW_TOKEN_RATIO_FACTOR = 0.14
NEW_TOKEN_RATIO_DECAY_STEPS = 600


@dataclass
class LaunchedBatch:
    """What result processing needs of a batch as it was when launched (the live batch mutates)."""

    reqs: List[Req]
    samples: List[bool]  # False for a non-final prefill chunk (its sample is discarded)
    forward_mode: object
    n_extend: int  # leading requests that were extends (the rest are mixed decodes)
    logprob_lens: List[int]  # prompt-logprob positions of each request in this pass
    prefix_lens: List[int]
    extend_lens: List[int]
    launch_time: float


class Scheduler(SchedulerInputMixin, SchedulerOutputMixin, SchedulerStatsMixin):
    def __init__(self, server_args: ServerArgs, port_args: Optional[PortArgs], gpu_id: int = 0, tp_rank: int = 0):
        """port_args None: no sockets (the scheduler is driven in-process, as the tests do)."""
        self.server_args = server_args
        self.tp_rank = tp_rank
        self.device = server_args.resolved_device()
        self.model_config = ModelConfig.from_path(server_args.model_path, server_args.context_length)
        self._init_tokenizer()
        self._init_sockets(port_args)
        seed = server_args.random_seed if server_args.random_seed is not None else 0
        random.seed(seed)
        torch.manual_seed(seed)
        self.seed_rng = random.Random(seed)
        self.tp_size = server_args.tp_size
        init_distributed(server_args, port_args.nccl_port if port_args else 0, tp_rank, self.device)
        self.model_runner = ModelRunner(self.model_config, server_args, self.device, gpu_id, show_progress=tp_rank == 0)
        self._agree_pool_sizes()
        self._init_limits()
        self._init_cache()
        self._init_policy()
        self._init_state()
        self._init_stats()
        self._init_grammar()
        self.overlap = not server_args.disable_overlap_schedule
        self.future_map = (
            FutureMap(
                self.max_running_requests,
                self.model_config.context_len,
                self.chunked_prefill_size or self.model_config.context_len,
                self.device,
            )
            if self.overlap
            else None
        )
        self.invariants = InvariantChecker(self)
        self.loop_prof = LoopProfiler()
        self.launcher = BatchLauncher(self.model_runner, self.future_map, self.overlap, self.loop_prof)

    # ------------------------------------------------------------------ init
    def _init_tokenizer(self) -> None:
        self.tokenizer = None
        if not self.server_args.skip_tokenizer_init:
            from sglang.srt.utils.hf_tokenizer import get_tokenizer

            self.tokenizer = get_tokenizer(
                self.server_args.tokenizer_path or self.server_args.model_path, self.server_args.trust_remote_code
            )
        eos = set(self.model_config.eos_token_ids)
        if self.tokenizer is not None and self.tokenizer.eos_token_id is not None:
            eos.add(self.tokenizer.eos_token_id)
        self.eos_token_ids = eos

    def _init_sockets(self, port_args: Optional[PortArgs]) -> None:
        self.zmq_ctx = zmq.Context(2)
        self.recv_from_tokenizer = None
        self.send_to_detokenizer = None
        self.send_to_tokenizer = None
        if self.tp_rank == 0 and port_args is not None:
            self.recv_from_tokenizer = make_socket(self.zmq_ctx, zmq.PULL, port_args.scheduler_input_ipc_name, True)
            target = (
                port_args.tokenizer_ipc_name if self.server_args.skip_tokenizer_init else port_args.detokenizer_ipc_name
            )
            self.send_to_detokenizer = make_socket(self.zmq_ctx, zmq.PUSH, target, False)
            self.send_to_tokenizer = make_socket(self.zmq_ctx, zmq.PUSH, port_args.tokenizer_ipc_name, False)
        self.dp_rank = port_args.dp_rank if port_args is not None else 0
        self.send_load = None
        self._last_load = None
        if self.tp_rank == 0 and port_args is not None and port_args.dp_load_ipc_name:
            self.send_load = make_socket(self.zmq_ctx, zmq.PUSH, port_args.dp_load_ipc_name, False)

    def _agree_pool_sizes(self) -> None:
        """Every rank must schedule with the same pool size: the smallest rank's bounds all."""
        mr = self.model_runner
        tokens = tp_min_int(mr.max_total_num_tokens)
        rows = tp_min_int(mr.max_running_requests)
        if tokens < mr.max_total_num_tokens:
            # The buffers stay allocated; the allocator simply never hands out the extra slots.
            mr.max_total_num_tokens = tokens
            mr.token_to_kv_pool_allocator = type(mr.token_to_kv_pool_allocator)(
                tokens, *([mr.page_size] if mr.page_size > 1 else [])
            )
        if rows < mr.max_running_requests:
            mr.max_running_requests = rows
            mr.req_to_token_pool.free_slots = list(range(1, rows + 1))
            mr.req_to_token_pool.size = rows

    def _init_limits(self) -> None:
        sa, mr = self.server_args, self.model_runner
        self.max_total_num_tokens = mr.max_total_num_tokens
        self.max_running_requests = mr.max_running_requests
        self.page_size = sa.page_size
        self.context_len = self.model_config.context_len
        self.input_limits = InputLimits.compute(self.context_len, self.max_total_num_tokens)
        self.max_req_len = min(self.context_len - 1, self.max_total_num_tokens - 1)
        self.max_req_input_len = self.input_limits.max_req_input_len
        if sa.chunked_prefill_size is None:
            mem_gb = (
                torch.cuda.get_device_properties(mr.gpu_id).total_memory / (1 << 30) if self.device == "cuda" else None
            )
            chunk = default_chunked_prefill_size(mem_gb)
        else:
            chunk = sa.chunked_prefill_size
        self.chunked_prefill_size: Optional[int] = None if chunk is None or chunk <= 0 else chunk
        if self.chunked_prefill_size is not None and self.page_size > 1:
            self.chunked_prefill_size = max(self.chunked_prefill_size // self.page_size, 1) * self.page_size
        self.max_prefill_tokens = sa.max_prefill_tokens

    def _init_cache(self) -> None:
        mr, sa = self.model_runner, self.server_args
        if sa.disable_radix_cache:
            from sglang.srt.mem_cache.chunk_cache import ChunkCache

            self.tree_cache = ChunkCache(mr.req_to_token_pool, mr.token_to_kv_pool_allocator, page_size=self.page_size)
        else:
            from sglang.srt.mem_cache.radix_cache import RadixCache

            self.tree_cache = RadixCache(
                mr.req_to_token_pool,
                mr.token_to_kv_pool_allocator,
                page_size=self.page_size,
                eviction_policy=sa.radix_eviction_policy,
            )
        self.req_to_token_pool = mr.req_to_token_pool
        self.allocator = mr.token_to_kv_pool_allocator

    def _init_policy(self) -> None:
        sa = self.server_args
        self.policy = SchedulePolicy(
            sa.schedule_policy,
            self.tree_cache,
            not sa.disable_radix_cache,
            sa.enable_priority_scheduling,
            sa.schedule_low_priority_values_first,
        )
        self.init_new_token_ratio = min(INIT_NEW_TOKEN_RATIO * sa.schedule_conservativeness, 1.0)
        self.min_new_token_ratio = min(self.init_new_token_ratio * MIN_NEW_TOKEN_RATIO_FACTOR, 1.0)
        self.new_token_ratio_decay = (
            self.init_new_token_ratio - self.min_new_token_ratio
        ) / NEW_TOKEN_RATIO_DECAY_STEPS
        self.new_token_ratio = self.init_new_token_ratio

    def _init_state(self) -> None:
        self.waiting_queue: List[Req] = []
        self.running_batch = self._empty_batch()
        self.chunked_req: Optional[Req] = None
        self.last_batch: Optional[ScheduleBatch] = None
        self.pending: Deque = deque()
        self.rid_to_req = {}
        self.forward_ct = 0
        self.stop_requested = False

    def _empty_batch(self) -> ScheduleBatch:
        return ScheduleBatch([], self.req_to_token_pool, self.allocator, self.tree_cache, self.device)

    def ready_info(self) -> SchedulerReady:
        return SchedulerReady(
            max_total_num_tokens=self.max_total_num_tokens,
            max_running_requests=self.max_running_requests,
            max_req_input_len=self.max_req_input_len,
            context_len=self.context_len,
            chunked_prefill_size=self.chunked_prefill_size or -1,
            page_size=self.page_size,
            vocab_size=self.model_config.vocab_size,
            available_mem_gb=self.model_runner.sizes.available_mem_gb,
            device=self.device,
        )

    # ------------------------------------------------------------------ loops
    def event_loop(self) -> None:
        while not self.stop_requested:
            with self.loop_prof.phase("recv"):
                self.recv_and_process_requests(block=self._is_fully_idle())
            self.step()
            if self.send_load is not None:
                self._report_load()

    def _report_load(self) -> None:
        """Data parallelism: tell the controller how many tokens this replica holds (when it changes)."""
        used = self.max_total_num_tokens - self.allocator.available_size() - self.tree_cache.evictable_size()
        load = (used, len(self.rid_to_req))
        if load != self._last_load:
            self._last_load = load
            send_obj(self.send_load, DPLoad(self.dp_rank, used, len(self.rid_to_req)), self.server_args.ipc_serializer)

    def step(self) -> None:
        """One iteration after intake: the plain or the overlap schedule."""
        if self.overlap:
            self._step_overlap()
        else:
            self._step_normal()

    def _step_normal(self) -> None:
        with self.loop_prof.phase("build"):
            batch = self.get_next_batch_to_run()
        if batch is not None:
            with self.loop_prof.phase("launch"):
                launched = self.launch_batch(batch)
            self.process_batch_result(*launched)
        else:
            self.on_idle()
        self.last_batch = batch

    def _step_overlap(self) -> None:
        with self.loop_prof.phase("build"):
            batch = self.get_next_batch_to_run()
        if batch is not None:
            with self.loop_prof.phase("launch"):
                self.pending.append(self.launch_batch(batch))
        # The previous pass's results are processed while this one runs.
        if len(self.pending) > 1 or (batch is None and self.pending):
            self.process_batch_result(*self.pending.popleft())
        if batch is None and not self.pending:
            self.on_idle()
        self.last_batch = batch

    def _drain_pending(self) -> None:
        while self.pending:
            self.process_batch_result(*self.pending.popleft())

    @staticmethod
    def _history_sensitive(reqs: List[Req]) -> bool:
        """Penalties and grammars read every accepted token: such a batch samples only after the
        previous results are processed (its forward still runs meanwhile)."""
        for r in reqs:
            sp = r.sampling_params
            if r.grammar is not None or sp.frequency_penalty or sp.presence_penalty or sp.repetition_penalty != 1.0:
                return True
        return False

    def _is_fully_idle(self) -> bool:
        lb = self.last_batch
        unmerged = lb is not None and lb.forward_mode.is_extend() and any(not r.finished() for r in lb.reqs)
        return (
            not self.waiting_queue
            and self.running_batch.is_empty()
            and self.chunked_req is None
            and not self.pending
            and not self.grammar_queue_nonempty()
            and not unmerged
        )

    # ------------------------------------------------------------------ batch selection
    def get_next_batch_to_run(self) -> Optional[ScheduleBatch]:
        self._merge_last_prefill()
        self._finish_aborted_running()
        new_batch = self.get_new_batch_prefill()
        if new_batch is not None:
            return new_batch
        if self.running_batch.is_empty():
            return None
        return self.update_running_batch()

    def _merge_last_prefill(self) -> None:
        lb = self.last_batch
        if lb is None or not lb.forward_mode.is_extend():
            return
        exclude = [self.chunked_req] if self.chunked_req is not None else []
        lb.filter_batch(exclude=exclude)
        lb.decoding_reqs = []
        if lb.is_empty():
            return
        if self.running_batch.is_empty():
            self.running_batch = lb
        else:
            self.running_batch.merge(lb)

    def _finish_aborted_running(self) -> None:
        """Requests aborted while running finish here, through the normal release path."""
        victims = [r for r in self.running_batch.reqs if r.to_finish is not None and not r.finished()]
        if self.chunked_req is not None and self.chunked_req.to_finish is not None:
            victims.append(self.chunked_req)
            self.chunked_req = None
        for r in victims:
            r.finished_reason, r.to_finish = r.to_finish, None
            self.release_req(r)
        if victims:
            self.running_batch.filter_batch()
            self.stream_output(victims)

    def release_req(self, req: Req, is_insert: bool = True) -> None:
        release_kv_cache(req, self.tree_cache, self.req_to_token_pool, self.allocator, is_insert=is_insert)
        self.rid_to_req.pop(req.rid, None)

    def get_new_batch_prefill(self) -> Optional[ScheduleBatch]:
        if self.chunked_req is not None and self.chunked_req.finished():
            self.chunked_req = None
        if not self.waiting_queue and self.chunked_req is None:
            return None
        self.policy.calc_priority(self.waiting_queue)
        room = min(self.max_running_requests - len(self.running_batch.reqs), self.req_to_token_pool.available_size())
        if room <= 0 and self.waiting_queue and self._preempt_for_slot(self.waiting_queue[0]):
            room = 1
        if room <= 0 and self.chunked_req is None:
            return None
        running = self.running_batch.reqs
        mixed = len(running) if self._can_mix() else 0
        adder = PrefillAdder(
            self.tree_cache,
            self.allocator,
            running,
            self.new_token_ratio,
            self.max_prefill_tokens,
            self.chunked_prefill_size,
            mixed,
            self.page_size,
        )
        chunked = self.chunked_req
        if chunked is not None:
            # The previous chunk's slots join the tree (or stay the request's own, without radix) and
            # become this chunk's prefix.
            self.tree_cache.cache_unfinished_req(chunked, chunked=True)
            chunked.init_next_round_input()
            self.chunked_req = adder.add_chunked_req(chunked)
        in_batch = InBatchPrefixFilter(enabled=not self.server_args.disable_radix_cache)
        for req in list(self.waiting_queue):
            if len(adder.can_run_list) - (1 if chunked is not None else 0) >= room:
                break
            req.init_next_round_input(self.tree_cache)
            if in_batch.should_wait(req):
                continue  # it shares a long uncached prefix with a request in this batch: next round hits it
            res = adder.add_one_req(req, has_chunked_req=self.chunked_req is not None)
            if res == AddReqResult.CONTINUE or req in adder.can_run_list:
                in_batch.add(req)
            if res != AddReqResult.CONTINUE:
                if res == AddReqResult.NO_TOKEN and self._try_preempt(adder, req):
                    continue
                break
        if not adder.can_run_list:
            return None
        if adder.new_chunked_req is not None:
            self.chunked_req = adder.new_chunked_req
        admitted = {id(r) for r in adder.can_run_list}
        self.waiting_queue = [r for r in self.waiting_queue if id(r) not in admitted]
        for r in adder.can_run_list:
            r.is_retracted = False
            if r.queue_time_start is None:
                r.queue_time_start = time.monotonic()
        batch = ScheduleBatch(adder.can_run_list, self.req_to_token_pool, self.allocator, self.tree_cache, self.device)
        batch.prepare_for_extend()
        # Publish the prompts to the tree now, not when the pass returns: the next batch (built while
        # this one runs) can already match them, and the device computes this pass's KV first.
        for r in batch.reqs:
            self.tree_cache.cache_unfinished_req(r, chunked=r is self.chunked_req)
        self.log_prefill_stats(adder, batch)
        if mixed and not self.running_batch.is_empty() and not batch.return_logprob:
            self.running_batch.filter_batch()
            self._exclude_finishing(self.running_batch)
            if not self.running_batch.is_empty() and self.running_batch.check_decode_mem():
                batch.mix_with_running(self.running_batch)
                self.running_batch = self._empty_batch()
        return batch

    def _can_mix(self) -> bool:
        return self.server_args.enable_mixed_chunk and not self.running_batch.is_empty()

    def _try_preempt(self, adder: PrefillAdder, req: Req) -> bool:
        """Priority scheduling: push out much lower-priority running requests to fit `req` in the pool."""
        sa = self.server_args
        if not sa.enable_priority_scheduling:
            return False
        victims = adder.preempt_to_schedule(
            req, self.running_batch.reqs, sa.priority_scheduling_preemption_threshold, self.policy.priority_sign
        )
        if not victims:
            return False
        self._preempt(victims)
        adder.running_reqs = self.running_batch.reqs
        return adder.add_one_req(req, self.chunked_req is not None) == AddReqResult.CONTINUE

    def _preempt_for_slot(self, req: Req) -> bool:
        """Priority scheduling with every running slot taken: the least-preferred running request makes
        way if `req` beats it by more than the threshold."""
        sa = self.server_args
        if not sa.enable_priority_scheduling or not self.running_batch.reqs:
            return False
        sign = self.policy.priority_sign
        cands = [r for r in self.running_batch.reqs if not r.finished()]
        if not cands:
            return False
        worst = max(cands, key=lambda r: ((r.priority or 0) * sign, r.wait_queue_entry_time))
        if ((req.priority or 0) - (worst.priority or 0)) * -sign <= sa.priority_scheduling_preemption_threshold:
            return False
        self._preempt([worst])
        return True

    def _preempt(self, victims: List[Req]) -> None:
        """Release the victims' KV (their prefix stays cached) and queue them to run again later."""
        for v in victims:
            release_kv_cache(v, self.tree_cache, self.req_to_token_pool, self.allocator, is_insert=False)
            v.reset_for_retract()
            self.waiting_queue.append(v)
        keep = [i for i, r in enumerate(self.running_batch.reqs) if r not in victims]
        self.running_batch.filter_batch(keep_indices=keep)

    def _exclude_finishing(self, batch: ScheduleBatch) -> None:
        """Requests certain to finish by length when their in-flight token lands need no further step."""
        keep = [
            i
            for i, r in enumerate(batch.reqs)
            if not r.finished()
            and not (
                r.sampling_params.max_new_tokens is not None
                and len(r.output_ids) + r.inflight_tokens >= r.sampling_params.max_new_tokens
            )
        ]
        batch.filter_batch(keep_indices=keep)

    def update_running_batch(self) -> Optional[ScheduleBatch]:
        batch = self.running_batch
        batch.filter_batch()
        self._exclude_finishing(batch)
        if batch.is_empty():
            return None
        if not batch.check_decode_mem():
            old = self.new_token_ratio
            retracted, new_ratio, oom = batch.retract_decode(self.server_args)
            self.waiting_queue.extend(retracted)
            self.new_token_ratio = new_ratio
            self.log_retraction(len(retracted), old, new_ratio)
            for r in oom:
                r.finished_reason = FinishAbort(
                    "Out of memory even after retracting all other requests; the KV cache is too small for "
                    "this request.",
                    500,
                    "InternalServerError",
                )
                self.rid_to_req.pop(r.rid, None)
            if oom:
                self.stream_output(oom)
            if batch.is_empty():
                return None
        else:
            self.new_token_ratio = max(self.new_token_ratio - self.new_token_ratio_decay, self.min_new_token_ratio)
        batch.prepare_for_decode()
        return batch

    # ------------------------------------------------------------------ launch
    def launch_batch(self, batch: ScheduleBatch):
        with self.loop_prof.phase("l.fb"):
            fb = batch.to_forward_batch()
        n_ext = batch.batch_size() - len(batch.decoding_reqs) if batch.forward_mode.is_extend() else 0
        samples = [
            i >= n_ext or len(r.fill_ids) == len(r.origin_input_ids) + len(r.output_ids)
            for i, r in enumerate(batch.reqs)
        ]
        for r, s in zip(batch.reqs, samples):
            if s:
                r.inflight_tokens += 1
        top_nums = [r.top_logprobs_num if r.return_logprob else 0 for r in batch.reqs]
        future = self.future_map.alloc(batch.batch_size()) if self.future_map is not None else None
        delayed = self.overlap and self.pending and self._history_sensitive(batch.reqs)
        if delayed:
            # Grammars and penalties need every accepted token: the forward runs while the previous
            # results are processed, and the masks / penalty counts are built just before sampling.
            handle = self.launcher.launch_forward(fb)
            self._drain_pending()
        with self.loop_prof.phase("l.info"):
            info = SamplingBatchInfo.from_reqs(batch.reqs, self.model_config.vocab_size, self.device)
            self.attach_grammar_masks(batch, info)
        if delayed:
            pending = self.launcher.launch_sample(handle, info, batch.return_logprob, top_nums, future)
        else:
            pending = self.launcher.launch(fb, info, batch.return_logprob, top_nums, future)
        if future is not None:
            batch.output_ids = (-future).to(self.device)
        launched = LaunchedBatch(
            reqs=list(batch.reqs),
            samples=samples,
            forward_mode=batch.forward_mode,
            n_extend=n_ext,
            logprob_lens=list(fb.extend_logprob_lens_cpu or []),
            prefix_lens=list(batch.prefix_lens),
            extend_lens=list(batch.extend_lens),
            launch_time=time.perf_counter(),
        )
        self.forward_ct += 1
        return batch, launched, pending

    # ------------------------------------------------------------------ idle
    def on_idle(self) -> None:
        """No batch this iteration; the invariant check and ratio reset need a fully idle system."""
        if not self._is_fully_idle():
            return
        self.new_token_ratio = self.init_new_token_ratio
        if self.forward_ct:  # the warm-up request is done: later Triton compiles stall real requests
            jit_watch.mark_serving()
        self.loop_prof.report_if_busy()
        self.invariants.check_idle()
        self.maybe_log_idle()


def run_scheduler_process(server_args: ServerArgs, port_args: PortArgs, gpu_id: int, tp_rank: int, pipe_writer) -> None:
    from sglang.srt.utils.process import configure_logger, kill_self_when_parent_dies

    configure_logger(server_args, prefix=f" TP{tp_rank}" if server_args.tp_size > 1 else "")
    kill_self_when_parent_dies(cleanup_dir=port_args.ipc_dir)
    faulthandler.enable()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the launcher shuts us down
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the launcher shuts us down
    started = False
    try:
        sched = Scheduler(server_args, port_args, gpu_id, tp_rank)
        pipe_writer.send(("ready", sched.ready_info()))
        started = True
        sched.log_startup()
        sched.event_loop()
    except Exception as e:
        if isinstance(e, (ValueError, FileNotFoundError)) and not started:
            # A startup problem with a clear message (a bad config, a missing file): the launcher
            # prints it; the traceback only at --log-level debug.
            logger.debug("Scheduler failed to start", exc_info=e)
        else:
            logger.exception("Scheduler hit an exception")
        try:
            pipe_writer.send(("error", f"{type(e).__name__}: {e}" if started else str(e)))
        except Exception:  # noqa: BLE001
            pass
        sys.stdout.flush()
        os._exit(1)
