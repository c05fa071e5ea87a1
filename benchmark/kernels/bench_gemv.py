"""Skinny matmuls of a Llama-3-8B decode step (M = 1 row): cuBLAS (F.linear) vs the Triton GEMV over
a sweep of tile configs, each timed as 16 back-to-back calls inside one CUDA graph (PDL on where the
device has it, so a call's weight stream may start while the previous call drains), rotating
weight copies so nothing is served from L2. Checks every config against an fp32 reference.

    python benchmark/kernels/bench_gemv.py [--out configs.json]
    python benchmark/kernels/bench_gemv.py --fp8 [--out fp8_gemv_configs.json]
    python benchmark/kernels/bench_gemv.py --mma [--bw 2.95]

Prints us per call and TB/s; --out writes the best config per (N, K) in the format gemv.py reads
from SGLANG_GEMV_CONFIGS. --fp8 sweeps the one-row FP8 GEMV (srt/layers/quantization/fp8_gemv.py)
on per-channel and 128 x 128 block-scaled weights against the conversion-based GEMV (gemv.py with
fp8 weights, its bf16 tiles) and bf16 cuBLAS; --out then writes the format of
SGLANG_FP8_GEMV_CONFIGS (keys N x K, and N x K x 128 for block scales).
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys

import torch

from sglang.srt.layers.triton_ops.gemv import gemv, gemv_ref

SHAPES = {
    "qkv": (6144, 4096),
    "o_proj": (4096, 4096),
    "gate_up": (28672, 4096),
    "down": (4096, 14336),
    "lm_head": (128256, 4096),
}
CONFIGS = [
    dict(BLOCK_N=bn, BLOCK_K=bk, num_warps=w)
    for bn, bk, w in itertools.product((4, 8, 16), (256, 512, 1024), (2, 4, 8))
]
CALLS = 16


def graph_time_us(fn, ws) -> float:
    """Median us per call of CALLS calls (cycling through the weight copies) replayed as one graph."""
    fn(ws[0])  # compile / pick heuristics outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(CALLS):
            fn(ws[i % len(ws)])
    graph.replay()
    times = []
    for _ in range(15):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        graph.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3 / CALLS)
    return statistics.median(times)


def rotating_weights(n: int, k: int) -> list:
    """Enough [n, k] bf16 weight copies (>= 300 MB in all) that a graph cycling through them reads
    each from memory, not from L2."""
    copies = max(2, int(300e6 // (n * k * 2)) + 1)
    return [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02 for _ in range(copies)]


def rotating_fp8_weights(n: int, k: int, block=None) -> list:
    """(fp8 weight, scales) copies, >= 300 MB of fp8 bytes in all, per channel or per block."""
    from sglang.srt.layers.quantization.fp8_math import quantize

    out = []
    for _ in range(max(2, int(300e6 // (n * k)) + 1)):
        q, s = quantize(torch.randn(n, k, device="cuda") * 0.02, block)
        out.append((q, s.contiguous()))
    return out


def sweep_configs(
    label: str,
    kernel,
    x: torch.Tensor,
    ws: list,
    configs: list,
    ref=None,
    baseline=None,
    tol: float = 1e-2,
) -> tuple:
    """(baseline us, [(us, config)] fastest first) of kernel(x, w, config=...) over `configs`;
    baseline(w) defaults to F.linear (cuBLAS) and ref to the fp32 product with ws[0]. Every config
    is checked against ref first (a wrong one stops the sweep), and a config that does not build
    (e.g. out of shared memory) is skipped."""
    ref = gemv_ref(x, ws[0]) if ref is None else ref
    baseline = baseline or (lambda w: torch.nn.functional.linear(x, w))
    t_cublas = graph_time_us(baseline, ws)
    results = []
    for cfg in configs:
        try:
            out = kernel(x, ws[0], config=cfg)
            err = ((out.float() - ref.float()).norm() / ref.float().norm()).item()
            if not err < tol:
                raise SystemExit(f"{label} wrong for {cfg}: rel err {err}")
            results.append((graph_time_us(lambda w, c=cfg: kernel(x, w, config=c), ws), cfg))
        except SystemExit:
            raise
        except Exception as e:  # noqa: BLE001
            print(f"{label} {cfg}: {type(e).__name__}: {str(e)[:200]}", file=sys.stderr)
    results.sort(key=lambda r: r[0])
    return t_cublas, results


FP8_CONFIGS = [
    dict(BLOCK_N=bn, BLOCK_W=bw, num_warps=w)
    for bn, bw, w in itertools.product((4, 8, 16, 32), (64, 128, 256), (4, 8))
]


def _fp8_sweep(name: str, n: int, k: int, block) -> tuple:
    """(conversion GEMV us, [(us, config)] fastest first) for one fp8 weight layout."""
    from sglang.srt.layers.quantization.fp8_gemv import fp8_gemv
    from sglang.srt.layers.quantization.fp8_math import dequantize

    ws = rotating_fp8_weights(n, k, block)
    x = torch.randn(1, k, device="cuda", dtype=torch.bfloat16)
    return sweep_configs(
        f"fp8 gemv {name}",
        lambda x, w, config: fp8_gemv(x, w[0], w[1], block, config=config),
        x,
        ws,
        FP8_CONFIGS,
        ref=x.float() @ dequantize(ws[0][0], ws[0][1], block, torch.float32).t(),
        baseline=lambda w: gemv(x, w[0], None, w_scale=w[1], scale_block=block),
    )


HALVES_CONFIGS = [
    dict(BLOCK_N=bn, BLOCK_K=bk, GROUP=g, num_warps=w)
    for bn, bk, g, w in itertools.product((8, 16, 32), (256, 512, 1024), (1, 2, 4), (4, 8))
]


def main_halves(args) -> None:
    """The f16x2 FP8 GEMV (per channel) against the word GEMV, same weights; the best tile is then
    timed without its max|x| pass (unsafe: what the pass costs). --out writes its configs."""
    from sglang.srt.layers.quantization.fp8_gemv import fp8_gemv, fp8_gemv_halves
    from sglang.srt.layers.quantization.fp8_math import dequantize

    print(f"floor: fp8 weight bytes at {args.bw} TB/s; us per call (ratio to floor)")
    print(
        f"{'matrix':8} {'floor':>6} {'word GEMV':>16} {'halves best':>16} {'no prescale':>16}  config"
    )
    best = {}
    for name in args.shapes:
        n, k = SHAPES[name]
        ws = rotating_fp8_weights(n, k)
        x = torch.randn(1, k, device="cuda", dtype=torch.bfloat16)
        t_word, results = sweep_configs(
            f"fp8 halves {name}",
            lambda x, w, config: fp8_gemv_halves(x, w[0], w[1], config=config),
            x,
            ws,
            HALVES_CONFIGS,
            ref=x.float() @ dequantize(ws[0][0], ws[0][1], None, torch.float32).t(),
            baseline=lambda w: fp8_gemv(x, w[0], w[1]),
        )
        floor = n * k / (args.bw * 1e12) * 1e6
        t_best, cfg = results[0]
        raw = dict(cfg, PRESCALE=False)
        t_raw = graph_time_us(lambda w: fp8_gemv_halves(x, w[0], w[1], config=raw), ws)
        best[f"{n}x{k}"] = cfg
        print(
            f"{name:8} {floor:6.1f} {t_word:7.1f} ({t_word / floor:.2f}x) {t_best:7.1f} "
            f"({t_best / floor:.2f}x) {t_raw:7.1f} ({t_raw / floor:.2f}x)  {cfg} "
            f"{[round(t, 1) for t, _ in results[:4]]}"
        )
    if args.out:
        with open(args.out, "w") as f:
            json.dump(best, f, indent=1)
        print(f"wrote {args.out}")


def main_fp8(args) -> None:
    """The one-row FP8 GEMV sweep; the floor is the fp8 weight bytes at --bw TB/s."""
    best, lines = {}, []
    for name in args.shapes:
        n, k = SHAPES[name]
        for block in (None, (128, 128)):
            t_old, results = _fp8_sweep(name, n, k, block)
            t_best, cfg = results[0]
            best[f"{n}x{k}" + (f"x{block[1]}" if block else "")] = cfg
            floor = n * k / (args.bw * 1e12) * 1e6
            lines.append(
                f"{name:8} {'block' if block else 'channel':8} {floor:6.1f} {t_old:7.1f} "
                f"({t_old / floor:.2f}x) {t_best:7.1f} ({t_best / floor:.2f}x)  {cfg} "
                f"{[round(t, 1) for t, _ in results[:4]]}"
            )
    print(f"floor: fp8 weight bytes at {args.bw} TB/s; us per call (ratio to floor)")
    print(f"{'matrix':8} {'scales':8} {'floor':>6} {'cvt GEMV':>16} {'word GEMV best':>16}  config")
    print("\n".join(lines))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(best, f, indent=1)
        print(f"wrote {args.out}")


MMA_CONFIGS = [
    dict(BLOCK_M=16, BLOCK_N=bn, BLOCK_K=bk, num_warps=4, num_stages=st)
    for bn, bk, st in itertools.product((16, 32, 64), (128, 256), (3, 5))
]


def main_mma(args) -> None:
    """The FP8 tensor-core kernel with the row quantized inside it (fp8_gemm.fp8_matmul_fused)
    against the word GEMV (the default one-row path) on the same weights; block scales fix
    BLOCK_K at the block width."""
    from sglang.srt.layers.quantization.fp8_gemm import fp8_matmul_fused
    from sglang.srt.layers.quantization.fp8_gemv import fp8_gemv
    from sglang.srt.layers.quantization.fp8_math import dequantize

    print(f"floor: fp8 weight bytes at {args.bw} TB/s; us per call (ratio to floor)")
    print(f"{'matrix':8} {'scales':8} {'floor':>6} {'word GEMV':>16} {'mma best':>16}  config")
    for name in args.shapes:
        n, k = SHAPES[name]
        for block in (None, (128, 128)):
            ws = rotating_fp8_weights(n, k, block)
            x = torch.randn(1, k, device="cuda", dtype=torch.bfloat16)
            cfgs = MMA_CONFIGS if block is None else [c for c in MMA_CONFIGS if c["BLOCK_K"] == 128]
            t_word, results = sweep_configs(
                f"fp8 mma {name}",
                lambda x, w, config, b=block: fp8_matmul_fused(x, w[0], w[1], b, config=config),
                x,
                ws,
                cfgs,
                ref=x.float() @ dequantize(ws[0][0], ws[0][1], block, torch.float32).t(),
                baseline=lambda w, b=block: fp8_gemv(x, w[0], w[1], b),
                tol=0.08,  # x itself is quantized to e4m3 (3 mantissa bits), ~3.6% rms
            )
            floor = n * k / (args.bw * 1e12) * 1e6
            t_best, cfg = results[0]
            print(
                f"{name:8} {'block' if block else 'channel':8} {floor:6.1f} {t_word:7.1f} "
                f"({t_word / floor:.2f}x) {t_best:7.1f} ({t_best / floor:.2f}x)  {cfg} "
                f"{[round(t, 1) for t, _ in results[:4]]}",
                flush=True,
            )
            del ws
            torch.cuda.empty_cache()


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--fp8", action="store_true")
    ap.add_argument(
        "--halves", action="store_true", help="the experimental f16x2 FP8 GEMV vs the word GEMV"
    )
    ap.add_argument(
        "--mma", action="store_true", help="the FP8 tensor-core kernel, x quantized inside it"
    )
    ap.add_argument("--bw", type=float, default=4.2, help="TB/s for the fp8 floor")
    # lm_head stays bf16 under --quantization fp8
    ap.add_argument("--shapes", nargs="+", default=["qkv", "o_proj", "gate_up", "down"])
    args = ap.parse_args(argv)
    if args.halves:
        return main_halves(args)
    if args.mma:
        return main_mma(args)
    if args.fp8:
        return main_fp8(args)
    best_cfgs, rows = {}, []
    for name, (n, k) in SHAPES.items():
        ws = rotating_weights(n, k)
        x = torch.randn(1, k, device="cuda", dtype=torch.bfloat16)
        t_torch, results = sweep_configs(f"gemv {name}", gemv, x, ws, CONFIGS)
        t_best, cfg = results[0]
        best_cfgs[f"{n}x{k}"] = cfg
        gb = n * k * 2 / 1e9
        rows.append(
            (
                name,
                n,
                k,
                t_torch,
                gb / t_torch * 1e3,
                t_best,
                gb / t_best * 1e3,
                cfg,
                [f"{t:.1f}" for t, _ in results[:5]],
            )
        )
    print(
        f"{'matrix':8} {'N x K':>12} {'cuBLAS us':>9} {'TB/s':>5} {'gemv us':>8} {'TB/s':>5}  best config (top-5 us)"
    )
    for r in rows:
        print(
            f"{r[0]:8} {r[1]:>5}x{r[2]:<6} {r[3]:9.2f} {r[4]:5.2f} {r[5]:8.2f} {r[6]:5.2f}  {r[7]} {r[8]}"
        )
    if args.out:
        with open(args.out, "w") as f:
            json.dump(best_cfgs, f, indent=1)
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
