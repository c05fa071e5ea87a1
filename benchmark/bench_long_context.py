"""Decode steps over batch x context, and chunked prefill of long prompts, each against its floor.

    python benchmark/bench_long_context.py --model-config llama3.1-8b \
        --batch-size 1 8 64 256 --context 512 4096 32768 131072 --prefill 8192 32768 131072 \
        --hf-cells 1x4096 1x32768
    python benchmark/bench_long_context.py --model-config tiny-llama --batch-size 1 4 \
        --context 64 512 --prefill 256 --chunk 64 --steps 4      # CPU, seconds

Decode cell (bs, ctx): bs requests whose caches already hold ctx tokens (slots are taken without
computing their KV: a step's time depends on how much cache it reads, not on its values), then
`--steps` decode steps timed one by one (synced, median) and back to back (pipelined, mean). Its
floor is the bytes one step must read, weights plus bs x ctx tokens of KV, at the copy bandwidth
measured in the same process. A cell whose KV does not fit the pool is shown as "-".

Prefill of n tokens runs in passes of --chunk tokens as the server's chunked prefill would; its
floor is the model FLOPs (projections for every token, causal attention over n(n+1)/2 pairs) at
the measured bf16 matrix rate.

The peer, HF transformers with a static cache (which compiles its decode step; bench_one_batch's
run_hf), runs the --hf-cells in the same process before our runner takes the memory.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Dict, List, Tuple

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_one_batch as bob
from model_configs import write_model_config

from sglang.srt.utils.cublas_workspace import configure_cublas_workspace

GB = 1e9


def parse_args(argv=None) -> Tuple[argparse.Namespace, argparse.Namespace]:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--context", type=int, nargs="+", default=[512, 4096, 32768])
    p.add_argument("--prefill", type=int, nargs="*", default=[8192, 32768])
    p.add_argument("--chunk", type=int, default=8192, help="tokens per prefill pass")
    p.add_argument("--steps", type=int, default=16, help="decode steps per cell")
    p.add_argument(
        "--hf-cells", nargs="*", default=[], help="BSxCTX cells for the HF static-cache peer"
    )
    p.add_argument("--hf-steps", type=int, default=16)
    ours, rest = p.parse_known_args(argv)
    # Model, device and runtime flags are bench_one_batch's (one runner factory for both benches).
    common = bob.parse_args(rest)
    return ours, common


# ---------------------------------------------------------------------------------------------- ours
def decode_cell(runner, bs: int, ctx: int, steps: int) -> Tuple[float, float]:
    """(median synced step, mean pipelined step) in seconds."""
    from sglang.srt.model_executor.static_batch import StaticBatch

    device = runner.device
    info = bob.greedy_info(bs, runner.vocab_size, device)
    sb = StaticBatch(runner)
    try:
        sb.occupy([ctx] * bs)
        holder = {"ids": torch.zeros(bs, dtype=torch.int64, device=device)}

        def step():
            holder["ids"] = runner.sample(sb.decode(holder["ids"]), info).next_token_ids

        with torch.no_grad():
            for _ in range(3):
                step()
            synced = statistics.median(bob.timed(step, device) for _ in range(steps))
            piped = bob.timed(lambda: [step() for _ in range(steps)], device) / steps
    finally:
        sb.release()
    return synced, piped


def prefill_once(runner, n: int, chunk: int, seed: int) -> float:
    from sglang.srt.model_executor.static_batch import StaticBatch

    prompt = bob.random_prompts(1, n, runner.vocab_size, seed)[0].tolist()
    sb = StaticBatch(runner)
    try:
        with torch.no_grad():
            return bob.timed(lambda: sb.prefill_chunked(prompt, chunk), runner.device)
    finally:
        sb.release()


# ---------------------------------------------------------------------------------------------- HF
def parse_cell(text: str) -> Tuple[int, int]:
    bs, ctx = text.lower().split("x")
    return int(bs), int(ctx)


# ---------------------------------------------------------------------------------------------- main
def main(argv=None) -> dict:
    ours_args, args = parse_args(argv)
    configure_cublas_workspace(args.cublas_workspace_kib)
    model_path = args.model_path or write_model_config(args.model_config)
    device = (
        ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    )
    args.device = device
    bw = args.bw or bob.measure_bandwidth(device)
    flops = args.flops or bob.measure_matmul_rate(device)
    steps = ours_args.steps

    hf_rows: Dict[Tuple[int, int], Dict[str, float]] = {}
    if ours_args.hf_cells:
        hf_dtype = torch.bfloat16 if device == "cuda" else torch.float32
        hf = bob.load_hf(model_path, device, hf_dtype)
        for cell in ours_args.hf_cells:
            bs, ctx = parse_cell(cell)
            try:
                r = bob.run_hf(hf, bs, ctx, ours_args.hf_steps, 1, device, "static")
                hf_rows[(bs, ctx)] = {"prefill_s": r.prefill_s, "step_s": r.decode_step_s}
                print(f"[hf] {bs}x{ctx}: {hf_rows[(bs, ctx)]}", flush=True)
            except torch.OutOfMemoryError:
                print(f"[hf] {bs}x{ctx}: out of memory", flush=True)
        del hf
        bob.release_memory()

    longest = max(ours_args.context + ours_args.prefill) + 2 * steps + 8
    t0 = time.perf_counter()
    runner = bob.make_runner(args, model_path, max(args.batch_size), longest)
    facts = bob.model_facts(runner)
    pool = runner.max_total_num_tokens
    print(
        f"[ours] load+pools+graphs {time.perf_counter() - t0:.1f}s; max_total_num_tokens={pool}, "
        f"kv {facts.kv_bytes_per_token} B/token, weights {facts.weight_bytes / GB:.2f} GB",
        flush=True,
    )
    cells = []
    for ctx in ours_args.context:
        for bs in args.batch_size:
            row = dict(batch_size=bs, context=ctx)
            if bs * (ctx + 4 * steps + 8) > pool:
                row["fits"] = False
                cells.append(row)
                continue
            synced, piped = decode_cell(runner, bs, ctx, steps)
            kv = bs * (ctx + steps) * facts.kv_bytes_per_token  # mid-measurement length
            floor = (facts.weight_bytes + kv) / bw
            row.update(
                fits=True,
                step_s=synced,
                pipelined_s=piped,
                floor_s=floor,
                kv_share=kv / (facts.weight_bytes + kv),
                ratio=synced / floor,
                pipelined_ratio=piped / floor,
            )
            hf = hf_rows.get((bs, ctx))
            if hf:
                row["hf_step_s"] = hf["step_s"]
            cells.append(row)
            print(
                f"[ours] bs {bs} ctx {ctx}: {1e3 * synced:.2f} / {1e3 * piped:.2f} ms",
                flush=True,
            )
    prefills = []
    if ours_args.prefill:
        prefill_once(runner, min(ours_args.prefill), ours_args.chunk, 3)  # warm-up
    for n in ours_args.prefill:
        if n + 8 > pool or n > runner.model_config.context_len:
            prefills.append(dict(tokens=n, fits=False))
            continue
        t = prefill_once(runner, n, ours_args.chunk, 4)
        floor = facts.prefill_flops([n]) / flops
        attn = 4 * facts.head_dim * facts.num_heads * facts.num_layers * n * (n + 1) / 2
        prefills.append(
            dict(
                tokens=n,
                fits=True,
                s=t,
                floor_s=floor,
                ratio=t / floor,
                attention_share=attn / facts.prefill_flops([n]),
            )
        )
        print(f"[ours] prefill {n}: {1e3 * t:.1f} ms ({t / floor:.2f}x floor)", flush=True)

    summary = dict(
        model=args.model_config or model_path,
        device=device,
        device_name=torch.cuda.get_device_name() if device == "cuda" else "cpu",
        date=time.strftime("%Y-%m-%d %H:%M"),
        bandwidth=bw,
        matmul_flops=flops,
        weight_bytes=facts.weight_bytes,
        kv_bytes_per_token=facts.kv_bytes_per_token,
        kv_dtype=str(runner.kv_dtype),
        max_total_num_tokens=pool,
        chunk=ours_args.chunk,
        decode=cells,
        prefill=prefills,
        hf={f"{b}x{c}": v for (b, c), v in hf_rows.items()},
    )
    print_tables(summary, args.batch_size, ours_args.context)
    if args.result_file:
        with open(args.result_file, "a") as f:
            f.write(json.dumps(summary) + "\n")
    return summary


def print_tables(s: dict, batch_sizes: List[int], contexts: List[int]) -> None:
    print()
    print(
        f"model {s['model']} on {s['device_name']}, kv {s['kv_dtype']}, pool {s['max_total_num_tokens']}"
        f" tokens; copy {s['bandwidth'] / 1e12:.2f} TB/s, matrix {s['matmul_flops'] / 1e12:.0f} TFLOP/s"
    )
    print("decode step ms, synced / pipelined (step / floor of weights + KV read)")
    by = {(c["batch_size"], c["context"]): c for c in s["decode"]}
    head = "ctx / bs"
    print(f"{head:>9} " + " ".join(f"{bs:>26}" for bs in batch_sizes))
    for ctx in contexts:
        cells = []
        for bs in batch_sizes:
            c = by.get((bs, ctx))
            if not c or not c["fits"]:
                cells.append(f"{'-':>26}")
                continue
            txt = (
                f"{1e3 * c['step_s']:.2f}/{1e3 * c['pipelined_s']:.2f} "
                f"({c['ratio']:.2f}x/{c['pipelined_ratio']:.2f}x)"
            )
            cells.append(f"{txt:>26}")
        print(f"{ctx:>9} " + " ".join(cells))
    for c in s["decode"]:
        if c.get("hf_step_s"):
            print(
                f"HF static cache {c['batch_size']}x{c['context']}: {1e3 * c['hf_step_s']:.2f} ms "
                f"(ours {c['hf_step_s'] / c['step_s']:.2f}x faster synced)"
            )
    for p in s["prefill"]:
        if p["fits"]:
            print(
                f"prefill {p['tokens']} (chunk {s['chunk']}): {1e3 * p['s']:.1f} ms, floor "
                f"{1e3 * p['floor_s']:.1f} ms -> {p['ratio']:.2f}x (attention {p['attention_share']:.0%}"
                " of the FLOPs)"
            )
        else:
            print(f"prefill {p['tokens']}: does not fit")


if __name__ == "__main__":
    main()
