"""Offline throughput: N requests submitted at once to the in-process Engine, greedy, ignore_eos.

    python benchmark/bench_offline_throughput.py --model-config qwen3-0.6b --num-prompts 256 \
        --input-len-range 100 1024 --output-len-range 100 1024
    python benchmark/bench_offline_throughput.py --model-config qwen3-0.6b ... --disable-overlap-schedule

Input and output lengths are drawn uniformly from the given ranges (inclusive) with a fixed seed,
prompts are random token ids (the Engine runs with --skip-tokenizer-init), and weights come from
`--load-format dummy` unless --model-path is given. A warm-up batch of prompts of the same lengths
runs first (compiles the kernels, fills the allocator caches) and is not timed. Prints output tok/s and total tok/s; any
extra `--key value` flags go to the Engine (ServerArgs names, e.g. --cuda-graph-max-bs 128).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from typing import Any, Dict, List

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from model_configs import MODEL_CONFIGS, write_model_config


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--model-path")
    g.add_argument("--model-config", choices=sorted(MODEL_CONFIGS))
    p.add_argument(
        "--load-format", default=None, help="default: dummy with --model-config, auto otherwise"
    )
    p.add_argument("--num-prompts", type=int, default=256)
    p.add_argument("--input-len-range", type=int, nargs=2, default=[100, 1024])
    p.add_argument("--output-len-range", type=int, nargs=2, default=[100, 1024])
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--disable-overlap-schedule", action="store_true")
    p.add_argument(
        "--warmup-prompts",
        type=int,
        default=16,
        help="untimed prompts first, lengths from --input-len-range (enough to fill a prefill chunk)",
    )
    p.add_argument("--result-file", default=None, help="append one JSON line here")
    p.add_argument(
        "--bw", type=float, default=None, help="bytes/s for the floor (default: measure)"
    )
    p.add_argument(
        "--flops", type=float, default=None, help="FLOP/s for the floor (default: measure)"
    )
    p.add_argument(
        "--step-trace",
        default=None,
        help="write the scheduler's per-pass device timeline here and print where the time went",
    )
    p.add_argument("--tag", default="")
    args, extra = p.parse_known_args(argv)
    if args.load_format is None:
        args.load_format = "dummy" if args.model_config else "auto"
    return args, _engine_kwargs(extra)


def _engine_kwargs(extra: List[str]) -> Dict[str, Any]:
    """--some-flag VALUE / --bool-flag pairs -> ServerArgs keyword arguments (typed by the dataclass)."""
    import dataclasses

    from sglang.srt.server_args import ServerArgs

    types = {f.name: f.type for f in dataclasses.fields(ServerArgs)}
    out: Dict[str, Any] = {}
    i = 0
    while i < len(extra):
        key = extra[i].lstrip("-").replace("-", "_")
        if key not in types:
            raise SystemExit(f"unknown flag {extra[i]}")
        default = getattr(ServerArgs, key, None)
        if isinstance(default, bool) and (i + 1 == len(extra) or extra[i + 1].startswith("--")):
            out[key] = True
            i += 1
            continue
        raw = extra[i + 1]
        tname = str(types[key])
        out[key] = int(raw) if "int" in tname else float(raw) if "float" in tname else raw
        i += 2
    return out


def facts_from_config(cfg: Dict[str, Any], weight_bytes: int, kv_elem_bytes: int):
    """The model's sizes for the floor, from its config.json (the model runs in another process)."""
    from bench_one_batch import ModelFacts

    hidden, layers = cfg["hidden_size"], cfg["num_hidden_layers"]
    heads, kv_heads = (
        cfg["num_attention_heads"],
        cfg.get("num_key_value_heads", cfg["num_attention_heads"]),
    )
    head_dim = cfg.get("head_dim") or hidden // heads
    per_layer = hidden * (heads + 2 * kv_heads) * head_dim + heads * head_dim * hidden
    per_layer += 3 * hidden * cfg["intermediate_size"]
    return ModelFacts(
        weight_bytes=weight_bytes,
        layer_matmul_params=per_layer * layers,
        lm_head_params=cfg["vocab_size"] * hidden,
        num_layers=layers,
        num_heads=heads,
        head_dim=head_dim,
        kv_bytes_per_token=2 * layers * kv_heads * head_dim * kv_elem_bytes,
    )


