"""Skinny matmuls of a Llama-3-8B decode step (M = 1..4 rows): torch F.linear (cuBLAS) vs the Triton
GEMV, checked against an fp32 reference, timed over rotating weight copies (no L2 reuse)."""

from __future__ import annotations

import itertools

import torch
import triton.testing

from sglang.srt.layers.triton_ops.gemv import gemv, gemv_ref

SHAPES = {"qkv": (6144, 4096), "o_proj": (4096, 4096), "gate_up": (28672, 4096), "down": (4096, 14336),
          "lm_head": (128256, 4096)}
CONFIGS = [dict(BLOCK_N=bn, BLOCK_K=bk, num_warps=w) for bn, bk, w in
           itertools.product((4, 8, 16), (256, 512, 1024), (4, 8))]


def main() -> None:
    dev = "cuda"
    rows = []
    for name, (n, k) in SHAPES.items():
        copies = max(2, int(2 * 60e6 // (n * k * 2)) + 1)
        ws = [torch.randn(n, k, device=dev, dtype=torch.bfloat16) * 0.02 for _ in range(copies)]
        for m in (1, 4):
            x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
            ref = gemv_ref(x, ws[0])
            it = itertools.cycle(ws)
            t_torch = triton.testing.do_bench(lambda: torch.nn.functional.linear(x, next(it)), return_mode="median")
            best = (float("inf"), None)
            for cfg in CONFIGS:
                out = gemv(x, ws[0], config=cfg)
                err = ((out.float() - ref.float()).norm() / ref.float().norm()).item()
                if not err < 1e-2:
                    raise SystemExit(f"gemv wrong for {name} m={m} {cfg}: rel err {err}")
                t = triton.testing.do_bench(lambda: gemv(x, next(it), config=cfg), return_mode="median")
                best = min(best, (t, cfg), key=lambda z: z[0])
            gb = n * k * 2 / 1e9
            rows.append((name, m, t_torch * 1e3, gb / t_torch * 1e3 / 1e3, best[0] * 1e3, gb / best[0] * 1e3 / 1e3,
                         best[1]))
    print(f"{'matrix':10} {'M':>2} {'torch us':>9} {'TB/s':>6} {'gemv us':>9} {'TB/s':>6}  best config")
    for r in rows:
        print(f"{r[0]:10} {r[1]:>2} {r[2]:9.1f} {r[3]:6.2f} {r[4]:9.1f} {r[5]:6.2f}  {r[6]}")


if __name__ == "__main__":
    main()
