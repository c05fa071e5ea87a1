"""The scheduler's log lines (startup, prefill, decode, retraction), the numbers behind them, and the
gauges pushed to /metrics."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Dict, Optional

from sglang.srt.core.req import ReqStatus
from sglang.srt.managers.scheduler.new_token_ratio import NewTokenRatio
from sglang.srt.managers.scheduler.schedule_policy import PrefillAdder
from sglang.srt.managers.scheduler.scheduler_state import KVPools, LaunchedBatch, SchedulerState
from sglang.srt.metrics.scheduler_reporter import SchedulerMetricsReporter

logger = logging.getLogger("sglang.scheduler")

# The HiCache gauges and counters of /metrics (zero without HiCache).
_TIER_METRICS = (
    "hicache_host_total_tokens",
    "hicache_host_used_tokens",
    "hicache_host_usage",
    "hicache_load_back_bytes_total",
    "hicache_write_bytes_total",
    "hicache_load_back_seconds_total",
    "hicache_storage_read_blocks_total",
    "hicache_storage_write_blocks_total",
)


@dataclass(frozen=True)
class StartupNumbers:
    """What the startup line reports."""

    max_total_num_tokens: int
    chunked_prefill_size: Optional[int]
    max_prefill_tokens: int
    max_running_requests: int
    context_len: int
    device: str
    available_mem_gb: float
    cuda_graph: bool


class SchedulerStats:
    def __init__(
        self,
        state: SchedulerState,
        pools: KVPools,
        ratio: NewTokenRatio,
        numbers: StartupNumbers,
        decode_log_interval: int,
        tp_rank: int,
    ):
        self.state = state
        self.pools = pools
        self.ratio = ratio
        self.numbers = numbers
        self.decode_log_interval = decode_log_interval
        self.tp_rank = tp_rank
        self.last_gen_throughput = 0.0
        self.num_retracted_total = 0
        self.num_decode_steps = 0
        # Throughput counts busy time only: the gap across an idle spell is not decode time.
        self._decode_tokens_since_log = 0
        self._decode_busy_s = 0.0
        self._last_decode_end: Optional[float] = None
        self.total_prefill_input_tokens = 0
        self.total_prefill_cached_tokens = 0
        # Of the cached tokens: copied back from host memory, and of those, read from storage.
        self.total_prefill_host_tokens = 0
        self.total_prefill_storage_tokens = 0
        # Speculative decoding: verify passes (one per request per step) and tokens they emitted.
        self.spec_verify_ct = 0
        self.spec_emitted = 0
        self._spec_verify_since_log = 0
        self._spec_emitted_since_log = 0
        self.last_spec_accept_length = 0.0
        self.metrics: Optional[SchedulerMetricsReporter] = None

    # ------------------------------------------------------------------ numbers
    def cache_hit_rate(self) -> float:
        seen = self.total_prefill_input_tokens + self.total_prefill_cached_tokens
        return self.total_prefill_cached_tokens / seen if seen else 0.0

    def snapshot(self) -> Dict[str, float]:
        """The values behind metrics/names.SCHEDULER_METRICS."""
        total = self.pools.max_total_num_tokens
        waiting = self.state.waiting_queue
        return {
            "num_running_reqs": float(self.state.running_batch.batch_size()),
            "num_queue_reqs": float(len(waiting)),
            "num_used_tokens": float(self.pools.used_tokens()),
            "token_usage": self.pools.token_usage(),
            "cache_hit_rate": self.cache_hit_rate(),
            "gen_throughput": float(self.last_gen_throughput),
            "new_token_ratio": float(self.ratio.value),
            "num_retracted_reqs": float(sum(1 for r in waiting if r.status is ReqStatus.RETRACTED)),
            "num_retracted_requests_total": float(self.num_retracted_total),
            "max_total_num_tokens": float(total),
            **self._tier_numbers(),
            **self._spec_numbers(),
        }

    def _spec_numbers(self) -> Dict[str, float]:
        return {
            "spec_verify_ct_total": float(self.spec_verify_ct),
            "spec_emitted_tokens_total": float(self.spec_emitted),
            "spec_accept_length": float(self.last_spec_accept_length),
        }

    def _tier_numbers(self) -> Dict[str, float]:
        host, storage = self.total_prefill_host_tokens, self.total_prefill_storage_tokens
        out = {
            "cached_tokens_device_total": float(self.total_prefill_cached_tokens - host),
            "cached_tokens_host_total": float(host - storage),
            "cached_tokens_storage_total": float(storage),
        }
        tiers = self.pools.tree_cache.tier_stats()
        for key in _TIER_METRICS:
            out[key] = tiers.get(key, 0.0)
        return out

    def hicache_state(self) -> Dict[str, float]:
        """/server_info: the lower tiers' numbers (nothing without HiCache)."""
        tiers = self.pools.tree_cache.tier_stats()
        return {**tiers, **self._tier_numbers()} if tiers else {}

    # ------------------------------------------------------------------ lines
    def log_startup(self) -> None:
        n = self.numbers
        mem_name = "available_gpu_mem" if n.device == "cuda" else "available_cpu_mem"
        logger.info(
            "max_total_num_tokens=%d, chunked_prefill_size=%s, max_prefill_tokens=%d, "
            "max_running_requests=%d, context_len=%d, %s=%.2f GB",
            n.max_total_num_tokens,
            n.chunked_prefill_size or -1,
            n.max_prefill_tokens,
            n.max_running_requests,
            n.context_len,
            mem_name,
            n.available_mem_gb,
        )

    def log_prefill(self, adder: PrefillAdder) -> None:
        self.total_prefill_input_tokens += adder.log_input_tokens
        self.total_prefill_cached_tokens += adder.log_hit_tokens
        self.total_prefill_host_tokens += adder.log_host_hit_tokens
        self.total_prefill_storage_tokens += adder.log_storage_hit_tokens
        if self.metrics is not None:
            self.metrics.maybe_push()
        if self.tp_rank != 0:
            return
        logger.info(
            "Prefill batch, #new-seq: %d, #new-token: %d, #cached-token: %d, token usage: %.2f, "
            "#running-req: %d, #queue-req: %d, cache hit rate: %.2f",
            len(adder.can_run_list),
            adder.log_input_tokens,
            adder.log_hit_tokens,
            self.pools.token_usage(),
            self.state.running_batch.batch_size(),
            len(self.state.waiting_queue),
            self.cache_hit_rate(),
        )

    def log_retraction(self, n: int, old_ratio: float, new_ratio: float) -> None:
        self.num_retracted_total += n
        if self.metrics is not None:
            self.metrics.push_now()  # rare and worth seeing at once
        logger.warning(
            "KV cache pool is full. Retract requests. #retracted_reqs: %d, #new_token_ratio: %.4f -> %.4f",
            n,
            old_ratio,
            new_ratio,
        )

    def record_verify(self, launched: LaunchedBatch, out) -> None:
        """A TARGET_VERIFY step: a decode step that emitted launched.num_tokens tokens."""
        n = len(launched.reqs)
        self.spec_verify_ct += n
        self.spec_emitted += launched.num_tokens
        self._spec_verify_since_log += n
        self._spec_emitted_since_log += launched.num_tokens
        self.record_forward(launched)

    def record_forward(self, launched: LaunchedBatch) -> None:
        if self.metrics is not None:
            self.metrics.maybe_push()  # rate-limited: keeps gauges fresh between decode logs
        verify = launched.forward_mode.is_target_verify()
        if not launched.forward_mode.is_decode() and not verify:
            return
        self.num_decode_steps += 1
        now = time.perf_counter()
        if self._last_decode_end is not None:  # the first step after idle has no known start
            self._decode_busy_s += now - self._last_decode_end
            self._decode_tokens_since_log += launched.num_tokens if verify else len(launched.reqs)
        self._last_decode_end = now
        if self.num_decode_steps % self.decode_log_interval:
            return
        if self._decode_busy_s > 0:
            self.last_gen_throughput = self._decode_tokens_since_log / self._decode_busy_s
        self._decode_tokens_since_log, self._decode_busy_s = 0, 0.0
        spec = ""
        if self._spec_verify_since_log:
            self.last_spec_accept_length = (
                self._spec_emitted_since_log / self._spec_verify_since_log
            )
            self._spec_verify_since_log = self._spec_emitted_since_log = 0
            spec = f", accept len: {self.last_spec_accept_length:.2f}"
        if self.metrics is not None:
            self.metrics.maybe_push()
        if self.tp_rank != 0:
            return
        logger.info(
            "Decode batch, #running-req: %d, #token: %d, token usage: %.2f, cuda graph: %s, "
            "gen throughput (token/s): %.2f, #queue-req: %d%s",
            len(launched.reqs),  # the batch this step decoded (some may have finished in it)
            self.pools.used_tokens(),
            self.pools.token_usage(),
            self.numbers.cuda_graph,
            self.last_gen_throughput,
            len(self.state.waiting_queue),
            spec,
        )

    def on_idle(self) -> None:
        self._last_decode_end = None
        if self.metrics is not None:
            self.metrics.push_if_changed()
