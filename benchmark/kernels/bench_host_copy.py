"""Host <-> device copy rates on CUDA: the floor for HiCache's load-back and write-down.

Rows are Llama-3-8B-shaped KV (8 kv heads x 128 dims x bf16 = 2 KiB for K and 2 KiB for V per layer);
a transfer moves N token slots of every layer. Three ways, each timed with CUDA events:
- contiguous: one cudaMemcpy of the same bytes from / to pinned memory (the link's rate);
- kernel: the row-copy kernel reading / writing pinned memory directly at scattered slots (what
  --hicache-io-backend kernel does);
- direct: the torch fallback (device gather + blocking copy + host scatter, or host gather + copy).

    python benchmark/kernels/bench_host_copy.py --tokens 4096 --layers 32
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def timed(fn, reps: int = 5) -> float:
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3 / reps


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--tokens", type=int, default=4096)
    p.add_argument("--layers", type=int, default=32)
    p.add_argument("--pool", type=int, default=65536, help="slots in each pool (scatter range)")
    p.add_argument("--out", default=None, help="append one JSON line")
    args = p.parse_args()
    from sglang.srt.mem_cache.host_pool import HostKVPool
    from sglang.srt.mem_cache.kv_transfer import KVTransfer
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool

    dev = MHATokenToKVPool(args.pool, 1, torch.bfloat16, 8, 128, args.layers, "cuda")
    host = HostKVPool.like(dev, args.pool)
    n = args.tokens
    nbytes = n * host.bytes_per_token
    g = torch.Generator().manual_seed(0)
    d_idx = torch.randperm(args.pool, generator=g)[:n] + 1
    h_idx = torch.randperm(args.pool, generator=g)[:n] + 1
    flat_h = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    flat_d = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    rows = {
        "contiguous H2D": timed(lambda: flat_d.copy_(flat_h, non_blocking=True)),
        "contiguous D2H": timed(lambda: flat_h.copy_(flat_d, non_blocking=True)),
    }
    for backend in ("kernel", "direct"):
        t = KVTransfer(dev, host, backend)
        if t.io_backend != backend:
            print(f"{backend}: unavailable here")
            continue

        def load() -> None:
            t.load_to_device(h_idx, d_idx)
            t.take_layer_waits()
            torch.cuda.current_stream().wait_stream(t.stream)

        def write() -> None:
            t.write_to_host(d_idx, h_idx)
            torch.cuda.current_stream().wait_stream(t.stream)

        rows[f"{backend} load (H2D, scattered)"] = timed(load)
        rows[f"{backend} write (D2H, scattered)"] = timed(write)
    print(f"{n} tokens x {args.layers} layers = {nbytes / 2**20:.0f} MiB per transfer")
    print(f"{'copy':<32} {'ms':>8} {'GB/s':>8}")
    for name, s in rows.items():
        print(f"{name:<32} {s * 1e3:>8.2f} {nbytes / s / 1e9:>8.1f}")
    if args.out:
        with open(args.out, "a") as f:
            rec = {k: nbytes / s / 1e9 for k, s in rows.items()}
            f.write(json.dumps({"tokens": n, "layers": args.layers, "gb_per_s": rec}) + "\n")


if __name__ == "__main__":
    main()