def offline_floor(
    facts, in_lens: List[int], out_lens: List[int], max_running: int, bw: float, flops: float
) -> Dict[str, float]:
    """What the workload cannot beat, from its own lengths: every decode step reads the weights
    (at least max(out) - 1 steps, more if not all requests fit at once), every output token after
    the first reads its request's KV so far, and every prompt is one prefill's FLOPs."""
    decode_tokens = sum(o - 1 for o in out_lens)
    steps = max(max(out_lens) - 1, -(-decode_tokens // max_running))
    kv_reads = sum((o - 1) * i + (o - 1) * o // 2 for i, o in zip(in_lens, out_lens))
    parts = {
        "weights_s": steps * facts.weight_bytes / bw,
        "kv_s": kv_reads * facts.kv_bytes_per_token / bw,
        "prefill_s": facts.prefill_flops(in_lens) / flops,
    }
    parts["floor_s"] = sum(parts.values())
    parts["decode_steps"] = float(steps)
    return parts


def make_requests(n: int, in_range, out_range, vocab: int, seed: int):
    rng = random.Random(seed)
    ids, sps = [], []
    for _ in range(n):
        il = rng.randint(*in_range)
        ol = rng.randint(*out_range)
        ids.append([rng.randint(100, vocab - 100) for _ in range(il)])
        sps.append({"max_new_tokens": ol, "ignore_eos": True, "temperature": 0.0})
    return ids, sps


def main(argv=None) -> dict:
    args, extra = parse_args(argv)
    from sglang.srt.entrypoints.engine import Engine

    model_path = args.model_path or write_model_config(args.model_config)
    cfg = json.load(open(os.path.join(model_path, "config.json")))
    vocab = cfg["vocab_size"]
    bw, flops = _rates(args)
    if args.step_trace:
        from sglang.srt.managers.scheduler.step_trace import ENV

        if os.path.exists(args.step_trace):
            os.remove(args.step_trace)
        os.environ[ENV] = args.step_trace  # the scheduler process inherits it
    t0 = time.perf_counter()
    engine = Engine(
        model_path=model_path,
        load_format=args.load_format,
        skip_tokenizer_init=True,
        disable_overlap_schedule=args.disable_overlap_schedule,
        random_seed=args.seed,
        **extra,
    )
    startup = time.perf_counter() - t0
    try:
        info = engine.get_server_info()
        # Prompts of the real lengths, so the first full-chunk prefill's one-time costs (allocator
        # growth, library heuristics) are paid here and not in the timed run.
        ids, sps = make_requests(
            args.warmup_prompts, args.input_len_range, (8, 16), vocab, args.seed + 99
        )
        if ids:
            engine.generate(input_ids=ids, sampling_params=sps)
        ids, sps = make_requests(
            args.num_prompts, args.input_len_range, args.output_len_range, vocab, args.seed
        )
        for sp in sps:
            sp["temperature"] = args.temperature
        t0 = time.perf_counter()
        outs = engine.generate(input_ids=ids, sampling_params=sps)
        elapsed = time.perf_counter() - t0
        run_start = t0
        if args.step_trace:
            engine.get_server_info()  # the scheduler writes its finished passes first
    finally:
        engine.shutdown()
    out_tokens = sum(len(o["output_ids"]) for o in outs)
    expected = sum(sp["max_new_tokens"] for sp in sps)
    in_tokens = sum(len(x) for x in ids)
    res = dict(
        tag=args.tag,
        model=args.model_config or model_path,
        num_prompts=args.num_prompts,
        input_len_range=args.input_len_range,
        output_len_range=args.output_len_range,
        overlap=not args.disable_overlap_schedule,
        startup_s=startup,
        elapsed_s=elapsed,
        input_tokens=in_tokens,
        output_tokens=out_tokens,
        expected_output_tokens=expected,
        output_tok_s=out_tokens / elapsed,
        total_tok_s=(in_tokens + out_tokens) / elapsed,
        max_total_num_tokens=info.get("max_total_num_tokens"),
        device=info.get("device"),
        engine_kwargs=extra,
        date=time.strftime("%Y-%m-%d %H:%M"),
    )
    print(
        f"model {res['model']} ({args.load_format}), device {res['device']}, overlap "
        f"{'on' if res['overlap'] else 'off'}, max_total_num_tokens {res['max_total_num_tokens']}, "
        f"startup {startup:.1f}s"
    )
    print(
        f"{args.num_prompts} requests, input {in_tokens} tok, output {out_tokens} tok "
        f"(expected {expected}) in {elapsed:.2f}s: output {res['output_tok_s']:.1f} tok/s, "
        f"total {res['total_tok_s']:.1f} tok/s"
    )
    kv_elem = 1 if "fp8" in str(extra.get("kv_cache_dtype", "")) else 2
    facts = facts_from_config(cfg, int(info.get("weight_bytes") or 0), kv_elem)
    floor = offline_floor(
        facts,
        [len(x) for x in ids],
        [sp["max_new_tokens"] for sp in sps],
        int(info.get("max_running_requests") or args.num_prompts),
        bw,
        flops,
    )
    res["floor"] = dict(floor, bandwidth=bw, matmul_rate=flops)
    print(
        f"floor {floor['floor_s']:.2f}s = weights {floor['weights_s']:.2f}s "
        f"({floor['decode_steps']:.0f} steps) + KV reads {floor['kv_s']:.2f}s + prefill "
        f"{floor['prefill_s']:.2f}s (at {bw / 1e12:.2f} TB/s, {flops / 1e12:.0f} TFLOP/s): "
        f"measured / floor = {elapsed / floor['floor_s']:.2f}x"
    )
    if args.step_trace:
        res["trace"] = _trace_report(args.step_trace, run_start, facts, bw, flops)
    if out_tokens != expected:
        print("WARNING: output token count differs from the requested lengths")
    if args.result_file:
        with open(args.result_file, "a") as f:
            f.write(json.dumps(res) + "\n")
    return res


def _trace_report(path: str, run_start: float, facts, bw: float, flops: float) -> dict:
    """Print the timed run's passes against their floors (warm-up passes left out)."""
    import dataclasses

    from step_trace_report import format_summary, load, summarize

    rows = [r for r in load(path) if r["launched_s"] >= run_start]
    summary = summarize(rows, facts, bw, flops)
    print(format_summary(summary))
    return dataclasses.asdict(summary)


def _rates(args) -> tuple:
    """Copy bandwidth and matrix rate for the floor: given, or measured here before the Engine
    starts (on the same device)."""
    if args.bw and args.flops:
        return args.bw, args.flops
    import torch
    from bench_one_batch import measure_bandwidth, measure_matmul_rate

    device = "cuda" if torch.cuda.is_available() else "cpu"
    bw = args.bw or measure_bandwidth(device)
    flops = args.flops or measure_matmul_rate(device)
    if device == "cuda":
        torch.cuda.empty_cache()
    return bw, flops


if __name__ == "__main__":
    main()
