"""From per-request results to the summary numbers, and the printed table."""

from __future__ import annotations

from collections import Counter
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from .client import RequestResult


def _stats(
    values: Sequence[float], scale: float, prefix: str, pcts: Sequence[int]
) -> Dict[str, float]:
    arr = np.asarray(values, dtype=float) * scale
    out = {
        f"mean_{prefix}": float(arr.mean()) if arr.size else 0.0,
        f"median_{prefix}": float(np.median(arr)) if arr.size else 0.0,
        f"std_{prefix}": float(arr.std()) if arr.size else 0.0,
    }
    for p in pcts:
        out[f"p{p}_{prefix}"] = float(np.percentile(arr, p)) if arr.size else 0.0
    return out


def peak_concurrency(results: Sequence[RequestResult]) -> int:
    """Most requests in flight at once, from each request's [start, start + latency] interval."""
    events = []
    for r in results:
        if r.latency > 0:
            events.append((r.start, 1))
            events.append((r.start + r.latency, -1))
    events.sort(key=lambda e: (e[0], e[1]))  # an end before a start at the same instant
    cur = peak = 0
    for _, d in events:
        cur += d
        peak = max(peak, cur)
    return peak


def retokenized_len(tokenizer: Any, text: str) -> int:
    """Output tokens counted from the returned text: 0 for an empty answer, whatever the server claims."""
    if not text:
        return 0
    return len(tokenizer.encode(text, add_special_tokens=False))


def summarize(
    results: Sequence[RequestResult],
    duration: float,
    tokenizer: Any,
    server_info: Optional[Dict[str, Any]] = None,
) -> Dict[str, Any]:
    ok = [r for r in results if r.success]
    failed = [r for r in results if not r.success]
    retok = (
        [retokenized_len(tokenizer, r.generated_text) for r in ok] if tokenizer is not None else []
    )
    # Throughput counts the server's completion tokens; if a backend reports none, fall back to retokenized.
    out_lens = [
        r.output_len if r.output_len else (retok[i] if retok else 0) for i, r in enumerate(ok)
    ]
    total_in = sum(r.prompt_len for r in ok)
    total_out = sum(out_lens)
    tpots = [(r.latency - r.ttft) / (n - 1) for r, n in zip(ok, out_lens) if n > 1]
    itls = [x for r in ok for x in r.itl]
    cached = [r.cached_tokens for r in ok if r.cached_tokens is not None]
    prompt_with_cache = sum(r.prompt_len for r in ok if r.cached_tokens is not None)
    dur = max(duration, 1e-9)
    s: Dict[str, Any] = {
        "duration": duration,
        "completed": len(ok),
        "failed": len(failed),
        "failures": dict(Counter(r.error or f"HTTP {r.status}" for r in failed).most_common()),
        "total_input_tokens": total_in,
        "total_output_tokens": total_out,
        "total_output_tokens_retokenized": sum(retok),
        "empty_outputs": sum(1 for n in retok if n == 0),
        "request_throughput": len(ok) / dur,
        "input_throughput": total_in / dur,
        "output_throughput": total_out / dur,
        "total_throughput": (total_in + total_out) / dur,
        "peak_concurrency": peak_concurrency(results),
        "concurrency": sum(r.latency for r in ok) / dur,
        "mean_frames_per_request": float(np.mean([r.frames for r in ok])) if ok else 0.0,
        "itl_zero_fraction": float(np.mean([x == 0.0 for x in itls])) if itls else 0.0,
        "run_cache_hit_rate": (sum(cached) / prompt_with_cache) if prompt_with_cache else None,
        "server_cache_hit_rate": (server_info or {}).get("cache_hit_rate"),
        "server_num_retractions_total": (server_info or {}).get("num_retractions_total"),
    }
    s.update(_stats([r.latency for r in ok], 1000, "e2e_latency_ms", (90, 99)))
    s.update(_stats([r.ttft for r in ok], 1000, "ttft_ms", (99,)))
    s.update(_stats(tpots, 1000, "tpot_ms", (99,)))
    s.update(_stats(itls, 1000, "itl_ms", (95, 99)))
    s["max_itl_ms"] = float(max(itls) * 1000) if itls else 0.0
    return s


def _fmt(v: Any) -> str:
    if v is None:
        return "n/a"
    if isinstance(v, float):
        return f"{v:.2f}"
    return str(v)


def format_table(
    s: Dict[str, Any], backend: str, request_rate: float, max_concurrency: Optional[int]
) -> str:
    rows: List[Any] = [
        ("title", " Serving Benchmark Result "),
        ("Backend:", backend),
        ("Traffic request rate:", request_rate),
        ("Max request concurrency:", max_concurrency if max_concurrency else "not set"),
        ("Successful requests:", s["completed"]),
        ("Failed requests:", s["failed"]),
    ]
    for msg, n in s["failures"].items():
        rows.append((f"  {msg[:60]}:", n))
    rows += [
        ("Benchmark duration (s):", s["duration"]),
        ("Total input tokens:", s["total_input_tokens"]),
        ("Total generated tokens:", s["total_output_tokens"]),
        ("Total generated tokens (retokenized):", s["total_output_tokens_retokenized"]),
        ("Empty outputs:", s["empty_outputs"]),
        ("Request throughput (req/s):", s["request_throughput"]),
        ("Input token throughput (tok/s):", s["input_throughput"]),
        ("Output token throughput (tok/s):", s["output_throughput"]),
        ("Total token throughput (tok/s):", s["total_throughput"]),
        ("Peak concurrent requests:", s["peak_concurrency"]),
        ("Concurrency:", s["concurrency"]),
        ("Mean SSE frames per request:", s["mean_frames_per_request"]),
        ("Prompt cache hit rate (this run):", s["run_cache_hit_rate"]),
        ("Server cache hit rate (since start):", s["server_cache_hit_rate"]),
        ("section", "End-to-End Latency"),
        ("Mean E2E Latency (ms):", s["mean_e2e_latency_ms"]),
        ("Median E2E Latency (ms):", s["median_e2e_latency_ms"]),
        ("P99 E2E Latency (ms):", s["p99_e2e_latency_ms"]),
        ("section", "Time to First Token"),
        ("Mean TTFT (ms):", s["mean_ttft_ms"]),
        ("Median TTFT (ms):", s["median_ttft_ms"]),
        ("P99 TTFT (ms):", s["p99_ttft_ms"]),
        ("section", "Time per Output Token (excl. 1st token)"),
        ("Mean TPOT (ms):", s["mean_tpot_ms"]),
        ("Median TPOT (ms):", s["median_tpot_ms"]),
        ("P99 TPOT (ms):", s["p99_tpot_ms"]),
        ("section", "Inter-Token Latency (per token)"),
        ("Mean ITL (ms):", s["mean_itl_ms"]),
        ("Median ITL (ms):", s["median_itl_ms"]),
        ("P95 ITL (ms):", s["p95_itl_ms"]),
        ("P99 ITL (ms):", s["p99_itl_ms"]),
        ("Max ITL (ms):", s["max_itl_ms"]),
        ("Zero-gap share of ITL:", s["itl_zero_fraction"]),
    ]
    width = 52
    lines = []
    for key, val in rows:
        if key == "title":
            lines.append(val.center(width, "="))
        elif key == "section":
            lines.append(f" {val} ".center(width, "-"))
        else:
            lines.append("{:<40} {:<10}".format(key, _fmt(val)))
    lines.append("=" * width)
    return "\n".join(lines)
