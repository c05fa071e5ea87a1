"""How fast a trainer's weights reach a running Engine, and what lending the GPU memory costs.

The trainer side is this process: CUDA tensors of the model's checkpoint names and shapes, handed
over by /update_weights_from_tensor's path (CUDA IPC handles, then one device copy per tensor in
the scheduler). The floor is the device copy of the same bytes at the rate measured here. Then
release_memory_occupation / resume_memory_occupation: the memory given back and the time to take
it again (the CUDA graphs are captured again on resume).

    python3 benchmark/bench_weight_sync.py --model-config llama3-8b --mem-fraction-static 0.45
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import List, Tuple

import torch
from model_configs import write_model_config

GB = 1e9


def checkpoint_shapes(cfg: dict) -> List[Tuple[str, Tuple[int, ...]]]:
    """The HF names and shapes of a Llama-style checkpoint."""
    h, i, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    hd = cfg.get("head_dim") or h // cfg["num_attention_heads"]
    q, kv = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd
    out = [("model.embed_tokens.weight", (v, h))]
    for n in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{n}."
        out += [
            (p + "input_layernorm.weight", (h,)),
            (p + "post_attention_layernorm.weight", (h,)),
            (p + "self_attn.q_proj.weight", (q, h)),
            (p + "self_attn.k_proj.weight", (kv, h)),
            (p + "self_attn.v_proj.weight", (kv, h)),
            (p + "self_attn.o_proj.weight", (h, q)),
            (p + "mlp.gate_proj.weight", (i, h)),
            (p + "mlp.up_proj.weight", (i, h)),
            (p + "mlp.down_proj.weight", (h, i)),
        ]
    out.append(("model.norm.weight", (h,)))
    if not cfg.get("tie_word_embeddings"):
        out.append(("lm_head.weight", (v, h)))
    return out


def kv_bytes_per_token(cfg: dict) -> int:
    hd = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    return 2 * cfg["num_hidden_layers"] * cfg["num_key_value_heads"] * hd * 2  # K and V, bf16


def copy_rate(nbytes: int = 1 << 31) -> float:
    a = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    b.copy_(a)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(5):
        b.copy_(a)
    torch.cuda.synchronize()
    return 5 * nbytes / (time.perf_counter() - t0)


def buckets(named: list, size: float) -> List[list]:
    out, cur, n = [], [], 0
    for name, t in named:
        cur.append((name, t))
        n += t.numel() * t.element_size()
        if n >= size:
            out.append(cur)
            cur, n = [], 0
    return out + ([cur] if cur else [])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model-config", default="llama3-8b")
    ap.add_argument("--mem-fraction-static", type=float, default=0.45)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--bucket-gb", type=float, default=1.0)
    args = ap.parse_args()

    from sglang.srt.entrypoints.engine import Engine
    from sglang.srt.weight_sync.tensor_bucket import FlattenedTensorBucket

    path = write_model_config(args.model_config)
    with open(os.path.join(path, "config.json")) as f:
        cfg = json.load(f)
    rate = copy_rate()
    torch.manual_seed(0)
    named = [
        (n, torch.randn(s, device="cuda", dtype=torch.bfloat16) * 0.02)
        for n, s in checkpoint_shapes(cfg)
    ]
    nbytes = sum(t.numel() * t.element_size() for _, t in named)
    floor_ms = nbytes / rate * 1e3
    rows = []
    with Engine(
        model_path=path,
        load_format="dummy",
        skip_tokenizer_init=True,
        mem_fraction_static=args.mem_fraction_static,
        dtype="bfloat16",
    ) as e:
        sp = {"max_new_tokens": 8, "temperature": 0, "ignore_eos": True}
        e.generate(input_ids=[1, 2, 3, 4], sampling_params=sp)
        per_bucket = buckets(named, args.bucket_gb * GB)
        t0 = time.perf_counter()
        flat = []
        for part in per_bucket:
            b = FlattenedTensorBucket(named_tensors=part)
            flat.append(
                {"flattened_tensor": b.get_flattened_tensor(), "metadata": b.get_metadata()}
            )
        torch.cuda.synchronize()
        pack_ms = (time.perf_counter() - t0) * 1e3
        for label, parts, fmt in (
            ("one call, all tensors", [named], None),
            (f"{args.bucket_gb:g} GB buckets", per_bucket, None),
            (f"{args.bucket_gb:g} GB flattened buckets", flat, "flattened_bucket"),
        ):
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                for part in parts:
                    ok, msg = e.update_weights_from_tensor(part, load_format=fmt)
                    assert ok, msg
                ms = (time.perf_counter() - t0) * 1e3
                rows.append((f"update, {label} ({len(parts)} calls)", ms, ms / floor_ms))
        rows.append(("(packing the flattened buckets, trainer side)", pack_ms, None))
        del flat
        out = e.generate(input_ids=[1, 2, 3, 4], sampling_params=sp)
        assert len(out["output_ids"]) == 8
        info = e.get_server_info()
        kv_bytes = info["max_total_num_tokens"] * kv_bytes_per_token(cfg)
        held = (info["weight_bytes"] + kv_bytes) / GB
        for _ in range(2):
            torch.cuda.synchronize()
            free0 = torch.cuda.mem_get_info()[0]
            t0 = time.perf_counter()
            ok, msg = e.release_memory_occupation()
            assert ok, msg
            rel_ms = (time.perf_counter() - t0) * 1e3
            freed = torch.cuda.mem_get_info()[0] - free0
            rows.append(
                (f"release all ({freed / GB:.1f} GB back; weights+KV {held:.1f})", rel_ms, None)
            )
            for tags, what in (
                (["weights", "kv_cache"], "resume weights + KV"),
                (["cuda_graph"], "resume graphs (captured again)"),
            ):
                t0 = time.perf_counter()
                ok, msg = e.resume_memory_occupation(tags)
                assert ok, msg
                rows.append((what, (time.perf_counter() - t0) * 1e3, None))
        out = e.generate(input_ids=[1, 2, 3, 4], sampling_params=sp)
        assert len(out["output_ids"]) == 8
    print(
        f"\n{args.model_config}: {nbytes / GB:.2f} GB of bf16 weights; device copy "
        f"{rate / 1e12:.2f} TB/s -> floor {floor_ms:.1f} ms per full update"
    )
    print(f"{'what':<48} {'ms':>9} {'x floor':>8}")
    for what, ms, ratio in rows:
        print(f"{what:<48} {ms:>9.1f} {ratio:>8.2f}" if ratio else f"{what:<48} {ms:>9.1f} {'':>8}")


if __name__ == "__main__":
    main()
