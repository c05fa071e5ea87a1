"""Prometheus metrics: the HTTP-process collector behind /metrics and the scheduler-side reporter.

The scheduler cannot serve HTTP, so it pushes a small snapshot of its gauges (SchedulerMetrics) to
the HTTP process, which merges it with the per-request counters and histograms it records itself.
"""

from sglang.srt.metrics.collector import ServerMetricsCollector
from sglang.srt.metrics.names import SCHEDULER_METRICS, SchedulerMetricSpec

__all__ = ["SCHEDULER_METRICS", "SchedulerMetricSpec", "ServerMetricsCollector"]
