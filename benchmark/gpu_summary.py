"""Final table of a GPU session (benchmark/gpu_session.sh): bench_one_batch and offline-throughput
JSON lines against the issue's targets.

    python benchmark/gpu_summary.py OUT_DIR
"""

from __future__ import annotations

import json
import os
import sys
from typing import List

# Issue 9 targets: decode step / weight-read floor at batch 1 and 64; speedup over HF at batch 1.
TARGETS = {1: 1.15, 64: 1.5}
HF_SPEEDUP_TARGET = 15.0


def _lines(path: str) -> List[dict]:
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(x) for x in f if x.strip()]


def main(out_dir: str) -> None:
    print("=" * 100)
    for s in _lines(os.path.join(out_dir, "one_batch.jsonl")):
        print(
            f"bench_one_batch {s['model']}{(' [' + s['tag'] + ']') if s.get('tag') else ''} on {s['device_name']} ({s['date']}): copy {s['bandwidth'] / 1e12:.2f} TB/s, "
            f"matmul {s['matmul_flops'] / 1e12:.0f} TFLOP/s, weights {s['weight_bytes'] / 1e9:.2f} GB, "
            f"floor {1e3 * s['weight_bytes'] / s['bandwidth']:.2f} ms, max_total_num_tokens {s['max_total_num_tokens']}, "
            f"kv {s['kv_dtype']}, graphs {s['cuda_graph']}"
        )
        print(
            f"{'sys':<5}{'bs':>5}{'in':>6}{'prefill ms':>12}{'pf tok/s':>10}{'pf/floor':>9}{'step ms':>9}"
            f"{'pipelined':>10}{'tok/s':>9}{'step/floor':>11}{'target':>13}{'vs HF':>8}"
        )
        for r in s["rows"]:
            step = r.get("decode_step_s")
            tgt = TARGETS.get(r["batch_size"]) if r["system"] == "ours" and step else None
            ok = "" if tgt is None else (" ok" if r["decode_ratio"] <= tgt else " MISS")
            hf = r.get("speedup_vs_hf")
            hf_s = (
                "-"
                if not hf
                else f"{hf:.1f}x"
                + (("" if hf > HF_SPEEDUP_TARGET else " MISS") if r["batch_size"] == 1 else "")
            )
            pipe = r.get("decode_pipelined_s")
            step_s = f"{1e3 * step:.2f}" if step else "-"
            pipe_s = f"{1e3 * pipe:.2f}" if pipe else "-"
            ratio_s = f"{r['decode_ratio']:.2f}x" if step else "-"
            tgt_s = f"<={tgt}{ok}" if tgt else ""
            print(
                f"{r['system']:<5}{r['batch_size']:>5}{r['input_len']:>6}{1e3 * r['prefill_s']:>12.1f}"
                f"{r['prefill_tok_s']:>10.0f}{r['prefill_ratio']:>8.2f}x{step_s:>9}{pipe_s:>10}"
                f"{(r['decode_tok_s'] or 0):>9.0f}{ratio_s:>11}{tgt_s:>13}{hf_s:>8}"
            )
        for x in s.get("sampler") or []:
            print(
                f"  sampler bs {x['batch_size']}: greedy {x['greedy_ms']:.3f} ms "
                f"(torch {x.get('greedy_torch_ms', float('nan')):.3f} ms), temperature 1 {x['temp1_ms']:.3f} ms "
                f"(torch noise path {x.get('temp1_torch_ms', float('nan')):.3f} ms)"
            )
    for r in _lines(os.path.join(out_dir, "offline.jsonl")):
        print(
            f"offline {r['model']}: {r['num_prompts']} req, in/out {r['input_len_range']}/{r['output_len_range']}, "
            f"overlap {'on ' if r['overlap'] else 'off'}: output {r['output_tok_s']:.0f} tok/s "
            f"(total {r['total_tok_s']:.0f}; {r['output_tokens']} tok in {r['elapsed_s']:.1f}s; "
            f"max_total_num_tokens {r['max_total_num_tokens']})"
        )
    print("=" * 100)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "benchmark/out")
