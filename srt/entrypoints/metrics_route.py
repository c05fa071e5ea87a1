"""GET /metrics (Prometheus text format), mounted by the HTTP server only with --enable-metrics.

The collector must reach the TokenizerManager, which the server creates in its own startup handler,
registered after this one. So our startup handler only schedules a task that attaches the collector
as soon as `state.tm` exists (before the warm-up request runs); a scrape also attaches it, in case.
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import FastAPI
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST

from sglang.srt.metrics.collector import ServerMetricsCollector

ATTACH_POLL_S = 0.005
ATTACH_GIVE_UP_S = 600.0


def _attach(state: Any, collector: ServerMetricsCollector) -> bool:
    tm = state.tm
    if tm is None:
        return False
    if tm.metrics is not collector:
        tm.metrics = collector
        ready = getattr(tm, "ready", None)
        if ready is not None:
            collector.seed({"max_total_num_tokens": float(ready.max_total_num_tokens)})
    return True


def add_metrics_route(app: FastAPI, state: Any) -> ServerMetricsCollector:
    collector = ServerMetricsCollector(model_name=state.server_args.served_name())
    app.state.metrics_collector = collector

    async def attach_when_ready() -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + ATTACH_GIVE_UP_S
        while not _attach(state, collector) and loop.time() < deadline:
            await asyncio.sleep(ATTACH_POLL_S)

    @app.on_event("startup")
    async def _start_attach() -> None:
        # Keep a reference: the event loop holds tasks only weakly.
        app.state.metrics_attach_task = asyncio.get_running_loop().create_task(attach_when_ready())

    @app.get("/metrics")
    async def metrics() -> Response:
        _attach(state, collector)
        return Response(content=collector.render(), media_type=CONTENT_TYPE_LATEST)

    return collector
