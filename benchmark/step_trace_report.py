"""Where a run's device time went, from a step trace (SGLANG_STEP_TRACE=<file> on the server or
Engine; see srt/managers/scheduler/step_trace.py).

    SGLANG_STEP_TRACE=/tmp/trace.jsonl sglang serve ...   # run a workload, then:
    python benchmark/step_trace_report.py /tmp/trace.jsonl --model-config qwen3-0.6b

Every pass is set against its own floor: a decode pass reads the weights and its requests' KV at
the copy rate; a prefill (extend / mixed) pass does its FLOPs at the matrix rate (or reads the
weights, if that is longer). Device idle time is the gaps between one pass's end and the next's
start: there the device waited for the host. bench_offline_throughput.py --step-trace prints the
same table for its own run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import defaultdict
from dataclasses import dataclass
from typing import Dict, List, Sequence

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

BS_BUCKETS = (1, 8, 32, 64, 128, 256)


@dataclass
class Group:
    name: str
    passes: int = 0
    device_ms: float = 0.0
    floor_ms: float = 0.0
    tokens: int = 0


@dataclass
class TraceSummary:
    wall_ms: float
    busy_ms: float
    idle_ms: float
    long_gaps: int  # device gaps over 1 ms
    groups: List[Group]


def load(path: str) -> List[dict]:
    with open(path) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return sorted(rows, key=lambda r: r["start_ms"])


def _bucket(bs: int) -> str:
    lo = 1
    for hi in BS_BUCKETS:
        if bs <= hi:
            return f"{lo}-{hi}" if lo < hi else f"{hi}"
        lo = hi + 1
    return f">{BS_BUCKETS[-1]}"


def pass_floor_ms(row: dict, facts, bw: float, flops: float) -> float:
    weights_s = facts.weight_bytes / bw
    if row["mode"] == "decode":
        return 1e3 * (weights_s + row["kv_tokens"] * facts.kv_bytes_per_token / bw)
    attn = 4.0 * facts.head_dim * facts.num_heads * facts.num_layers * row["attn_pairs"]
    work = 2.0 * row["tokens"] * facts.layer_matmul_params + 2.0 * row["bs"] * facts.lm_head_params
    return 1e3 * max((work + attn) / flops, weights_s)


def summarize(rows: Sequence[dict], facts, bw: float, flops: float) -> TraceSummary:
    groups: Dict[str, Group] = defaultdict(lambda: Group(""))
    busy = idle = 0.0
    long_gaps = 0
    prev_end = None
    for r in rows:
        name = "decode bs " + _bucket(r["bs"]) if r["mode"] == "decode" else r["mode"]
        g = groups[name]
        g.name = name
        dur = r["end_ms"] - r["start_ms"]
        g.passes += 1
        g.device_ms += dur
        g.floor_ms += pass_floor_ms(r, facts, bw, flops)
        g.tokens += r["tokens"]
        busy += dur
        if prev_end is not None and r["start_ms"] > prev_end:
            gap = r["start_ms"] - prev_end
            idle += gap
            long_gaps += gap > 1.0
        prev_end = r["end_ms"] if prev_end is None else max(prev_end, r["end_ms"])
    wall = (rows[-1]["end_ms"] - rows[0]["start_ms"]) if rows else 0.0
    order = sorted(groups.values(), key=lambda g: (g.name.startswith("decode"), g.name))
    return TraceSummary(wall, busy, idle, long_gaps, order)


def format_summary(s: TraceSummary) -> str:
    lines = [
        f"device timeline {s.wall_ms / 1e3:.2f} s: busy {s.busy_ms / 1e3:.2f} s, idle "
        f"{s.idle_ms / 1e3:.2f} s ({s.long_gaps} gaps over 1 ms)",
        f"{'passes':<16} {'n':>6} {'tokens':>9} {'device s':>9} {'floor s':>8} {'ratio':>6} "
        f"{'ms/pass':>8} {'share':>6}",
    ]
    for g in s.groups:
        lines.append(
            f"{g.name:<16} {g.passes:>6} {g.tokens:>9} {g.device_ms / 1e3:>9.3f} "
            f"{g.floor_ms / 1e3:>8.3f} {g.device_ms / max(g.floor_ms, 1e-9):>5.2f}x "
            f"{g.device_ms / g.passes:>8.3f} {100 * g.device_ms / max(s.wall_ms, 1e-9):>5.1f}%"
        )
    return "\n".join(lines)


def main(argv=None) -> None:
    from bench_offline_throughput import facts_from_config
    from model_configs import MODEL_CONFIGS, write_model_config

    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("trace")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--model-path")
    g.add_argument("--model-config", choices=sorted(MODEL_CONFIGS))
    p.add_argument("--weight-bytes", type=int, default=None, help="default: bf16 of the config")
    p.add_argument("--kv-elem-bytes", type=int, default=2)
    p.add_argument("--bw", type=float, default=4.2e12)
    p.add_argument("--flops", type=float, default=7.8e14)
    args = p.parse_args(argv)
    path = args.model_path or write_model_config(args.model_config)
    cfg = json.load(open(os.path.join(path, "config.json")))
    facts = facts_from_config(cfg, 0, args.kv_elem_bytes)
    if args.weight_bytes is None:
        embed = cfg["vocab_size"] * cfg["hidden_size"]
        tied = cfg.get("tie_word_embeddings", False)
        args.weight_bytes = 2 * (facts.layer_matmul_params + embed * (1 if tied else 2))
    facts.weight_bytes = args.weight_bytes
    print(format_summary(summarize(load(args.trace), facts, args.bw, args.flops)))


if __name__ == "__main__":
    main()
