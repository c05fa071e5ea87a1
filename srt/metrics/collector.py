"""The HTTP-process side of /metrics: per-request counters and latency histograms, plus the
scheduler's latest snapshot re-exposed as gauges.

The TokenizerManager calls the on_* hooks from its event loop. What is counted where:
- Every finished request (aborted or not) adds 1 to num_requests_total; aborted ones also add 1 to
  num_aborted_requests_total and nothing else, because their tokens were not (all) served.
- Requests that finish normally add their meta_info prompt/completion/cached tokens and one e2e sample.
- time_to_first_token gets one sample when a request's first output token reaches the HTTP process.
- inter_token_latency gets one sample per token of every chunk after the first: a chunk carrying k
  tokens that arrived g seconds after the previous chunk adds k samples of g / k (the average step
  time; the sum stays the wall time). A non-streamed request usually arrives in one chunk and adds
  none, so this histogram describes streaming traffic. (Clients see the burst instead: g then k-1
  zeros; benchmark/serving measures that view.)
- Requests sent with log_metrics=false are left out entirely.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, Optional

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from sglang.srt.core.finish_reason import FinishAbort, FinishReason
from sglang.srt.metrics import names

# Bucket edges in seconds. CPU serving of a small model reaches tens of seconds under load, GPU
# serving sits at milliseconds: the edges span both.
TTFT_BUCKETS = (
    0.01,
    0.025,
    0.05,
    0.1,
    0.2,
    0.35,
    0.5,
    0.75,
    1.0,
    1.5,
    2.0,
    3.0,
    5.0,
    7.5,
    10.0,
    15.0,
    20.0,
    30.0,
    45.0,
    60.0,
    90.0,
    120.0,
    300.0,
    600.0,
)
ITL_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.0075,
    0.01,
    0.015,
    0.02,
    0.03,
    0.04,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.5,
    0.75,
    1.0,
    2.0,
    5.0,
    10.0,
)
# Tenths of the prompt; 0.0 has its own bucket (nothing cached at all).
PROMPT_BREAK_BUCKETS = tuple(i / 10 for i in range(11))
E2E_BUCKETS = (
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.0,
    3.0,
    5.0,
    7.5,
    10.0,
    15.0,
    20.0,
    30.0,
    45.0,
    60.0,
    90.0,
    120.0,
    180.0,
    300.0,
    600.0,
    1200.0,
    2400.0,
)


def _wants_metrics(state: Any) -> bool:
    """A request sent with log_metrics=false (internal probes) stays out of the numbers."""
    return getattr(getattr(state, "req", None), "log_metrics", True) is not False


class _SchedulerSnapshot:
    """A custom Prometheus collector that reports the scheduler's last pushed values verbatim.

    The scheduler owns these numbers (including the retraction total), so the HTTP process only
    mirrors them; a Counter object here would have to re-derive increments from totals."""

    def __init__(self, model_name: str):
        self.model_name = model_name
        self.values: Dict[str, float] = {}

    def update(self, values: Dict[str, float]) -> None:
        self.values = {**self.values, **values}

    def _families(self, with_samples: bool) -> Iterable[Metric]:
        for key, spec in names.SCHEDULER_METRICS.items():
            family_type = CounterMetricFamily if spec.kind == "counter" else GaugeMetricFamily
            fam = family_type(spec.name, spec.help, labels=[names.MODEL_LABEL])
            if with_samples:
                fam.add_metric([self.model_name], float(self.values.get(key, 0.0)))
            yield fam

    def describe(self) -> Iterable[Metric]:
        return list(self._families(with_samples=False))

    def collect(self) -> Iterable[Metric]:
        return list(self._families(with_samples=True))


class ServerMetricsCollector:
    """Owns a private CollectorRegistry (several servers or tests in one process never collide)."""

    def __init__(self, model_name: str, registry: Optional[CollectorRegistry] = None):
        self.registry = registry if registry is not None else CollectorRegistry()
        self.model_name = model_name
        label = [names.MODEL_LABEL]

        def counter(name: str, doc: str):
            return Counter(name, doc, label, registry=self.registry).labels(model_name)

        def histogram(name: str, doc: str, buckets):
            return Histogram(name, doc, label, buckets=buckets, registry=self.registry).labels(
                model_name
            )

        self.prompt_tokens = counter(names.PROMPT_TOKENS, "Prompt tokens of finished requests.")
        self.generation_tokens = counter(
            names.GENERATION_TOKENS, "Output tokens of finished requests."
        )
        self.cached_tokens = counter(
            names.CACHED_TOKENS, "Prompt tokens served from the prefix cache."
        )
        self.num_requests = counter(names.NUM_REQUESTS, "Finished requests, aborted ones included.")
        self.num_aborted = counter(
            names.NUM_ABORTED_REQUESTS, "Requests that finished with an abort."
        )
        self.ttft = histogram(
            names.TIME_TO_FIRST_TOKEN,
            "Seconds from arrival to the first output token.",
            TTFT_BUCKETS,
        )
        self.itl = histogram(
            names.INTER_TOKEN_LATENCY, "Seconds between consecutive output tokens.", ITL_BUCKETS
        )
        self.e2e = histogram(
            names.E2E_REQUEST_LATENCY, "Seconds from arrival to the last output.", E2E_BUCKETS
        )
        self.prompt_break = histogram(
            names.PROMPT_BREAK_FRACTION,
            "Where prompts left the prefix cache, as a fraction of the prompt "
            "(--enable-cache-report): mass near 0 means something early in prompts keeps changing.",
            PROMPT_BREAK_BUCKETS,
        )
        self.scheduler = _SchedulerSnapshot(model_name)
        self.registry.register(self.scheduler)

    # ------------------------------------------------------------------ TokenizerManager hooks
    def on_request(self, p: Any) -> None:
        """Nothing to record at send time: counters move at finish, so they always move together."""

    def on_chunk(self, state: Any, n_new_tokens: int, now: float) -> None:
        if n_new_tokens <= 0 or not _wants_metrics(state):
            return
        if state.first_token_time == now:
            # This chunk set first_token_time: it carries the first token. Tokens that came with it
            # have no gap of their own to measure, so they add no ITL sample.
            self.ttft.observe(max(now - state.created_time, 0.0))
            return
        prev = (
            state.last_chunk_time if state.last_chunk_time is not None else state.first_token_time
        )
        gap = max(now - prev, 0.0) / n_new_tokens
        for _ in range(n_new_tokens):
            self.itl.observe(gap)

    def on_finish(self, state: Any, out: Dict[str, Any]) -> None:
        if not _wants_metrics(state):
            return
        meta = out["meta_info"]
        self.num_requests.inc()
        if isinstance(FinishReason.from_wire(meta.get("finish_reason")), FinishAbort):
            self.num_aborted.inc()
            return
        self.prompt_tokens.inc(meta.get("prompt_tokens") or 0)
        self.generation_tokens.inc(meta.get("completion_tokens") or 0)
        self.cached_tokens.inc(meta.get("cached_tokens") or 0)
        e2e = meta.get("e2e_latency")
        if e2e is not None:
            self.e2e.observe(e2e)
        pb = meta.get("prompt_break")
        if pb is not None:
            self.prompt_break.observe(pb["fraction"])

    def on_scheduler_metrics(self, values: Dict[str, float]) -> None:
        self.scheduler.update(values)

    # ------------------------------------------------------------------ exposition
    def seed(self, values: Dict[str, float]) -> None:
        """Known constants (pool size) before the scheduler's first push; a push overrides them."""
        for k, v in values.items():
            self.scheduler.values.setdefault(k, v)

    def render(self) -> bytes:
        return generate_latest(self.registry)
