"""Sending the requests: Poisson arrivals (or all at once), a concurrency cap, a progress bar."""

from __future__ import annotations

import asyncio
import math
import time
from typing import Callable, List, Optional, Sequence, Tuple

import aiohttp
import numpy as np
from tqdm.asyncio import tqdm

from .client import RequestConfig, RequestResult
from .datasets import BenchRequest

# Cumulative native chunks repeat the whole text so far; allow long lines.
READ_BUFSIZE = 1 << 22


def make_session() -> aiohttp.ClientSession:
    # No client-side limits: the benchmark's own semaphore is the only concurrency cap.
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0),
        timeout=aiohttp.ClientTimeout(total=None),
        read_bufsize=READ_BUFSIZE,
    )


def arrival_gaps(n: int, request_rate: float, seed: int) -> np.ndarray:
    """Seconds to wait before each request: exponential gaps (Poisson arrivals), zeros when rate is inf."""
    if math.isinf(request_rate) or request_rate <= 0:
        return np.zeros(n)
    return np.random.default_rng(seed).exponential(1.0 / request_rate, size=n)


async def run_requests(
    request_fn: Callable,
    cfg: RequestConfig,
    reqs: Sequence[BenchRequest],
    request_rate: float = float("inf"),
    max_concurrency: Optional[int] = None,
    seed: int = 1,
    show_progress: bool = True,
) -> Tuple[List[RequestResult], float, float]:
    """Returns (results in request order, benchmark duration in s, perf_counter at start)."""
    sem = asyncio.Semaphore(max_concurrency) if max_concurrency else None
    pbar = tqdm(total=len(reqs), disable=not show_progress, desc="requests")
    gaps = arrival_gaps(len(reqs), request_rate, seed)

    async with make_session() as session:

        async def one(req: BenchRequest) -> RequestResult:
            if sem is None:
                res = await request_fn(session, cfg, req)
            else:
                async with sem:
                    res = await request_fn(session, cfg, req)
            pbar.update(1)
            return res

        t0 = time.perf_counter()
        tasks = []
        for req, gap in zip(reqs, gaps):
            if gap > 0:
                await asyncio.sleep(float(gap))
            tasks.append(asyncio.create_task(one(req)))
        results = await asyncio.gather(*tasks)
        duration = time.perf_counter() - t0
    pbar.close()
    return list(results), duration, t0


async def warmup(
    request_fn: Callable,
    cfg: RequestConfig,
    reqs: Sequence[BenchRequest],
    n: int,
    output_len: int = 4,
) -> List[RequestResult]:
    """n short requests built from the first prompts (not timed; loads kernels and the tokenizer path)."""
    if n <= 0 or not reqs:
        return []
    import dataclasses

    warm = [
        dataclasses.replace(
            reqs[i % len(reqs)], output_len=min(output_len, reqs[i % len(reqs)].output_len)
        )
        for i in range(n)
    ]
    async with make_session() as session:
        return list(await asyncio.gather(*[request_fn(session, cfg, r) for r in warm]))
