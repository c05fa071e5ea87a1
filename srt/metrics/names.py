"""The /metrics names, and the table that maps scheduler snapshot keys onto them.

Both processes read SCHEDULER_METRICS: the scheduler fills a dict with exactly these keys, the HTTP
process turns each key into the named gauge or counter. One table keeps the two sides in step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict

# ---------------------------------------------------------------- recorded in the HTTP process
# Counters are declared without "_total"; the Prometheus client appends it on exposition.
PROMPT_TOKENS = "sglang:prompt_tokens"
GENERATION_TOKENS = "sglang:generation_tokens"
CACHED_TOKENS = "sglang:cached_tokens"
NUM_REQUESTS = "sglang:num_requests"
NUM_ABORTED_REQUESTS = "sglang:num_aborted_requests"
TIME_TO_FIRST_TOKEN = "sglang:time_to_first_token_seconds"
INTER_TOKEN_LATENCY = "sglang:inter_token_latency_seconds"
E2E_REQUEST_LATENCY = "sglang:e2e_request_latency_seconds"
PROMPT_BREAK_FRACTION = "sglang:prompt_break_fraction"

MODEL_LABEL = "model_name"


@dataclass(frozen=True)
class SchedulerMetricSpec:
    name: str  # as exposed (a counter's name ends in _total here: it is emitted verbatim)
    kind: str  # "gauge" or "counter"
    help: str


# ---------------------------------------------------------------- pushed by the scheduler
SCHEDULER_METRICS: Dict[str, SchedulerMetricSpec] = {
    "num_running_reqs": SchedulerMetricSpec(
        "sglang:num_running_reqs", "gauge", "Requests in the running batch."
    ),
    "num_queue_reqs": SchedulerMetricSpec(
        "sglang:num_queue_reqs", "gauge", "Requests in the waiting queue."
    ),
    "num_used_tokens": SchedulerMetricSpec(
        "sglang:num_used_tokens", "gauge", "KV slots held by running requests or locked prefixes."
    ),
    "token_usage": SchedulerMetricSpec(
        "sglang:token_usage",
        "gauge",
        "KV pool fraction in use: (total - available - evictable) / total.",
    ),
    "cache_hit_rate": SchedulerMetricSpec(
        "sglang:cache_hit_rate",
        "gauge",
        "Prefix-cache hit rate since startup: cached / (cached + computed) prompt tokens over prefill rounds.",
    ),
    "gen_throughput": SchedulerMetricSpec(
        "sglang:gen_throughput",
        "gauge",
        "Decode tokens per second over the last decode-log interval.",
    ),
    "new_token_ratio": SchedulerMetricSpec(
        "sglang:new_token_ratio",
        "gauge",
        "Admission forecast: share of remaining max_new_tokens reserved.",
    ),
    "num_retracted_reqs": SchedulerMetricSpec(
        "sglang:num_retracted_reqs", "gauge", "Retracted requests waiting to be prefilled again."
    ),
    "num_retracted_requests_total": SchedulerMetricSpec(
        "sglang:num_retracted_requests_total", "counter", "Requests retracted since startup."
    ),
    "max_total_num_tokens": SchedulerMetricSpec(
        "sglang:max_total_num_tokens", "gauge", "KV pool size in tokens."
    ),
    # Prompt tokens served from the cache since startup, by the tier they were found in.
    "cached_tokens_device_total": SchedulerMetricSpec(
        "sglang:cached_tokens_device_total", "counter", "Cached prompt tokens found on the device."
    ),
    "cached_tokens_host_total": SchedulerMetricSpec(
        "sglang:cached_tokens_host_total",
        "counter",
        "Cached prompt tokens copied back from host memory (HiCache).",
    ),
    "cached_tokens_storage_total": SchedulerMetricSpec(
        "sglang:cached_tokens_storage_total",
        "counter",
        "Cached prompt tokens read from the storage tier (HiCache), then copied back.",
    ),
    "hicache_host_total_tokens": SchedulerMetricSpec(
        "sglang:hicache_host_total_tokens", "gauge", "HiCache host pool size in tokens (0: off)."
    ),
    "hicache_host_used_tokens": SchedulerMetricSpec(
        "sglang:hicache_host_used_tokens", "gauge", "HiCache host pool slots holding KV."
    ),
    "hicache_host_usage": SchedulerMetricSpec(
        "sglang:hicache_host_usage", "gauge", "HiCache host pool fraction holding KV."
    ),
    "hicache_load_back_bytes_total": SchedulerMetricSpec(
        "sglang:hicache_load_back_bytes_total",
        "counter",
        "KV bytes copied from host memory back to the device.",
    ),
    "hicache_write_bytes_total": SchedulerMetricSpec(
        "sglang:hicache_write_bytes_total",
        "counter",
        "KV bytes copied from the device to host memory.",
    ),
    "hicache_load_back_seconds_total": SchedulerMetricSpec(
        "sglang:hicache_load_back_seconds_total",
        "counter",
        "Time the host-to-device copies took (device time on CUDA).",
    ),
    "hicache_storage_read_blocks_total": SchedulerMetricSpec(
        "sglang:hicache_storage_read_blocks_total", "counter", "Blocks read from the storage tier."
    ),
    "hicache_storage_write_blocks_total": SchedulerMetricSpec(
        "sglang:hicache_storage_write_blocks_total",
        "counter",
        "Blocks written to the storage tier.",
    ),
    "spec_verify_ct_total": SchedulerMetricSpec(
        "sglang:spec_verify_ct_total",
        "counter",
        "Speculative decoding: request verify steps since startup (one per request per step).",
    ),
    "spec_emitted_tokens_total": SchedulerMetricSpec(
        "sglang:spec_emitted_tokens_total",
        "counter",
        "Speculative decoding: tokens those verify steps emitted (accepted drafts + one each).",
    ),
    "spec_accept_length": SchedulerMetricSpec(
        "sglang:spec_accept_length",
        "gauge",
        "Speculative decoding: tokens per verify step over the last decode-log interval.",
    ),
}
