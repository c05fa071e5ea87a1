"""Prometheus metrics: the HTTP-process collector behind /metrics (collector.py) and the
scheduler-side reporter (scheduler_reporter.py).

The scheduler cannot serve HTTP, so it pushes a small snapshot of its gauges (SchedulerMetrics) to
the HTTP process, which merges it with the per-request counters and histograms it records itself.
"""
