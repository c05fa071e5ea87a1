"""Triton attention and fused-op kernels on one GPU: correctness first, then time against floors.

    python benchmark/kernels/bench_attention.py            # checks + tables, ~1 min on an H200
    python benchmark/kernels/bench_attention.py --sweep    # + launch-config sweeps (a few minutes)

Decode: Llama-3-8B heads (H=32, H_kv=8, D=128, bf16), bs 1/8/64/256 x context 512/4096, KV in
randomly scattered pool slots. Compared with (a) the bytes-read floor (K+V+slot ids+q+o at
--bw, default 4.24 TB/s) and (b) torch: gather K/V through req_to_token, then SDPA.
Extend: a 4096-token prompt (and two prefix-cached batches) against the FLOP floor (--flops,
default 790 TFLOP/s dense bf16) and torch SDPA (flash, causal) where it applies.
Fused ops: RMSNorm, residual-add RMSNorm, SiLU-and-mul, RoPE, KV store vs torch eager.

Timing: every kernel is run for several "layers" with distinct buffers (enough that the data of all
layers exceeds L2, as in a real forward pass), captured once in a CUDA graph, and the median graph
replay time is divided by the layer count: no launch overhead, no L2 reuse between layers.
If graph capture fails the script falls back to triton.testing.do_bench (eager, median) and
marks the row with '*'. Exit status 1 if any correctness check fails.
"""

from __future__ import annotations

import argparse
import itertools
import math
import statistics
import sys
import time
from typing import Callable, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
import triton

from sglang.srt.layers.attention.triton_backend import max_kv_splits_for
from sglang.srt.layers.attention.triton_ops.decode_attention import (
    compute_num_kv_splits,
    decode_attention_fwd,
    decode_attention_ref,
    decode_head_programs,
)
from sglang.srt.layers.attention.triton_ops.extend_attention import (
    extend_attention_fwd,
    extend_attention_ref,
)
from sglang.srt.layers.triton_ops import (
    apply_rotary_emb_,
    apply_rotary_emb_ref,
    build_cos_sin_cache,
    fused_add_rmsnorm,
    fused_add_rmsnorm_ref,
    rmsnorm,
    rmsnorm_ref,
    silu_and_mul,
    silu_and_mul_ref,
    store_kv,
    store_kv_ref,
)

DEV = "cuda"
DT = torch.bfloat16
TOL = 1e-2
L2_BYTES_TARGET = 512 << 20  # per measured call, all layers together touch at least this much
FAILURES: List[str] = []


