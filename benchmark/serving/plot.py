"""PNG plots: latency CDFs of one run, and a side-by-side bar chart of two runs (--compare)."""

from __future__ import annotations

from typing import Any, Dict, List, Sequence

import matplotlib

matplotlib.use("Agg")  # files only; no display on servers
import matplotlib.pyplot as plt
import numpy as np

from .client import RequestResult


def _cdf(ax: Any, values_ms: Sequence[float], label: str) -> None:
    v = np.sort(np.asarray(values_ms, dtype=float))
    if v.size == 0:
        return
    ax.step(v, np.arange(1, v.size + 1) / v.size, where="post", label=label)


def plot_latency_cdfs(results: Sequence[RequestResult], path: str, title: str) -> str:
    ok = [r for r in results if r.success]
    panels = [
        ("TTFT (ms)", [r.ttft * 1000 for r in ok]),
        ("ITL per token (ms)", [x * 1000 for r in ok for x in r.itl]),
        ("E2E latency (ms)", [r.latency * 1000 for r in ok]),
    ]
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.4))
    for ax, (name, vals) in zip(axes, panels):
        _cdf(ax, vals, name)
        ax.set_xlabel(name)
        ax.set_ylabel("fraction of samples")
        ax.grid(alpha=0.3)
        ax.set_ylim(0, 1.02)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path


COMPARE_METRICS = [
    ("duration", "duration (s)"),
    ("output_throughput", "output tok/s"),
    ("mean_ttft_ms", "mean TTFT (ms)"),
    ("median_ttft_ms", "median TTFT (ms)"),
    ("mean_itl_ms", "mean ITL (ms)"),
    ("mean_e2e_latency_ms", "mean E2E (ms)"),
    ("run_cache_hit_rate", "prompt cache hit rate"),
    ("mean_frames_per_request", "SSE frames / request"),
    ("failed", "failed requests"),
]


def plot_compare(runs: List[Dict[str, Any]], labels: List[str], path: str, title: str = "") -> str:
    """One small panel per metric, one bar per run, each bar labelled with its value."""
    metrics = [(k, name) for k, name in COMPARE_METRICS if any(r.get(k) is not None for r in runs)]
    cols = 3
    rows = (len(metrics) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(3.0 * cols, 2.6 * rows))
    axes = np.atleast_1d(axes).ravel()
    colors = ["#4C72B0", "#DD8452", "#55A868", "#C44E52"]
    for ax, (key, name) in zip(axes, metrics):
        vals = [float(r.get(key) or 0.0) for r in runs]
        bars = ax.bar(range(len(runs)), vals, color=colors[: len(runs)])
        ax.set_xticks(range(len(runs)), labels, fontsize=8)
        ax.set_title(name, fontsize=9)
        for b, v in zip(bars, vals):
            ax.annotate(
                f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}",
                (b.get_x() + b.get_width() / 2, b.get_height()),
                ha="center",
                va="bottom",
                fontsize=8,
            )
        ax.set_ylim(0, max(vals) * 1.2 if max(vals) > 0 else 1.0)
    for ax in axes[len(metrics) :]:
        ax.axis("off")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path
