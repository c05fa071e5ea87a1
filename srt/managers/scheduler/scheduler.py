"""The Scheduler process: one per TP rank, owning the device, the pools and the radix tree.

Each loop iteration: receive requests, pick the next batch (a prefill if one can be formed, else a
decode step of the running batch), launch it, and process the results of the previous launch
(overlap loop) or of this one (plain loop). The parts, each in its own file:

- scheduler_input: intake of requests, aborts and control messages (SchedulerIntake)
- prefill_builder + schedule_policy: queue order and admission on the token budget
- retraction + new_token_ratio: the decode step, retraction when the pool is full
- overlap: launching passes ahead (FutureMap) and their typed host results
- result_processor: appending tokens, finishing, releasing KV; output_streamer: to the detokenizer
- scheduler_stats: log lines and gauges; invariant_checker: the idle KV invariant
- scheduler_state: the pools, queues and in-flight passes the parts share
"""

from __future__ import annotations

import faulthandler
import logging
import os
import random
import signal
import sys
import time
from typing import Any, List, Optional

import torch
import zmq

from sglang.srt.configs.model_config import ModelConfig
from sglang.srt.core.input_limits import InputLimits
from sglang.srt.core.io_struct.ipc import make_socket, send_obj
from sglang.srt.core.io_struct.to_dp_controller import DPLoad
from sglang.srt.core.io_struct.to_launcher import SchedulerReady
from sglang.srt.core.io_struct.to_scheduler import (
    FlushCacheReqInput,
    ProfileReq,
)
from sglang.srt.core.io_struct.to_tokenizer import (
    FlushCacheReqOutput,
    GetInternalStateReqOutput,
)
from sglang.srt.core.req import Req
from sglang.srt.distributed.init import init_distributed
from sglang.srt.distributed.parallel_state import tp_min_int
from sglang.srt.managers.scheduler.generation_control import MESSAGES as GENERATION_MESSAGES
from sglang.srt.managers.scheduler.generation_control import GenerationControl
from sglang.srt.managers.scheduler.grammar_queue import GrammarQueue
from sglang.srt.managers.scheduler.invariant_checker import InvariantChecker
from sglang.srt.managers.scheduler.loop_profiler import LoopProfiler
from sglang.srt.managers.scheduler.new_token_ratio import NewTokenRatio
from sglang.srt.managers.scheduler.output_streamer import OutputStreamer
from sglang.srt.managers.scheduler.overlap import BatchLauncher, FutureMap
from sglang.srt.managers.scheduler.prefill_builder import PrefillBuilder, PrefillConfig
from sglang.srt.managers.scheduler.priority import PriorityOrder
from sglang.srt.managers.scheduler.result_processor import ResultProcessor
from sglang.srt.managers.scheduler.retraction import DecodeUpdater
from sglang.srt.managers.scheduler.schedule_batch import ScheduleBatch
from sglang.srt.managers.scheduler.schedule_policy import SchedulePolicy
from sglang.srt.managers.scheduler.scheduler_input import IntakeConfig, SchedulerIntake
from sglang.srt.managers.scheduler.scheduler_state import KVPools, LaunchedBatch, SchedulerState
from sglang.srt.managers.scheduler.scheduler_stats import SchedulerStats, StartupNumbers
from sglang.srt.managers.scheduler.torch_profiler import PassProfiler
from sglang.srt.managers.scheduler.weight_updates import MESSAGES as WEIGHT_MESSAGES
from sglang.srt.managers.scheduler.weight_updates import WeightUpdates
from sglang.srt.metrics.scheduler_reporter import SchedulerMetricsReporter
from sglang.srt.model_executor.model_runner import ModelRunner, default_chunked_prefill_size
from sglang.srt.sampling.sampling_batch_info import SamplingBatchInfo
from sglang.srt.server_args import PortArgs, ServerArgs
from sglang.srt.utils import jit_watch

logger = logging.getLogger(__name__)

BACKGROUND_POLL_MS = 5


