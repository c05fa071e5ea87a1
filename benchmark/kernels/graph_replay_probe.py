"""Does launching a CUDA graph block the host while an earlier launch is still running?

Times the host side of graph.replay() calls issued back to back (no sync), for the same graph twice
and for two different graphs (shared pool and separate pools)."""

from __future__ import annotations

import time

import torch


def make(pool=None, n=300):
    x = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            y = x
            for _ in range(n):
                y = y @ w
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, pool=pool, stream=s):
        y = x
        for _ in range(n):
            y = y @ w
    torch.cuda.synchronize()
    return g


def host_ms(fn):
    t = time.perf_counter()
    fn()
    return (time.perf_counter() - t) * 1e3


def main():
    pool = torch.cuda.graph_pool_handle()
    a, b = make(pool), make(pool)
    c = make()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    a.replay()
    e1.record()
    torch.cuda.synchronize()
    print(f"one replay: gpu {e0.elapsed_time(e1):.2f} ms")
    for name, first, second in (
        ("same graph", a, a),
        ("other graph, shared pool", a, b),
        ("other graph, own pool", a, c),
    ):
        torch.cuda.synchronize()
        t1 = host_ms(first.replay)
        t2 = host_ms(second.replay)
        t3 = host_ms(lambda: torch.empty(1, device="cuda").add_(1))
        torch.cuda.synchronize()
        print(
            f"{name:26}: host time of 1st replay {t1:.3f} ms, 2nd replay {t2:.3f} ms, a small op after {t3:.3f} ms"
        )


if __name__ == "__main__":
    main()
