"""TTFT CDFs of several bench_serving runs on one axis (runs saved with --output-details).

python benchmark/plot_ttft_cdf.py runs.jsonl --tags over-off over-on --out ttft.png
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Dict, List

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np


def last_runs_by_tag(path: str, tags: List[str]) -> Dict[str, dict]:
    runs: Dict[str, dict] = {}
    with open(path) as f:
        for line in f:
            rec = json.loads(line)
            if rec.get("tag") in tags and (rec.get("details") or {}).get("ttfts"):
                runs[rec["tag"]] = rec
    missing = [t for t in tags if t not in runs]
    if missing:
        raise SystemExit(f"no run with per-request ttfts for tags {missing} in {path}")
    return runs


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("jsonl")
    p.add_argument("--tags", nargs="+", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--title", default="")
    args = p.parse_args()
    runs = last_runs_by_tag(args.jsonl, args.tags)
    fig, ax = plt.subplots(figsize=(6, 3.6))
    for tag in args.tags:
        ttfts = runs[tag]["details"]["ttfts"]
        v = np.sort(np.asarray([t for t in ttfts if t is not None]) * 1000)
        ax.step(
            v,
            np.arange(1, v.size + 1) / v.size,
            where="post",
            label=f"{tag} (p50 {np.median(v):.0f} ms)",
        )
    ax.set_xscale("log")
    ax.set_xlabel("TTFT (ms, log scale)")
    ax.set_ylabel("fraction of requests")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    ax.set_title(args.title, fontsize=9)
    fig.tight_layout()
    fig.savefig(args.out, dpi=90)
    print(args.out)


if __name__ == "__main__":
    main()
