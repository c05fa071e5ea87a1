"""The scheduler's log lines (startup, prefill, decode, retraction) and the numbers behind them."""

from __future__ import annotations

import logging
import time
from typing import Optional

logger = logging.getLogger("sglang.scheduler")


class SchedulerStatsMixin:
    def _init_stats(self) -> None:
        self.last_gen_throughput = 0.0
        self.num_retracted_total = 0
        self.num_decode_steps = 0
        # Throughput counts busy time only: the gap across an idle spell is not decode time.
        self._decode_tokens_since_log = 0
        self._decode_busy_s = 0.0
        self._last_decode_end: Optional[float] = None
        self.total_prefill_input_tokens = 0
        self.total_prefill_cached_tokens = 0
        self.metrics = None
        # /metrics lives in the HTTP process; rank 0 pushes its gauges there (other ranks have no socket).
        if self.server_args.enable_metrics and self.send_to_tokenizer is not None:
            from sglang.srt.metrics.scheduler_reporter import SchedulerMetricsReporter

            self.metrics = SchedulerMetricsReporter(self, self.send_to_tokenizer, self.server_args.ipc_serializer)

    # ------------------------------------------------------------------ numbers
    def token_usage(self) -> float:
        total = self.max_total_num_tokens
        used = total - self.allocator.available_size() - self.tree_cache.evictable_size()
        return used / total if total else 0.0

    def cache_hit_rate(self) -> float:
        seen = self.total_prefill_input_tokens + self.total_prefill_cached_tokens
        return self.total_prefill_cached_tokens / seen if seen else 0.0

    # ------------------------------------------------------------------ lines
    def log_startup(self) -> None:
        mem_name = "available_gpu_mem" if self.device == "cuda" else "available_cpu_mem"
        logger.info(
            "max_total_num_tokens=%d, chunked_prefill_size=%s, max_prefill_tokens=%d, max_running_requests=%d, "
            "context_len=%d, %s=%.2f GB",
            self.max_total_num_tokens,
            self.chunked_prefill_size or -1,
            self.max_prefill_tokens,
            self.max_running_requests,
            self.context_len,
            mem_name,
            self.model_runner.sizes.available_mem_gb,
        )

    def log_prefill_stats(self, adder, batch) -> None:
        self.total_prefill_input_tokens += adder.log_input_tokens
        self.total_prefill_cached_tokens += adder.log_hit_tokens
        if self.metrics is not None:
            self.metrics.on_prefill(adder.log_input_tokens, adder.log_hit_tokens)
        if self.tp_rank != 0:
            return
        logger.info(
            "Prefill batch, #new-seq: %d, #new-token: %d, #cached-token: %d, token usage: %.2f, "
            "#running-req: %d, #queue-req: %d, cache hit rate: %.2f",
            len(adder.can_run_list),
            adder.log_input_tokens,
            adder.log_hit_tokens,
            self.token_usage(),
            self.running_batch.batch_size(),
            len(self.waiting_queue),
            self.cache_hit_rate(),
        )

    def log_retraction(self, n: int, old_ratio: float, new_ratio: float) -> None:
        self.num_retracted_total += n
        if self.metrics is not None:
            self.metrics.on_retract(n)
        logger.warning(
            "KV cache pool is full. Retract requests. #retracted_reqs: %d, #new_token_ratio: %.4f -> %.4f",
            n,
            old_ratio,
            new_ratio,
        )

    def record_forward(self, launched, result) -> None:
        if self.metrics is not None:
            self.metrics.on_forward(self)  # rate-limited inside: keeps gauges fresh between decode logs
        if not launched.forward_mode.is_decode():
            return
        self.num_decode_steps += 1
        now = time.perf_counter()
        if self._last_decode_end is not None:  # the first step after idle has no known start: not counted
            self._decode_busy_s += now - self._last_decode_end
            self._decode_tokens_since_log += len(launched.reqs)
        self._last_decode_end = now
        if self.num_decode_steps % self.server_args.decode_log_interval:
            return
        if self._decode_busy_s > 0:
            self.last_gen_throughput = self._decode_tokens_since_log / self._decode_busy_s
        self._decode_tokens_since_log, self._decode_busy_s = 0, 0.0
        if self.metrics is not None:
            self.metrics.on_decode_log(self)
        if self.tp_rank != 0:
            return
        num_tokens = self.max_total_num_tokens - self.allocator.available_size() - self.tree_cache.evictable_size()
        logger.info(
            "Decode batch, #running-req: %d, #token: %d, token usage: %.2f, cuda graph: %s, "
            "gen throughput (token/s): %.2f, #queue-req: %d",
            len(launched.reqs),  # the batch this step decoded (some may have finished in it)
            num_tokens,
            self.token_usage(),
            self.model_runner.graph_runner is not None,
            self.last_gen_throughput,
            len(self.waiting_queue),
        )

    def maybe_log_idle(self) -> None:
        self._last_decode_end = None
        if self.metrics is not None:
            self.metrics.on_idle(self)