class SchedulerSockets:
    """Rank 0's sockets (other ranks, and a scheduler driven in-process, have none)."""

    def __init__(self, sa: ServerArgs, port_args: Optional[PortArgs], tp_rank: int):
        self.ctx = zmq.Context(2)
        self.recv_from_tokenizer = self.send_to_detokenizer = self.send_to_tokenizer = (
            self.send_load
        ) = None
        if tp_rank != 0 or port_args is None:
            return
        self.recv_from_tokenizer = make_socket(
            self.ctx, zmq.PULL, port_args.scheduler_input_ipc_name, True
        )
        # Without a tokenizer there is no text to make: outputs go straight to the HTTP process.
        out = (
            port_args.tokenizer_ipc_name
            if sa.skip_tokenizer_init
            else port_args.detokenizer_ipc_name
        )
        self.send_to_detokenizer = make_socket(self.ctx, zmq.PUSH, out, False)
        self.send_to_tokenizer = make_socket(
            self.ctx, zmq.PUSH, port_args.tokenizer_ipc_name, False
        )
        if port_args.dp_load_ipc_name:
            self.send_load = make_socket(self.ctx, zmq.PUSH, port_args.dp_load_ipc_name, False)


class Scheduler:
    def __init__(
        self,
        server_args: ServerArgs,
        port_args: Optional[PortArgs],
        gpu_id: int = 0,
        tp_rank: int = 0,
    ):
        """port_args None: no sockets (the scheduler is driven in-process, as the tests do)."""
        sa = self.server_args = server_args
        self.tp_rank = tp_rank
        self.device = sa.resolved_device()
        self.dp_rank = port_args.dp_rank if port_args is not None else 0
        self.model_config = ModelConfig.from_path(sa.model_path, sa.context_length)
        self.tokenizer = self._load_tokenizer()
        self.eos_token_ids = self._eos_token_ids()
        self.sockets = SchedulerSockets(sa, port_args, tp_rank)
        seed = sa.random_seed if sa.random_seed is not None else 0
        random.seed(seed)
        torch.manual_seed(seed)
        init_distributed(sa, port_args.nccl_port if port_args else 0, tp_rank, self.device)
        self.model_runner = ModelRunner.from_server_args(
            self.model_config, sa, self.device, gpu_id, show_progress=tp_rank == 0
        )
        self._agree_pool_sizes()
        self.pools = self._make_pools()
        self.limits = InputLimits.compute(
            self.model_config.context_len, self.pools.max_total_num_tokens
        )
        self.chunked_prefill_size = self._chunked_prefill_size()
        self.state = SchedulerState(running_batch=self.pools.new_batch([]))
        self._build_parts(seed)

    # ------------------------------------------------------------------ construction
    def _load_tokenizer(self) -> Any:
        sa = self.server_args
        if sa.skip_tokenizer_init:
            return None
        from sglang.srt.utils.hf_tokenizer import get_tokenizer

        return get_tokenizer(sa.tokenizer_path or sa.model_path, sa.trust_remote_code)

    def _eos_token_ids(self) -> set:
        eos = set(self.model_config.eos_token_ids)
        if self.tokenizer is not None and self.tokenizer.eos_token_id is not None:
            eos.add(self.tokenizer.eos_token_id)
        return eos

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

    def _make_pools(self) -> KVPools:
        mr, sa = self.model_runner, self.server_args
        if sa.disable_radix_cache:
            from sglang.srt.mem_cache.chunk_cache import ChunkCache

            tree = ChunkCache(
                mr.req_to_token_pool, mr.token_to_kv_pool_allocator, page_size=sa.page_size
            )
        elif sa.enable_hierarchical_cache:
            tree = self._make_hicache()
        else:
            from sglang.srt.mem_cache.radix_cache import RadixCache

            tree = RadixCache(
                mr.req_to_token_pool,
                mr.token_to_kv_pool_allocator,
                page_size=sa.page_size,
                eviction_policy=sa.radix_eviction_policy,
            )
        return KVPools(
            mr.req_to_token_pool,
            mr.token_to_kv_pool_allocator,
            tree,
            mr.max_total_num_tokens,
            sa.page_size,
            self.device,
        )

    def _make_hicache(self):
        from sglang.srt.configs.sections import HiCacheSection
        from sglang.srt.mem_cache.hicache_factory import make_hiradix_cache

        mr, sa = self.model_runner, self.server_args
        return make_hiradix_cache(
            HiCacheSection.of(sa),
            mr.req_to_token_pool,
            mr.token_to_kv_pool_allocator,
            mr.token_to_kv_pool,
            mr.max_total_num_tokens,
            sa.page_size,
            sa.radix_eviction_policy,
            model_fingerprint=self._model_fingerprint(),
        )

    def _model_fingerprint(self) -> str:
        """What KV read back from storage must have been computed by (a shared directory may hold
        several models' blocks)."""
        cfg, mr = self.model_config, self.model_runner
        return "|".join(
            str(x)
            for x in (
                self.server_args.model_path,
                cfg.num_hidden_layers,
                cfg.head_dim,
                cfg.kv_heads_per_rank(mr.tp_size),
                mr.kv_dtype,
                self.tp_rank,
                mr.tp_size,
            )
        )

    def _chunked_prefill_size(self) -> Optional[int]:
        sa = self.server_args
        if sa.chunked_prefill_size is None:
            mem_gb = None
            if self.device == "cuda":
                mem_gb = torch.cuda.get_device_properties(self.model_runner.gpu_id).total_memory / (
                    1 << 30
                )
            chunk = default_chunked_prefill_size(mem_gb)
        else:
            chunk = sa.chunked_prefill_size
        if chunk is None or chunk <= 0:
            return None
        if sa.page_size > 1:
            chunk = max(chunk // sa.page_size, 1) * sa.page_size
        return chunk

    def _build_parts(self, seed: int) -> None:
        sa, mr, state, pools = self.server_args, self.model_runner, self.state, self.pools
        self.max_running_requests = mr.max_running_requests
        self.ratio = NewTokenRatio(sa.schedule_conservativeness)
        self.order = PriorityOrder(sa.schedule_low_priority_values_first)
        self.policy = SchedulePolicy(
            sa.schedule_policy,
            pools.tree_cache,
            not sa.disable_radix_cache,
            self.order if sa.enable_priority_scheduling else None,
        )
        numbers = StartupNumbers(
            max_total_num_tokens=pools.max_total_num_tokens,
            chunked_prefill_size=self.chunked_prefill_size,
            max_prefill_tokens=sa.max_prefill_tokens,
            max_running_requests=self.max_running_requests,
            context_len=self.model_config.context_len,
            device=self.device,
            available_mem_gb=mr.sizes.available_mem_gb,
            cuda_graph=mr.graph_runner is not None,
        )
        self.stats = SchedulerStats(
            state, pools, self.ratio, numbers, sa.decode_log_interval, self.tp_rank
        )
        if sa.enable_metrics and self.sockets.send_to_tokenizer is not None:
            # /metrics lives in the HTTP process; rank 0 pushes its gauges there.
            self.stats.metrics = SchedulerMetricsReporter(
                self.stats.snapshot, self.sockets.send_to_tokenizer, sa.ipc_serializer
            )
        self.streamer = OutputStreamer(
            self.sockets.send_to_detokenizer, sa.ipc_serializer, self.tokenizer, sa.stream_interval
        )
        self.grammar = GrammarQueue(
            self._grammar_manager(), self.model_config.vocab_size, self.device
        )
        self.intake = SchedulerIntake(
            state,
            pools,
            self.limits,
            self.grammar,
            self.streamer,
            self.order,
            IntakeConfig(
                sa.max_queued_requests,
                sa.request_waiting_timeout,
                sa.enable_priority_scheduling,
                sa.ipc_serializer,
                self.tp_rank,
            ),
            self.eos_token_ids,
            self.model_config.vocab_size,
            seed,
            self.sockets.recv_from_tokenizer,
            self.sockets.send_to_tokenizer,
        )
        self.intake.control = self._answer_control
        self.prefill = PrefillBuilder(
            state,
            pools,
            self.policy,
            self.order,
            self.stats,
            PrefillConfig(
                max_running_requests=self.max_running_requests,
                max_prefill_tokens=sa.max_prefill_tokens,
                chunked_prefill_size=self.chunked_prefill_size,
                radix_cache=not sa.disable_radix_cache,
                mixed_chunk=sa.enable_mixed_chunk,
                priority_scheduling=sa.enable_priority_scheduling,
                preemption_threshold=sa.priority_scheduling_preemption_threshold,
                cache_report=sa.enable_cache_report,
                draft_reserve_per_req=(
                    sa.speculative_num_draft_tokens - 1 if sa.speculative_algorithm else 0
                ),
            ),
        )
        self.decode = DecodeUpdater(state, self.ratio, self.stats, self.streamer)
        self.spec = self._spec_decoder()
        self.overlap = not sa.disable_overlap_schedule
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
        self.loop_prof = LoopProfiler()
        self.launcher = BatchLauncher(mr, self.future_map, self.overlap, self.loop_prof)
        self.kv_transfer = getattr(pools.tree_cache, "transfer", None)
        if self.kv_transfer is not None:
            # On the CPU overlap loop, copies between the tiers queue on the forward worker.
            self.kv_transfer.set_executor(self.launcher.device_work_executor())
        self.results = ResultProcessor(
            state, pools, self.streamer, self.stats, self.tokenizer, self.overlap, self.loop_prof
        )
        if self.spec is not None:
            self.results.verify_handler = self.spec.process
        self.invariants = InvariantChecker(pools, state, sa.strict_memory_check)
        self.streamer.report_cache_tiers = sa.enable_hierarchical_cache
        self._last_load: Optional[tuple] = None
        self.forward_ct = 0
        rank = f"TP-{self.tp_rank}" + (f"-DP-{self.dp_rank}" if sa.dp_size > 1 else "")
        self.torch_prof = PassProfiler(rank)
        self.generation = GenerationControl(self)
        self.weights = WeightUpdates(self)

    def _spec_decoder(self):
        from sglang.srt.configs.sections import SpecSection

        spec = SpecSection.of(self.server_args)
        if spec is None:
            return None
        from sglang.srt.managers.scheduler.spec_decode import SpecDecoder
        from sglang.srt.speculative.proposers import make_proposer

        proposer = make_proposer(
            spec, self.model_runner, self.server_args, self.chunked_prefill_size
        )
        if self.model_runner.model_section.defer_cuda_graph:
            # Verify passes keep the hidden states the proposer reads (EAGLE): graphs that return them.
            self.model_runner.init_cuda_graphs(capture_hidden=proposer.capture)
        self.streamer.report_spec = True
        return SpecDecoder(
            self.state,
            self.pools,
            self.decode,
            spec,
            proposer,
            self.model_runner,
            self.grammar,
            self.model_config.context_len,
        )

    def _grammar_manager(self):
        if self.server_args.grammar_backend == "none" or self.tokenizer is None:
            return None
        from sglang.srt.constrained.factory import make_grammar_backend
        from sglang.srt.constrained.grammar_manager import GrammarManager

        backend = make_grammar_backend(
            self.server_args,
            self.tokenizer,
            self.model_config.vocab_size,
            sorted(self.eos_token_ids),
        )
        return GrammarManager(backend)

    def ready_info(self) -> SchedulerReady:
        return SchedulerReady(
            max_total_num_tokens=self.pools.max_total_num_tokens,
            max_running_requests=self.max_running_requests,
            max_req_input_len=self.limits.max_req_input_len,
            context_len=self.model_config.context_len,
            chunked_prefill_size=self.chunked_prefill_size or -1,
            page_size=self.pools.page_size,
            vocab_size=self.model_config.vocab_size,
            available_mem_gb=self.model_runner.sizes.available_mem_gb,
            device=self.device,
        )

    # ------------------------------------------------------------------ the loop
    def event_loop(self) -> None:
        while True:
            with self.loop_prof.phase("recv"):
                if self._only_background_work():
                    # Waiting on a storage prefetch or copy: sleep briefly instead of spinning.
                    self.intake.recv_and_process_requests(block=True, wait_ms=BACKGROUND_POLL_MS)
                else:
                    # Paused or released: nothing runs until a message arrives (continue,
                    # resume, abort, requests).
                    idle = self._is_fully_idle() or self.generation.holding()
                    self.intake.recv_and_process_requests(block=idle)
            self.step()
            if self.sockets.send_load is not None:
                self._report_load()

    def step(self) -> None:
        """One iteration after intake: build a batch, launch it, process results (the previous pass's
        under the overlap loop, this one's under the plain loop)."""
        tree = self.pools.tree_cache
        tree.poll()
        with self.loop_prof.phase("build"):
            batch = self.get_next_batch_to_run()
        if batch is not None:
            with self.loop_prof.phase("launch"):
                self.state.in_flight.append(self.launch_batch(batch))
            tree.on_batch_launched()
            self.torch_prof.on_pass()
        in_flight = self.state.in_flight
        keep = 1 if self.overlap and batch is not None else 0
        while len(in_flight) > keep:
            self.results.process_batch_result(in_flight.popleft())
        if self.spec is not None:
            self.spec.flush_outputs(self.results)
        if batch is None and not in_flight:
            self.on_idle()
        self.state.last_batch = batch

    def get_next_batch_to_run(self) -> Optional[ScheduleBatch]:
        self._merge_last_prefill()
        self.finish_aborted_running()
        if self.weights.ready():
            self.weights.apply()
        if self.generation.holding():
            return None
        batch = self.prefill.build(self.ratio.value, admit=not self.weights.waiting())
        if batch is not None:
            return batch
        if self.state.running_batch.is_empty():
            return None
        if self.spec is not None:
            # Drafts are planned from every token so far: the passes in flight finish first.
            self.process_in_flight()
            return self.spec.update_running_batch()
        return self.decode.update_running_batch()

    def process_in_flight(self) -> None:
        while self.state.in_flight:
            self.results.process_batch_result(self.state.in_flight.popleft())

    def launch_batch(self, batch: ScheduleBatch) -> LaunchedBatch:
        if batch.forward_mode.is_target_verify():
            self.forward_ct += 1
            return self.spec.launch(batch, self.launcher.device_work_executor())
        with self.loop_prof.phase("l.fb"):
            fb = batch.to_forward_batch()
            if self.kv_transfer is not None:
                fb.kv_layer_waits = self.kv_transfer.take_layer_waits()
        n_ext = (
            batch.batch_size() - len(batch.decoding_reqs) if batch.forward_mode.is_extend() else 0
        )
        samples = [
            i >= n_ext or len(r.fill_ids) == len(r.origin_input_ids) + len(r.output_ids)
            for i, r in enumerate(batch.reqs)
        ]
        for r, s in zip(batch.reqs, samples):
            if s:
                r.inflight_tokens += 1
        top_nums = [r.top_logprobs_num if r.return_logprob else 0 for r in batch.reqs]
        future = self.future_map.alloc(batch.batch_size()) if self.future_map is not None else None
        delayed = self.overlap and self.state.in_flight and _history_sensitive(batch.reqs)
        capture = self.spec.proposer.capture if self.spec is not None else None
        if capture is not None and batch.forward_mode.is_extend():
            # EAGLE: the draft head reads this prefill's hidden states (on the CPU overlap loop the
            # forward runs on the worker: its result is waited for).
            fb.capture_hidden = capture
            handle = self.launcher.launch_forward(fb)
            if handle.logits is None:
                handle.logits = handle.future.result()
            self.spec.proposer.on_target_extend(
                batch.reqs,
                fb.extend_prefix_lens_cpu,
                fb.extend_seq_lens_cpu,
                handle.logits.hidden_states,
            )
            delayed = True
        elif delayed:
            # Grammars and penalties need every accepted token: the forward runs while the previous
            # results are processed, and the masks / penalty counts are built just before sampling.
            handle = self.launcher.launch_forward(fb)
            self.process_in_flight()
        with self.loop_prof.phase("l.info"):
            vocab = self.model_config.vocab_size
            if batch.forward_mode.is_decode():
                info = SamplingBatchInfo.for_decode(batch.reqs, vocab, self.device, batch.last_info)
            else:
                info = SamplingBatchInfo.from_reqs(batch.reqs, vocab, self.device)
            batch.last_info = info
            self.grammar.attach_masks(batch, info)
        if delayed:
            pending = self.launcher.launch_sample(
                handle, info, batch.return_logprob, top_nums, future
            )
        else:
            pending = self.launcher.launch(fb, info, batch.return_logprob, top_nums, future)
        if future is not None:
            batch.output_ids = (-future).to(self.device)
        self.forward_ct += 1
        return LaunchedBatch(
            batch=batch,
            pending=pending,
            reqs=list(batch.reqs),
            samples=samples,
            forward_mode=batch.forward_mode,
            n_extend=n_ext,
            logprob_lens=list(fb.extend_logprob_lens_cpu or []),
            launch_time=time.perf_counter(),
        )

    # ------------------------------------------------------------------ between passes
    def _merge_last_prefill(self) -> None:
        """The last prefill's requests (all but an unfinished chunk) join the running batch."""
        state = self.state
        lb = state.last_batch
        if lb is None or not lb.forward_mode.is_extend():
            return
        lb.filter_batch(exclude=[state.chunked_req] if state.chunked_req is not None else [])
        lb.decoding_reqs = []
        if lb.is_empty():
            return
        if state.running_batch.is_empty():
            state.running_batch = lb
        else:
            state.running_batch.merge(lb)

    def settle_passes(self) -> None:
        """Every launched pass processed and the last prefill merged: a state generation can stop
        in (a pause)."""
        self._merge_last_prefill()
        self.state.last_batch = None  # merged: the next iteration must not merge it again
        self.process_in_flight()
        if self.spec is not None:
            self.spec.flush_outputs(self.results)

    def finish_aborted_running(self) -> None:
        """Requests aborted while running finish here, through the normal release path."""
        state = self.state
        victims = [r for r in state.running_batch.reqs if r.aborting()]
        if state.chunked_req is not None and state.chunked_req.aborting():
            victims.append(state.chunked_req)
            state.chunked_req = None
        for r in victims:
            r.finish(r.abort_reason)
            self.results.release_finished(r)
        if victims:
            state.running_batch.filter_batch()
            self.streamer.stream_output(victims)

    def _is_fully_idle(self) -> bool:
        return not self.state.has_work() and not self.grammar.num_waiting()

    def _only_background_work(self) -> bool:
        """The last pass ran nothing and nothing is in flight, yet a lower tier is busy."""
        st = self.state
        return (
            st.last_batch is None
            and not st.in_flight
            and st.running_batch.is_empty()
            and self.pools.tree_cache.busy()
        )

    def _is_settled(self) -> bool:
        """Idle, and no background copy (HiCache) still holds slots."""
        return self._is_fully_idle() and not self.pools.tree_cache.busy()

    def on_idle(self) -> None:
        """No batch this iteration; the invariant check and ratio reset need a fully idle system."""
        if not self._is_settled():
            return
        self.ratio.reset()
        if (
            self.forward_ct
        ):  # the warm-up request is done: later Triton compiles stall real requests
            jit_watch.mark_serving()
        self.loop_prof.report_if_busy()
        self.launcher.trace.flush()
        self.invariants.check_idle()
        self.stats.on_idle()

    def _report_load(self) -> None:
        """Data parallelism: tell the controller how many tokens this replica holds (when it changes)."""
        used, n = self.pools.used_tokens(), len(self.state.rid_to_req)
        if (used, n) != self._last_load:
            self._last_load = (used, n)
            send_obj(
                self.sockets.send_load,
                DPLoad(self.dp_rank, used, n),
                self.server_args.ipc_serializer,
            )

    # ------------------------------------------------------------------ control
    def _answer_control(self, msg: Any) -> Any:
        if isinstance(msg, FlushCacheReqInput):
            return FlushCacheReqOutput(*self.flush_cache())
        if isinstance(msg, GENERATION_MESSAGES):
            return self.generation.answer(msg)
        if isinstance(msg, WEIGHT_MESSAGES):
            return self.weights.answer(msg)
        if isinstance(msg, ProfileReq):
            return self.torch_prof.handle(msg)
        return GetInternalStateReqOutput(self.internal_state())

    def flush_cache(self) -> tuple:
        if not self._is_fully_idle():
            return False, "Cache not flushed: there are running or waiting requests."
        self.pools.clear_all()
        return True, "Cache flushed."

    def internal_state(self) -> dict:
        # Asking for the state also writes the step trace's finished passes (a client reading the
        # trace after its workload asks first, so the file is complete).
        self.launcher.trace.flush()
        pools, state, stats = self.pools, self.state, self.stats
        return {
            "dp_rank": self.dp_rank,
            "max_total_num_tokens": pools.max_total_num_tokens,
            "max_running_requests": self.max_running_requests,
            "context_len": self.model_config.context_len,
            "chunked_prefill_size": self.chunked_prefill_size,
            "page_size": pools.page_size,
            "weight_bytes": self.model_runner.weight_bytes(),
            "quantization": self.model_runner.quantization_name(),
            "num_running_reqs": state.running_batch.batch_size(),
            "num_waiting_reqs": len(state.waiting_queue),
            "paused": self.generation.paused,
            "memory_released": sorted(self.generation.memory.released),
            "token_usage": pools.token_usage(),
            "num_used_tokens": pools.used_tokens(),
            "last_gen_throughput": stats.last_gen_throughput,
            "cache_hit_rate": stats.cache_hit_rate(),
            "num_retractions_total": stats.num_retracted_total,
            "new_token_ratio": self.ratio.value,
            "available_tokens": pools.allocator.available_size(),
            "evictable_tokens": pools.tree_cache.evictable_size(),
            "protected_tokens": pools.tree_cache.protected_size(),
            "prefill_input_tokens_total": stats.total_prefill_input_tokens,
            "prefill_cached_tokens_total": stats.total_prefill_cached_tokens,
            "num_decode_steps": stats.num_decode_steps,
            **stats.hicache_state(),
        }


def _history_sensitive(reqs: List[Req]) -> bool:
    """Penalties and grammars read every accepted token: such a batch samples only after the previous
    results are processed (its forward still runs meanwhile)."""
    for r in reqs:
        sp = r.sampling_params
        if (
            r.grammar is not None
            or sp.frequency_penalty
            or sp.presence_penalty
            or sp.repetition_penalty != 1.0
        ):
            return True
    return False


def run_scheduler_process(
    server_args: ServerArgs, port_args: PortArgs, gpu_id: int, tp_rank: int, pipe_writer
) -> None:
    from sglang.srt.utils.process import configure_logger, kill_self_when_parent_dies

    configure_logger(
        server_args.log_level, prefix=f" TP{tp_rank}" if server_args.tp_size > 1 else ""
    )
    kill_self_when_parent_dies(cleanup_dir=port_args.ipc_dir)
    faulthandler.enable()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the launcher shuts us down
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the launcher shuts us down
    started = False
    try:
        sched = Scheduler(server_args, port_args, gpu_id, tp_rank)
        pipe_writer.send(("ready", sched.ready_info()))
        started = True
        sched.stats.log_startup()
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