# ---------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------
def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    out, ref = out.double(), ref.double()
    if not torch.isfinite(out).all():
        return math.inf
    return ((out - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def check(label: str, err: float, tol: float = TOL) -> str:
    ok = err < tol
    if not ok:
        FAILURES.append(f"{label}: rel_err {err:.2e}")
    return f"{err:.1e}" + ("" if ok else " FAIL")


def layers_for(bytes_per_layer: int, cap: int = 32) -> int:
    return max(1, min(cap, math.ceil(L2_BYTES_TARGET / max(1, bytes_per_layer))))


def _event_time(fn: Callable[[], None], reps: int) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / reps


def time_layers(calls: Sequence[Callable[[], None]]) -> Tuple[float, str]:
    """Median ms per call when all `calls` (one per layer) run back to back; (ms, '' | '*')."""
    for c in calls:  # compile + warm outside the capture
        c()
    torch.cuda.synchronize()
    try:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for c in calls:
                c()
        graph.replay()
        torch.cuda.synchronize()
        reps = max(1, min(200, int(20.0 / max(_event_time(graph.replay, 1), 1e-3))))
        times = [_event_time(graph.replay, reps) for _ in range(7)]
        return statistics.median(times) / len(calls), ""
    except Exception as e:  # noqa: BLE001 - some torch paths are not capturable: fall back to eager timing
        print(f"    (graph capture failed: {type(e).__name__}: {str(e)[:120]}; timing eagerly)")
        torch.cuda.synchronize()

        def all_layers():
            for c in calls:
                c()

        try:
            ms = triton.testing.do_bench(all_layers, return_mode="median")
        except TypeError:  # older do_bench without return_mode
            ms = triton.testing.do_bench(all_layers, quantiles=[0.5])[0]
        return ms / len(calls), "*"


def fmt_us(ms: float, mark: str = "") -> str:
    return f"{ms * 1e3:9.1f}{mark or ' '}"


# ---------------------------------------------------------------------------------------------
# Decode
# ---------------------------------------------------------------------------------------------
# (H, H_kv, D, bs, ctx, grouped): Llama-3-8B heads, then MHA (Llama-2-7B heads) with the per-head
# kernel vs the grouped (tl.dot) kernel at group size 1.
DECODE_CASES = [(32, 8, 128, bs, ctx, None) for ctx in (512, 4096) for bs in (1, 8, 64, 256)]
DECODE_CASES += [(32, 32, 128, bs, 4096, grouped) for bs in (8, 64) for grouped in (False, True)]


class DecodeSetup:
    """bs requests of `ctx` tokens each (or of the lengths in `lens`) in randomly permuted pool
    slots, `n_layers` K/V buffer pairs."""

    def __init__(
        self,
        bs: int,
        ctx: int,
        h: int,
        hkv: int,
        d: int,
        max_kv_splits: int,
        n_layers: int,
        seed: int = 0,
        lens: Optional[Sequence[int]] = None,
    ):
        g = torch.Generator(device=DEV).manual_seed(seed)
        lens = list(lens) if lens is not None else [ctx] * bs
        total = sum(lens)
        self.bs, self.ctx, self.h, self.hkv, self.d, self.max_kv_splits = (
            bs,
            max(lens),
            h,
            hkv,
            d,
            max_kv_splits,
        )
        self.total = total
        self.k = [
            torch.randn((total + 1, hkv, d), device=DEV, dtype=DT, generator=g)
            for _ in range(n_layers)
        ]
        self.v = [
            torch.randn((total + 1, hkv, d), device=DEV, dtype=DT, generator=g)
            for _ in range(n_layers)
        ]
        self.req_to_token = torch.zeros((bs + 1, self.ctx + 16), dtype=torch.int32, device=DEV)
        slots = torch.randperm(total, device=DEV, generator=g).to(torch.int32) + 1
        at = 0
        for i, n in enumerate(lens):
            self.req_to_token[i + 1, :n] = slots[at : at + n]
            at += n
        self.rows = torch.randperm(bs, device=DEV, generator=g) + 1
        # Row r of req_to_token holds lens[r - 1] tokens; request i reads row rows[i].
        self.seq_lens = torch.tensor(lens, dtype=torch.int64, device=DEV)[self.rows - 1]
        self.q = torch.randn((bs, h, d), device=DEV, dtype=DT, generator=g)
        self.o = torch.empty((bs, h, d), device=DEV, dtype=DT)
        self.logits = torch.empty((bs, h, max_kv_splits, d), device=DEV, dtype=torch.float32)
        self.lse = torch.empty((bs, h, max_kv_splits), device=DEV, dtype=torch.float32)
        self.num_kv_splits = compute_num_kv_splits(self.seq_lens, h, hkv, max_kv_splits)
        self.scale = 1.0 / math.sqrt(d)

    def floor_bytes(self) -> int:
        tokens = self.total
        return tokens * self.hkv * 2 * self.d * 2 + tokens * 4 + 2 * self.bs * self.h * self.d * 2

    def triton_call(
        self, layer: int, grouped: Optional[bool] = None, config: Optional[dict] = None
    ):
        def call():
            decode_attention_fwd(
                self.q,
                self.k[layer],
                self.v[layer],
                self.o,
                self.req_to_token,
                self.rows,
                self.seq_lens,
                self.logits,
                self.lse,
                self.num_kv_splits,
                self.max_kv_splits,
                self.scale,
                grouped=grouped,
                config=config,
            )

        return call

    def torch_call(self, layer: int):
        """Gather the whole context of every request, then SDPA (equal lengths: no mask needed)."""

        def call():
            idx = self.req_to_token[self.rows, : self.ctx].long()  # [bs, ctx]
            k = self.k[layer][idx].transpose(1, 2)  # [bs, hkv, ctx, d]
            v = self.v[layer][idx].transpose(1, 2)
            return F.scaled_dot_product_attention(
                self.q.unsqueeze(2), k, v, scale=self.scale, enable_gqa=True
            ).squeeze(2)

        return call


def bench_decode(args) -> None:
    print(
        f"\n== Decode attention (bf16, random slots; floor = bytes / {args.bw / 1e12:.2f} TB/s) =="
    )
    hdr = (
        f"{'heads':>9} {'bs':>4} {'ctx':>5} {'splits':>6} {'err_ref':>9} {'err_sdpa':>9} {'triton_us':>10} "
        f"{'floor_us':>9} {'%floor':>7} {'GB/s':>7} {'torch_us':>10} {'speedup':>7}"
    )
    print(hdr)
    for h, hkv, d, bs, ctx, grouped in DECODE_CASES:
        per_layer = bs * ctx * hkv * 2 * d * 2
        n_layers = layers_for(per_layer)
        s = DecodeSetup(bs, ctx, h, hkv, d, args.max_kv_splits, n_layers)
        s.triton_call(0, grouped)()
        ref = decode_attention_ref(s.q, s.k[0], s.v[0], s.req_to_token, s.rows, s.seq_lens, s.scale)
        label = f"decode {h}/{hkv} bs{bs} ctx{ctx}" + (
            "" if grouped is None else f" grouped={grouped}"
        )
        e_ref = check(label, rel_err(s.o, ref))
        sdpa_out = s.torch_call(0)()
        e_sdpa = check(label + " vs sdpa", rel_err(s.o, sdpa_out.float()))
        t_ms, mark = time_layers([s.triton_call(i, grouped) for i in range(n_layers)])
        torch_ms, tmark = time_layers([s.torch_call(i) for i in range(n_layers)])
        floor_ms = s.floor_bytes() / args.bw * 1e3
        splits = int(s.num_kv_splits.max().item())
        name = f"{h}/{hkv}" + ("" if grouped is None else ("/grp" if grouped else "/ph"))
        print(
            f"{name:>9} {bs:>4} {ctx:>5} {splits:>6} {e_ref:>9} {e_sdpa:>9} {fmt_us(t_ms, mark)} "
            f"{floor_ms * 1e3:9.1f} {100 * floor_ms / t_ms:6.0f}% {s.floor_bytes() / t_ms / 1e6:7.0f} "
            f"{fmt_us(torch_ms, tmark)} {torch_ms / t_ms:6.1f}x"
        )
        del s
        torch.cuda.empty_cache()


# ---------------------------------------------------------------------------------------------
# Extend
# ---------------------------------------------------------------------------------------------
class ExtendSetup:
    def __init__(
        self,
        prefix_lens: Sequence[int],
        extend_lens: Sequence[int],
        h: int,
        hkv: int,
        d: int,
        n_layers: int,
        seed: int = 0,
    ):
        g = torch.Generator(device=DEV).manual_seed(seed)
        self.prefix_lens, self.extend_lens, self.h, self.hkv, self.d = (
            list(prefix_lens),
            list(extend_lens),
            h,
            hkv,
            d,
        )
        bs = len(prefix_lens)
        seq = [p + e for p, e in zip(prefix_lens, extend_lens)]
        total = sum(seq)
        n_tok = sum(extend_lens)
        self.k_buf = torch.randn((total + 1, hkv, d), device=DEV, dtype=DT, generator=g)
        self.v_buf = torch.randn((total + 1, hkv, d), device=DEV, dtype=DT, generator=g)
        self.req_to_token = torch.zeros((bs + 1, max(seq) + 16), dtype=torch.int32, device=DEV)
        slots = (torch.randperm(total, device=DEV, generator=g) + 1).to(torch.int32)
        at = 0
        for i, n in enumerate(seq):
            self.req_to_token[i + 1, :n] = slots[at : at + n]
            at += n
        self.rows = torch.arange(1, bs + 1, device=DEV)
        self.seq_lens = torch.tensor(seq, device=DEV)
        self.ext = torch.tensor(extend_lens, device=DEV)
        self.start = torch.cumsum(self.ext, 0) - self.ext
        self.max_ext = max(extend_lens)
        self.q = [
            torch.randn((n_tok, h, d), device=DEV, dtype=DT, generator=g) for _ in range(n_layers)
        ]
        self.kx = [
            torch.randn((n_tok, hkv, d), device=DEV, dtype=DT, generator=g) for _ in range(n_layers)
        ]
        self.vx = [
            torch.randn((n_tok, hkv, d), device=DEV, dtype=DT, generator=g) for _ in range(n_layers)
        ]
        self.o = torch.empty((n_tok, h, d), device=DEV, dtype=DT)
        self.scale = 1.0 / math.sqrt(d)

    def flops(self) -> float:
        pairs = sum(e * p + e * (e + 1) / 2 for p, e in zip(self.prefix_lens, self.extend_lens))
        return 4.0 * self.h * self.d * pairs

    def triton_call(self, layer: int, config: Optional[dict] = None):
        def call():
            extend_attention_fwd(
                self.q[layer],
                self.kx[layer],
                self.vx[layer],
                self.o,
                self.k_buf,
                self.v_buf,
                self.req_to_token,
                self.rows,
                self.seq_lens,
                self.ext,
                self.start,
                self.max_ext,
                self.scale,
                config=config,
            )

        return call

    def sdpa_call(self, layer: int):
        """Only for a single request without prefix: flash SDPA, causal, GQA."""

        def call():
            q = self.q[layer].transpose(0, 1).unsqueeze(0)
            k = self.kx[layer].transpose(0, 1).unsqueeze(0)
            v = self.vx[layer].transpose(0, 1).unsqueeze(0)
            return F.scaled_dot_product_attention(
                q, k, v, is_causal=True, scale=self.scale, enable_gqa=True
            )

        return call

    def ref(self) -> torch.Tensor:
        return extend_attention_ref(
            self.q[0],
            self.kx[0],
            self.vx[0],
            self.k_buf,
            self.v_buf,
            self.req_to_token,
            self.rows,
            self.seq_lens,
            self.ext,
            self.start,
            self.scale,
        )


EXTEND_HEADS = (32, 8, 128)
EXTEND_CASES = [
    ("1 x 4096 prompt", [0], [4096]),
    ("4 x (3072 cached + 1024 new)", [3072] * 4, [1024] * 4),
    ("16 x (2048 cached + 256 new)", [2048] * 16, [256] * 16),
]


def bench_extend(args) -> None:
    print(
        f"\n== Extend attention (Llama-3-8B heads 32/8/128, bf16; floor = FLOPs / {args.flops / 1e12:.0f} TFLOP/s) =="
    )
    print(
        f"{'case':>30} {'err_ref':>9} {'triton_us':>10} {'floor_us':>9} {'%floor':>7} {'TFLOP/s':>8} "
        f"{'sdpa_us':>10} {'vs_sdpa':>7}"
    )
    for name, prefix, ext in EXTEND_CASES:
        s = ExtendSetup(prefix, ext, *EXTEND_HEADS, n_layers=4)
        s.triton_call(0)()
        err = check(f"extend {name}", rel_err(s.o, s.ref()))
        with_sdpa = len(prefix) == 1 and prefix[0] == 0
        if with_sdpa:  # before timing: the timed layers all write s.o
            out = s.sdpa_call(0)()[0].transpose(0, 1)
            check(f"extend {name} vs sdpa", rel_err(s.o, out.float()))
        t_ms, mark = time_layers([s.triton_call(i) for i in range(4)])
        floor_ms = s.flops() / args.flops * 1e3
        sdpa = ""
        if with_sdpa:
            sd_ms, smark = time_layers([s.sdpa_call(i) for i in range(4)])
            sdpa = f"{fmt_us(sd_ms, smark)} {sd_ms / t_ms:6.2f}x"
        print(
            f"{name:>30} {err:>9} {fmt_us(t_ms, mark)} {floor_ms * 1e3:9.1f} {100 * floor_ms / t_ms:6.0f}% "
            f"{s.flops() / t_ms / 1e9:8.0f} {sdpa}"
        )
        del s
        torch.cuda.empty_cache()


# ---------------------------------------------------------------------------------------------
# Fused ops
# ---------------------------------------------------------------------------------------------
def _outputs_err(tri, ref, args: tuple, outputs: Callable) -> float:
    """Run triton and torch on separate clones (several ops work in place); compare outputs(args, ret)."""
    a1 = tuple(t.clone() for t in args)
    a2 = tuple(t.clone() for t in args)
    got, want = outputs(a1, tri(*a1)), outputs(a2, ref(*a2))
    return max(rel_err(x, y.float()) for x, y in zip(got, want))


FUSED_SHAPES = (
    4096,
    14336,
    32,
    8,
    128,
)  # Llama-3-8B: hidden, intermediate, q heads, kv heads, head dim
FUSED_TOKENS = (256, 8192)  # a decode batch, a prefill chunk


def bench_fused(args) -> None:
    print("\n== Fused ops (bf16) vs torch eager (the *_ref twins) ==")
    print(f"{'op':>34} {'err':>9} {'triton_us':>10} {'GB/s':>7} {'torch_us':>10} {'speedup':>7}")
    hidden, inter, hq, hk, d = FUSED_SHAPES
    cache = build_cos_sin_cache(8192, d, base=500000.0, device=DEV)
    pool_slots = 1 << 20
    g = torch.Generator(device=DEV).manual_seed(0)
    rnd = lambda *shape: torch.randn(shape, device=DEV, dtype=DT, generator=g)
    kb = torch.zeros((pool_slots, hk, d), device=DEV, dtype=DT)
    vb = torch.zeros((pool_slots, hk, d), device=DEV, dtype=DT)
    w = 1 + 0.1 * rnd(hidden)
    ret = lambda a, r: (r,)
    for n in FUSED_TOKENS:
        pos = torch.randint(0, 8192, (n,), device=DEV, generator=g)
        loc = torch.randperm(pool_slots - 1, device=DEV, generator=g)[:n] + 1
        # (name, bytes moved, input builder, triton fn, torch fn, outputs to compare)
        ops = [
            (
                f"rmsnorm [{n},{hidden}]",
                2 * n * hidden * 2,
                lambda: (rnd(n, hidden),),
                lambda x: rmsnorm(x, w, 1e-6),
                lambda x: rmsnorm_ref(x, w, 1e-6),
                ret,
            ),
            (
                f"fused_add_rmsnorm [{n},{hidden}]",
                4 * n * hidden * 2,
                lambda: (rnd(n, hidden), rnd(n, hidden)),
                lambda x, r: fused_add_rmsnorm(x, r, w, 1e-6),
                lambda x, r: fused_add_rmsnorm_ref(x, r, w, 1e-6),
                lambda a, r: (r, a[1]),
            ),  # output and the updated residual
            (
                f"silu_and_mul [{n},{2 * inter}]",
                3 * n * inter * 2,
                lambda: (rnd(n, 2 * inter),),
                silu_and_mul,
                silu_and_mul_ref,
                ret,
            ),
            (
                f"rope q[{n},{hq}x{d}] k[{n},{hk}x{d}]",
                2 * n * (hq + hk) * d * 2 + n * d * 4,
                lambda: (rnd(n, hq * d), rnd(n, hk * d)),
                lambda q, k: apply_rotary_emb_(pos, q, k, d, cache),
                lambda q, k: apply_rotary_emb_ref(pos, q, k, d, cache),
                lambda a, r: r,
            ),  # both return (q, k)
            (
                f"store_kv [{n},{hk},{d}]",
                4 * n * hk * d * 2,
                lambda: (rnd(n, hk, d), rnd(n, hk, d)),
                lambda k, v: store_kv(kb, vb, loc, k, v),
                lambda k, v: store_kv_ref(kb, vb, loc, k, v),
                lambda a, r: (kb[loc].clone(), vb[loc].clone()),
            ),
        ]
        for name, nbytes, make, tri, ref, outputs in ops:
            n_layers = layers_for(nbytes)
            inputs = [make() for _ in range(n_layers)]
            if name.startswith(
                "store_kv"
            ):  # poison the target rows: the triton run must write them
                kb[loc], vb[loc] = float("nan"), float("nan")
            err = check(name, _outputs_err(tri, ref, inputs[0], outputs))
            t_ms, mark = time_layers([(lambda a=a: tri(*a)) for a in inputs])
            r_ms, rmark = time_layers([(lambda a=a: ref(*a)) for a in inputs])
            print(
                f"{name:>34} {err:>9} {fmt_us(t_ms, mark)} {nbytes / t_ms / 1e6:7.0f} {fmt_us(r_ms, rmark)} "
                f"{r_ms / t_ms:6.1f}x"
            )
            del inputs


# ---------------------------------------------------------------------------------------------
# Sweeps (opt-in)
# ---------------------------------------------------------------------------------------------
# Ragged batches (the offline workload's and a chat server's): (label, (H, H_kv, D), lengths).
def _ragged_cases() -> List[Tuple[str, Tuple[int, int, int], List[int]]]:
    import random

    rng = random.Random(0)

    def uniform(n: int, lo: int, hi: int) -> List[int]:
        return [rng.randint(lo, hi) for _ in range(n)]

    qwen, llama = (16, 8, 128), (32, 8, 128)
    return [
        ("256 U[100,2048]", qwen, uniform(256, 100, 2048)),
        ("128 U[300,2048]", qwen, uniform(128, 300, 2048)),
        ("32 U[800,2048]", qwen, uniform(32, 800, 2048)),
        ("256 x 1100", qwen, [1100] * 256),
        ("64 U[100,2048]", llama, uniform(64, 100, 2048)),
        ("64 x 528", llama, [528] * 64),
        ("63 x 512 + 32k", llama, [512] * 63 + [32768]),
        ("8 U[512,32k]", llama, uniform(8, 512, 32768)),
    ]


# Split rules compared on ragged batches: (target programs per SM, longest split in tokens).
RAGGED_RULES = ((3, None), (3, 1024), (3, 512), (3, 256), (8, None), (16, None))


def ragged_splits(
    seq_lens: torch.Tensor, h: int, hkv: int, max_splits: int, waves: int, cap: Optional[int]
) -> torch.Tensor:
    """compute_num_kv_splits' rule, with the split length also held at or under `cap`."""
    if cap is None:
        return compute_num_kv_splits(seq_lens, h, hkv, max_splits, waves=waves)
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    hp = decode_head_programs(h, hkv)
    split_len = max(64, min(cap, -(-int(seq_lens.sum()) * hp // (num_sms * waves))))
    n = (seq_lens + split_len - 1) // split_len
    return n.clamp(1, max_splits).to(torch.int32)


def bench_ragged(args) -> None:
    """Every rule at the backend's split cap, then the rule (and a 512-token split) at each cap of
    --ragged-max-splits: a higher cap lets one long request spread over as many programs as the
    short ones, at the price of a larger workspace and stage-1 programs that exit at once."""
    print(
        f"\n== Decode attention on ragged batches, us per layer (% of the byte floor at "
        f"{args.bw / 1e12:.2f} TB/s) by split rule (waves / longest split [/ cap]), max splits =="
    )
    extra = [(3, None, m) for m in args.ragged_max_splits] + [
        (3, 512, m) for m in args.ragged_max_splits
    ]
    names = [f"w{w}/{c or '-'}" for w, c in RAGGED_RULES] + [
        f"w{w}/{c or '-'}/{m}" for w, c, m in extra
    ]
    print(f"{'batch':>18} {'heads':>8} {'floor':>7} " + " ".join(f"{n:>16}" for n in names))
    for label, (h, hkv, d), lens in _ragged_cases():
        bs = len(lens)
        lib_max = max_kv_splits_for(bs, decode_head_programs(h, hkv), 132, 16)
        rules = [(w, c, lib_max) for w, c in RAGGED_RULES] + extra
        n_layers = layers_for(sum(lens) * hkv * 2 * d * 2)
        cells, floor_ms = [], 0.0
        for cap_splits in sorted({m for _, _, m in rules}):
            s = DecodeSetup(bs, 0, h, hkv, d, cap_splits, n_layers, lens=lens)
            ref = decode_attention_ref(
                s.q, s.k[0], s.v[0], s.req_to_token, s.rows, s.seq_lens, s.scale
            )
            floor_ms = s.floor_bytes() / args.bw * 1e3
            for i, (waves, cap, m) in enumerate(rules):
                if m != cap_splits:
                    continue
                s.num_kv_splits.copy_(ragged_splits(s.seq_lens, h, hkv, m, waves, cap))
                s.triton_call(0)()
                check(f"ragged {label} w{waves}/{cap}/{m}", rel_err(s.o, ref))
                t_ms, _ = time_layers([s.triton_call(j) for j in range(n_layers)])
                picks = int(s.num_kv_splits.max())
                cell = f"{t_ms * 1e3:7.1f} ({100 * floor_ms / t_ms:3.0f}%) {picks:>2}"
                cells.append((i, cell))
            del s
            torch.cuda.empty_cache()
        print(
            f"{label:>18} {f'{h}/{hkv}':>8} {floor_ms * 1e3:7.1f} "
            + " ".join(f"{c:>16}" for _, c in sorted(cells))
        )


SWEEP_HEADS = (32, 8, 128)
SWEEP_CTX = 4096
SWEEP_BS = (1, 64, 256)


def _forced_splits(s: "DecodeSetup", splits: Optional[int]) -> None:
    """Every request gets `splits` splits (None: the backend's heuristic)."""
    if splits is None:
        compute_num_kv_splits(s.seq_lens, s.h, s.hkv, s.max_kv_splits, out=s.num_kv_splits)
    else:
        s.num_kv_splits.fill_(splits)


def sweep(args) -> None:
    h, hkv, d = SWEEP_HEADS
    ctx = args.sweep_ctx[0]
    forced = args.sweep_config_splits
    print(
        f"\n== Sweep: decode stage-1 config (heads {h}/{hkv}/{d}, ctx {ctx}, "
        f"splits {forced or 'heuristic'}) - us per call =="
    )
    configs = [
        dict(BLOCK_N=bn, num_warps=w, num_stages=st)
        for bn, w, st in itertools.product((16, 32, 64), (1, 2, 4), (1, 2, 3, 4))
    ]
    configs += [
        dict(BLOCK_N=128, num_warps=w, num_stages=st) for w, st in itertools.product((4, 8), (1, 2))
    ]
    for bs in args.sweep_bs:
        n_layers = layers_for(bs * ctx * hkv * 2 * d * 2)
        s = DecodeSetup(bs, ctx, h, hkv, d, args.max_kv_splits, n_layers)
        _forced_splits(s, forced)
        ref = decode_attention_ref(s.q, s.k[0], s.v[0], s.req_to_token, s.rows, s.seq_lens, s.scale)
        floor_ms = s.floor_bytes() / args.bw * 1e3
        results = []
        for cfg in configs:
            try:
                s.triton_call(0, config=cfg)()
                if rel_err(s.o, ref) >= TOL:
                    results.append((math.inf, cfg, "wrong"))
                    continue
                t_ms, _ = time_layers([s.triton_call(i, config=cfg) for i in range(n_layers)])
                results.append((t_ms, cfg, ""))
            except Exception as e:  # noqa: BLE001 - e.g. out of shared memory
                results.append((math.inf, cfg, type(e).__name__))
        t_default, _ = time_layers([s.triton_call(i) for i in range(n_layers)])
        results.sort(key=lambda r: r[0])
        print(
            f"  bs {bs}: floor {floor_ms * 1e3:.1f} us; default config {t_default * 1e3:.1f} us; best 6:"
        )
        for t_ms, cfg, note in results[:6]:
            print(f"    {t_ms * 1e3:8.1f} us ({100 * floor_ms / t_ms:3.0f}% floor) {cfg} {note}")
        del s
        torch.cuda.empty_cache()

    split_choices = (1, 2, 3, 4, 8)
    print(
        f"\n== Sweep: forced split counts vs the heuristic (max_kv_splits {args.max_kv_splits}), "
        f"us per layer (% of the byte floor) =="
    )
    print(
        f"{'ctx':>5} {'bs':>4} "
        + " ".join(f"{f'{n} split':>14}" for n in split_choices)
        + "   heuristic picks (waves 2 / 3 / 4)"
    )
    for ctx_i, bs in itertools.product(args.sweep_ctx, args.sweep_splits_bs):
        n_layers = layers_for(bs * ctx_i * hkv * 2 * d * 2)
        s = DecodeSetup(bs, ctx_i, h, hkv, d, args.max_kv_splits, n_layers)
        floor_ms = s.floor_bytes() / args.bw * 1e3
        cells = []
        for n in split_choices:
            _forced_splits(s, n)
            t_ms, _ = time_layers([s.triton_call(i) for i in range(n_layers)])
            cells.append(f"{t_ms * 1e3:7.1f} ({100 * floor_ms / t_ms:3.0f}%)")
        picks = [
            int(compute_num_kv_splits(s.seq_lens, h, hkv, args.max_kv_splits, waves=w).max())
            for w in (2, 3, 4)
        ]
        print(
            f"{ctx_i:>5} {bs:>4} "
            + " ".join(f"{c:>14}" for c in cells)
            + "   "
            + " / ".join(map(str, picks))
        )
        del s
        torch.cuda.empty_cache()

    if args.no_extend_sweep:
        return
    print(f"\n== Sweep: extend config ({EXTEND_CASES[0][0]}; {EXTEND_CASES[1][0]}) ==")
    ext_cfgs = [
        dict(BLOCK_M=bm, BLOCK_N=bn, num_warps=w, num_stages=st)
        for bm, bn, w, st in [
            (128, 64, 8, 2),
            (128, 64, 8, 3),
            (128, 32, 8, 2),
            (128, 128, 8, 2),
            (64, 64, 4, 2),
            (64, 64, 4, 3),
            (64, 128, 4, 2),
            (64, 32, 4, 2),
            (128, 64, 4, 2),
        ]
    ]
    for name, prefix, ext in EXTEND_CASES[:2]:
        s = ExtendSetup(prefix, ext, *EXTEND_HEADS, n_layers=2)
        ref = s.ref()
        floor_ms = s.flops() / args.flops * 1e3
        print(f"  {name}: floor {floor_ms * 1e3:.1f} us")
        for cfg in ext_cfgs:
            try:
                s.triton_call(0, cfg)()
                ok = rel_err(s.o, ref) < TOL
                t_ms, _ = time_layers([s.triton_call(i, cfg) for i in range(2)])
                print(
                    f"    {t_ms * 1e3:8.1f} us ({100 * floor_ms / t_ms:3.0f}% floor) {cfg}{'' if ok else ' WRONG'}"
                )
            except Exception as e:  # noqa: BLE001
                print(f"    {'-':>8}    {cfg} {type(e).__name__}")
        del s
        torch.cuda.empty_cache()


PACK_SHAPES = ((32, 8, 128), (16, 8, 128))  # Llama-3-8B, Qwen3-0.6B
PACK_CASES = [(bs, ctx, None) for bs in (64, 128, 256) for ctx in (512, 1024, 2048)] + [
    (256, 0, (100, 2048)),
    (128, 0, (300, 2048)),
]


def bench_pack(args) -> None:
    """KV heads per stage-1 program (KV_PACK) at the large batches where one split each is the
    rule: the fixed cost of a program against its bytes. Tiles of BLOCK_N 64 (the default) and
    128 rows; "rule" is the pack the backend picks for that batch."""
    from sglang.srt.layers.attention.triton_ops.decode_attention import kv_heads_per_program

    variants = [(1, 64), (2, 64), (4, 64), (8, 64), (2, 128), (4, 128)]
    print(
        f"\n== KV heads per decode program, us per layer (% of the byte floor at "
        f"{args.bw / 1e12:.2f} TB/s); columns pack/BLOCK_N =="
    )
    print(
        f"{'heads':>9} {'bs':>4} {'ctx':>10} {'rule':>4} "
        + "".join(f"{f'{p}/{n}':>14}" for p, n in variants)
    )
    for h, hkv, d in PACK_SHAPES:
        for bs, ctx, rng in PACK_CASES:
            g = torch.Generator().manual_seed(bs)
            lens = (
                None
                if rng is None
                else torch.randint(rng[0], rng[1] + 1, (bs,), generator=g).tolist()
            )
            per_layer = (sum(lens) if lens else bs * ctx) * hkv * 2 * d * 2
            n_layers = layers_for(per_layer)
            s = DecodeSetup(bs, ctx or rng[1], h, hkv, d, args.max_kv_splits, n_layers, lens=lens)
            ref = decode_attention_ref(
                s.q, s.k[0], s.v[0], s.req_to_token, s.rows, s.seq_lens, s.scale
            )
            floor_ms = s.floor_bytes() / args.bw * 1e3
            cells = []
            for pack, bn in variants:
                if (h // hkv) * pack > 16 or hkv % pack:
                    cells.append(f"{'-':>14}")
                    continue
                cfg = dict(KV_PACK=pack, BLOCK_N=bn, num_warps=4, num_stages=2)
                s.triton_call(0, config=cfg)()
                if rel_err(s.o, ref) >= TOL:
                    FAILURES.append(f"pack {pack}/{bn} {h}/{hkv} bs {bs}")
                    cells.append(f"{'WRONG':>14}")
                    continue
                t_ms, _ = time_layers([s.triton_call(i, config=cfg) for i in range(n_layers)])
                cells.append(f"{t_ms * 1e3:8.1f} ({100 * floor_ms / t_ms:3.0f}%)")
            label = f"{ctx}" if rng is None else f"U{list(rng)}"
            rule = kv_heads_per_program(bs, h // hkv, hkv, s.q)
            print(f"{h}/{hkv}/{d:>3} {bs:>4} {label:>10} {rule:>4} " + "".join(cells), flush=True)
            del s
            torch.cuda.empty_cache()


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--bw", type=float, default=4.24e12, help="HBM bytes/s for the decode floor")
    ap.add_argument(
        "--flops", type=float, default=790e12, help="dense bf16 FLOP/s for the extend floor"
    )
    ap.add_argument("--max-kv-splits", type=int, default=16)
    ap.add_argument(
        "--ragged-max-splits",
        type=int,
        nargs="*",
        default=[32, 64],
        help="ragged: split caps tried beside the backend's",
    )
    ap.add_argument(
        "--only",
        default="decode,extend,fused",
        help="comma list of decode,extend,fused,ragged,pack",
    )
    ap.add_argument(
        "--sweep", action="store_true", help="also sweep launch configs / split heuristic"
    )
    ap.add_argument(
        "--sweep-ctx",
        type=int,
        nargs="+",
        default=[SWEEP_CTX],
        help="context lengths of the split table (the config sweep uses the first)",
    )
    ap.add_argument(
        "--sweep-bs",
        type=int,
        nargs="+",
        default=list(SWEEP_BS),
        help="batch sizes of the config sweep",
    )
    ap.add_argument(
        "--sweep-config-splits",
        type=int,
        default=None,
        help="split count of every request in the config sweep (default: the heuristic's)",
    )
    ap.add_argument(
        "--sweep-splits-bs",
        type=int,
        nargs="+",
        default=[16, 32, 64, 128],
        help="batch sizes of the forced-split table",
    )
    ap.add_argument("--no-extend-sweep", action="store_true")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("needs a CUDA GPU", file=sys.stderr)
        return 2
    props = torch.cuda.get_device_properties(0)
    print(
        f"{props.name}, {props.multi_processor_count} SMs, torch {torch.__version__}, triton {triton.__version__}"
    )
    t0 = time.time()
    sections = {
        "decode": bench_decode,
        "extend": bench_extend,
        "fused": bench_fused,
        "ragged": bench_ragged,
        "pack": bench_pack,
    }
    for name in args.only.split(","):
        sections[name.strip()](args)
    if args.sweep:
        sweep(args)
    print(
        f"\n{time.time() - t0:.0f} s; "
        + (
            "all correctness checks passed"
            if not FAILURES
            else f"{len(FAILURES)} CHECK FAILURES:\n  " + "\n  ".join(FAILURES)
        )
    )
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
