"""Compile every Triton kernel for sm_90 (H100/H200) without a GPU, at the launch configs used on CUDA.

The interpreter checks (kernel_checks.py) prove the math but not that the code compiles: the
interpreter accepts things the compiler rejects, and tile configs can spill registers or overflow
shared memory. This script runs the real compiler (TTIR -> TTGIR -> PTX -> cubin) for target
cuda:90 and prints registers / spills / shared memory per kernel (from `ptxas -v`).
    python test/kernel_compile_check.py            # exit 1 if any kernel fails to compile
Must run WITHOUT TRITON_INTERPRET. Pointer args are assumed 16-byte aligned and strides multiples
of 16, as the JIT specialises them at runtime for the usual shapes (bf16, head dims of 64/80/128).
"""

from __future__ import annotations

import itertools
import os
import re
import subprocess
import sys
import tempfile
import time
from typing import Dict, Iterable, Optional

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from sglang.srt.layers.attention.triton_ops import decode_attention as da
from sglang.srt.layers.attention.triton_ops import extend_attention as ea
from sglang.srt.layers.quantization import fp8_gemm, fp8_gemv, fp8_kernels
from sglang.srt.layers.triton_ops import (
    activation,
    gemv,
    invariant_matmul,
    kv_store,
    rms_norm,
    rotary,
    sampling,
    small_m_gemm,
)

TARGET = GPUTarget("cuda", 90, 32)


def _ptxas_info(ptx: str) -> str:
    try:
        from triton.backends.nvidia.compiler import get_ptxas

        with tempfile.NamedTemporaryFile("w", suffix=".ptx", delete=False) as f:
            f.write(ptx)
        out = subprocess.run(
            [get_ptxas(90).path, "-v", "--gpu-name=sm_90a", f.name, "-o", os.devnull],
            capture_output=True,
            text=True,
            timeout=120,
        )
        os.unlink(f.name)
        regs = re.findall(r"Used (\d+) registers", out.stderr)
        spills = re.findall(r"(\d+) bytes spill stores", out.stderr)
        return f"regs={','.join(regs)} spill_bytes={','.join(spills)}"
    except Exception as e:  # noqa: BLE001 - ptxas location differs across triton versions: informational only
        return f"(no ptxas info: {type(e).__name__})"


def compile_kernel(
    label: str,
    fn,
    ptr_types: Dict[str, str],
    consts: Dict[str, object],
    num_warps: int,
    num_stages: int,
    float_args: Iterable[str] = (),
    divisible: Iterable[str] = (),
) -> bool:
    """Compile `fn`; args named in ptr_types are pointers, float_args fp32, constexprs from consts,
    every other arg i32 (multiples of 16 when named stride* or in `divisible`). Kernels with a PDL
    switch are compiled with it on (the sm_90 launch path). Returns False (and prints the error) if
    compilation fails."""
    if "PDL" in fn.arg_names and "PDL" not in consts:
        consts = {**consts, "PDL": True}
    sig = {}
    for name in fn.arg_names:
        if name in consts:
            sig[name] = "constexpr"
        elif name in ptr_types:
            sig[name] = ptr_types[name]
        elif name in float_args:
            sig[name] = "fp32"
        else:
            sig[name] = "i32"
    attrs = {
        (i,): [["tt.divisibility", 16]]
        for i, n in enumerate(fn.arg_names)
        if sig[n].startswith("*") or n.startswith("stride") or n in divisible
    }
    t0 = time.perf_counter()
    try:
        c = triton.compile(
            ASTSource(fn=fn, signature=sig, constexprs=consts, attrs=attrs),
            target=TARGET,
            options=dict(
                num_warps=num_warps, num_stages=num_stages, launch_pdl=bool(consts.get("PDL"))
            ),
        )
    except Exception as e:  # noqa: BLE001
        print(f"FAIL {label}: {type(e).__name__}: {str(e)[:3000]}")
        return False
    ptx = c.asm["ptx"]
    mma = "wgmma" if "wgmma" in ptx else ("mma.sync" if "mma.sync" in ptx else "-")
    if consts.get("PDL") and "griddepcontrol.wait" not in ptx:
        print(f"FAIL {label}: compiled with PDL but the PTX has no griddepcontrol.wait")
        return False
    print(
        f"ok   {label:<44} smem={c.metadata.shared:>6} {_ptxas_info(ptx)} mma={mma} ({time.perf_counter() - t0:.1f}s)"
    )
    return True


EXT_FLOATS = ("sm_scale", "logit_cap", "prefix_k_scale", "prefix_v_scale")
STORE_FLOATS = ("inv_k_scale", "inv_v_scale")


def main(argv: Optional[list] = None) -> int:
    if os.environ.get("TRITON_INTERPRET") == "1":
        print("run without TRITON_INTERPRET", file=sys.stderr)
        return 2
    ok = True
    for dt in ("bf16", "fp16"):
        p = lambda *names, dt=dt: {n: f"*{dt}" for n in names}
        attn = {"ReqToToken": "*i32", "ReqPoolIdx": "*i64", "SeqLens": "*i64"}
        dec_ptrs = {
            **p("Q", "K", "V", "O"),
            **attn,
            "NumSplits": "*i32",
            "Mid": "*fp32",
            "MidLse": "*fp32",
        }
        ext_ptrs = {
            **p("Q", "KExt", "VExt", "O", "KBuf", "VBuf"),
            **attn,
            "ExtLens": "*i64",
            "ExtStart": "*i64",
        }
        dims = ((128, 128), (64, 64), (80, 80), (256, 256)) if dt == "bf16" else ((128, 128),)
        for d, dv in dims:
            bd, bdv = triton.next_power_of_2(d), triton.next_power_of_2(dv)
            for cap in (False, True):
                tag = f"{dt} D{d}{' cap' if cap else ''}"
                cfg = da._stage1_config(bd, True, True)
                ok &= compile_kernel(
                    f"decode grouped {tag}",
                    da._decode_stage1_grouped,
                    dec_ptrs,
                    dict(
                        GROUP=4,
                        BLOCKS_PER_KV=1,
                        KV_PACK=2 if cap else 1,  # packed kv heads on half the cases
                        MAX_SPLITS=16,
                        D=d,
                        DV=dv,
                        BLOCK_H=da._GROUP_BLOCK_H,
                        BLOCK_N=cfg["BLOCK_N"] * (2 if cap else 1),  # a pack widens the tile
                        BLOCK_D=bd,
                        BLOCK_DV=bdv,
                        HAS_CAP=cap,
                        SLOT_INT64=cap,  # cover both slot widths without doubling the list
                        DOT_PREC="tf32",
                    ),
                    cfg["num_warps"],
                    cfg["num_stages"],
                    ("sm_scale", "logit_cap"),
                )
                cfg = da._stage1_config(bd, False, True)
                ok &= compile_kernel(
                    f"decode per-head {tag}",
                    da._decode_stage1_per_head,
                    dec_ptrs,
                    dict(
                        GROUP=1,
                        MAX_SPLITS=16,
                        D=d,
                        DV=dv,
                        BLOCK_N=cfg["BLOCK_N"],
                        BLOCK_D=bd,
                        BLOCK_DV=bdv,
                        HAS_CAP=cap,
                        SLOT_INT64=cap,
                    ),
                    cfg["num_warps"],
                    cfg["num_stages"],
                    ("sm_scale", "logit_cap"),
                )
                cfg = ea._extend_config(bd, bdv, True)
                ok &= compile_kernel(
                    f"extend {tag}",
                    ea._extend_attention_kernel,
                    ext_ptrs,
                    dict(
                        GROUP=4,
                        D=d,
                        DV=dv,
                        BLOCK_M=cfg["BLOCK_M"],
                        BLOCK_N=cfg["BLOCK_N"],
                        BLOCK_D=bd,
                        BLOCK_DV=bdv,
                        HAS_CAP=cap,
                        SLOT_INT64=cap,
                        SCALED_PREFIX=cap,
                        KEYS_FROM_POOL=cap,
                        DOT_PREC="tf32",
                    ),
                    cfg["num_warps"],
                    cfg["num_stages"],
                    EXT_FLOATS,
                )
            ok &= compile_kernel(
                f"decode stage2 {dt} Dv{dv}",
                da._decode_stage2,
                dec_ptrs,
                dict(MAX_SPLITS=16, DV=dv, BLOCK_DV=bdv),
                4,
                1,
                ("v_scale",),
            )
            ok &= compile_kernel(
                f"decode stage2 blocked {dt} Dv{dv}",
                da._decode_stage2_blocked,
                dec_ptrs,
                dict(H=32, MAX_SPLITS=16, DV=dv, BLOCK_HS=da._STAGE2_BLOCK_HS, BLOCK_DV=bdv),
                4,
                1,
                ("v_scale",),
            )
        ok &= compile_kernel(
            f"fused_add_rmsnorm {dt} 4096",
            rms_norm._rmsnorm_kernel,
            p("X", "Residual", "W", "Y"),
            dict(HAS_RESIDUAL=True, BLOCK=4096),
            8,
            1,
            ("eps",),
        )
        ok &= compile_kernel(
            f"rmsnorm {dt} 576",
            rms_norm._rmsnorm_kernel,
            p("X", "Residual", "W", "Y"),
            dict(HAS_RESIDUAL=False, BLOCK=1024),
            2,
            1,
            ("eps",),
        )
        ok &= compile_kernel(
            f"silu_and_mul {dt}",
            activation._silu_and_mul_kernel,
            p("X", "Y"),
            dict(BLOCK=1024),
            4,
            1,
        )
        for norm in (False, True):  # Qwen3's q / k norms inside the rotary kernels
            tag = " qk-norm" if norm else ""
            ok &= compile_kernel(
                f"rotary {dt} 32/8 D128{tag}",
                rotary._rotary_kernel,
                {**p("Q", "K", "QW", "KW"), "Pos": "*i64", "Cache": "*fp32"},
                dict(HEAD_SIZE=128, HALF=64, BLOCK_HQ=32, BLOCK_HK=8, BLOCK_HALF=64, NORM=norm),
                8,
                1,
                ("eps",),
            )
            ok &= compile_kernel(
                f"rotary+store {dt} 32/8 D128{tag}",
                rotary._rotary_store_kernel,
                {
                    **p("Q", "K", "V", "KBuf", "VBuf", "QW", "KW"),
                    "Pos": "*i64",
                    "Cache": "*fp32",
                    "Loc": "*i64",
                },
                dict(
                    HEAD_SIZE=128,
                    HALF=64,
                    DV=128,
                    BLOCK_HQ=32,
                    BLOCK_HK=8,
                    BLOCK_HALF=64,
                    BLOCK_DV=128,
                    SCALED=False,
                    NORM=norm,
                ),
                8,
                1,
                ("eps",) + STORE_FLOATS,
            )
        ok &= compile_kernel(
            f"store_kv {dt} 8x128",
            kv_store._store_kv_kernel,
            {**p("KBuf", "VBuf", "K", "V"), "Loc": "*i64"},
            dict(H=8, D=128, DV=128, BLOCK_H=8, BLOCK_D=128, BLOCK_DV=128, SCALED=False),
            4,
            1,
            STORE_FLOATS,
        )
        for m in (1, 4):
            for n_, k_ in ((4096, 4096), (4096, 14336)):
                cfg = gemv.config_for(n_, k_)
                ok &= compile_kernel(
                    f"gemv {dt} M{m} {n_}x{k_}",
                    gemv._gemv_kernel,
                    {**p("x_ptr", "w_ptr", "b_ptr", "y_ptr"), "s_ptr": "*fp32"},
                    dict(
                        M=m,
                        BLOCK_N=cfg["BLOCK_N"],
                        BLOCK_K=cfg["BLOCK_K"],
                        HAS_BIAS=m == 4,
                        SCALE=0,
                        SCALE_BN=1,
                        SCALE_BK=1,
                    ),
                    cfg["num_warps"],
                    cfg.get("num_stages", 3),
                )
        # FP8 weights: one scale per row, and one per 128 x 128 block.
        for mode, bn in ((1, 1), (2, 128)):
            cfg = gemv.config_for(4096, 4096)
            ok &= compile_kernel(
                f"gemv {dt} x fp8 weights, scale mode {mode}",
                gemv._gemv_kernel,
                {**p("x_ptr", "b_ptr", "y_ptr"), "w_ptr": "*fp8e4nv", "s_ptr": "*fp32"},
                dict(
                    M=1,
                    BLOCK_N=cfg["BLOCK_N"],
                    BLOCK_K=cfg["BLOCK_K"],
                    HAS_BIAS=False,
                    SCALE=mode,
                    SCALE_BN=bn,
                    SCALE_BK=bn,
                ),
                cfg["num_warps"],
                cfg.get("num_stages", 3),
            )
        # The one-row f16x2 GEMV (per channel), with and without bias.
        for has_bias in (False, True):
            ok &= compile_kernel(
                f"fp8 halves gemv {dt} bias={has_bias}",
                fp8_gemv._fp8_gemv_halves_kernel,
                {**p("x_ptr", "b_ptr", "y_ptr"), "w_ptr": "*fp8e4nv", "s_ptr": "*fp32"},
                dict(BLOCK_N=16, BLOCK_K=512, GROUP=2, PRESCALE=True, HAS_BIAS=has_bias),
                4,
                3,
                divisible=("K", "swn"),
            )
        # The one-row word GEMV: per-channel and 128 x 128 block scales.
        for blockwise, bw in ((False, 128), (True, 32)):
            ok &= compile_kernel(
                f"fp8 word gemv {dt} {'block' if blockwise else 'channel'}",
                fp8_gemv._fp8_gemv_kernel,
                {**p("x_ptr", "b_ptr", "y_ptr"), "w_ptr": "*i32", "s_ptr": "*fp32"},
                dict(
                    BLOCK_N=8,
                    BLOCK_W=bw,
                    BLOCKWISE=blockwise,
                    SCALE_BN=128 if blockwise else 1,
                    SCALE_BK=128 if blockwise else 1,
                    HAS_BIAS=blockwise,
                ),
                4,
                3,
                divisible=("KW", "swn"),
            )
        ok &= compile_kernel(
            f"per-token fp8 quant {dt}",
            fp8_kernels._per_token_quant_kernel,
            {**p("x_ptr"), "q_ptr": "*fp8e4nv", "s_ptr": "*fp32"},
            dict(FP8_MAX_C=448.0, BLOCK=1024),
            4,
            1,
        )
        ok &= compile_kernel(
            f"per-group fp8 quant {dt}",
            fp8_kernels._per_group_quant_kernel,
            {**p("x_ptr"), "q_ptr": "*fp8e4nv", "s_ptr": "*fp32"},
            dict(FP8_MAX_C=448.0, G=128),
            4,
            1,
        )
        for m in (1, 64, 512):
            for blockwise, quant_a in itertools.product((False, True), (False, True)):
                cfg = fp8_gemm._default_config(m)
                ok &= compile_kernel(
                    f"fp8 x fp8 matmul -> {dt} M{m} {'block' if blockwise else 'channel'} scales"
                    + (" (x quantized inside)" if quant_a else ""),
                    fp8_gemm._fp8_mm_kernel,
                    {
                        **p("b_ptr", "y_ptr"),
                        "a_ptr": f"*{dt}" if quant_a else "*fp8e4nv",
                        "w_ptr": "*fp8e4nv",
                        "sa_ptr": "*fp32",
                        "sw_ptr": "*fp32",
                    },
                    dict(
                        BLOCK_M=cfg["BLOCK_M"],
                        BLOCK_N=cfg["BLOCK_N"],
                        BLOCK_K=128,
                        SCALE_BN=128 if blockwise else 1,
                        BLOCKWISE=blockwise,
                        HAS_BIAS=False,
                        QUANT_A=quant_a,
                        ONE_ROW=quant_a and m == 1,
                        FP8_MAX_C=448.0,
                        GRID_ROUND=False,
                    ),
                    cfg["num_warps"],
                    cfg["num_stages"],
                    divisible=("N", "K"),
                )
        for bm, prefetch in ((16, 0), (64, 0), (64, 1)):
            cfg = dict(small_m_gemm.DEFAULT_CONFIG, PREFETCH=prefetch)
            ok &= compile_kernel(
                f"small-M {dt} BM{bm} prefetch={prefetch}",
                small_m_gemm._small_m_kernel,
                {**p("x_ptr", "w_ptr", "b_ptr", "y_ptr"), "s_ptr": "*fp32"},
                dict(
                    BLOCK_M=bm,
                    BLOCK_N=cfg["BLOCK_N"],
                    BLOCK_K=cfg["BLOCK_K"],
                    PREFETCH=prefetch,
                    HAS_BIAS=prefetch == 1,
                    SCALED=False,
                ),
                cfg["num_warps"],
                cfg["num_stages"],
                divisible=("N", "K"),
            )  # model widths: the JIT specialises them too
        cfg = dict(small_m_gemm.DEFAULT_CONFIG)
        ok &= compile_kernel(
            f"small-M {dt} x fp8 weights BM16",
            small_m_gemm._small_m_kernel,
            {**p("x_ptr", "b_ptr", "y_ptr"), "w_ptr": "*fp8e4nv", "s_ptr": "*fp32"},
            dict(
                BLOCK_M=16,
                BLOCK_N=cfg["BLOCK_N"],
                BLOCK_K=cfg["BLOCK_K"],
                PREFETCH=0,
                HAS_BIAS=False,
                SCALED=True,
            ),
            cfg["num_warps"],
            cfg["num_stages"],
            divisible=("N", "K"),
        )
        # fp8 KV pool (--kv-cache-dtype fp8_e4m3): fp8 tiles widened in registers, quantising store.
        f8 = {"K": "*fp8e4nv", "V": "*fp8e4nv"}
        cfg = da._stage1_config(128, True, True)
        ok &= compile_kernel(
            f"decode grouped {dt} fp8 KV",
            da._decode_stage1_grouped,
            {**dec_ptrs, **f8},
            dict(
                GROUP=4,
                BLOCKS_PER_KV=1,
                KV_PACK=1,
                MAX_SPLITS=16,
                D=128,
                DV=128,
                BLOCK_H=da._GROUP_BLOCK_H,
                BLOCK_N=cfg["BLOCK_N"],
                BLOCK_D=128,
                BLOCK_DV=128,
                HAS_CAP=False,
                SLOT_INT64=False,
                DOT_PREC="tf32",
            ),
            cfg["num_warps"],
            cfg["num_stages"],
            ("sm_scale", "logit_cap"),
        )
        cfg = ea._extend_config(128, 128, True)
        ok &= compile_kernel(
            f"extend {dt} fp8 KV",
            ea._extend_attention_kernel,
            {**ext_ptrs, "KBuf": "*fp8e4nv", "VBuf": "*fp8e4nv"},
            dict(
                GROUP=4,
                D=128,
                DV=128,
                BLOCK_M=cfg["BLOCK_M"],
                BLOCK_N=cfg["BLOCK_N"],
                BLOCK_D=128,
                BLOCK_DV=128,
                HAS_CAP=False,
                SLOT_INT64=False,
                SCALED_PREFIX=True,
                DOT_PREC="tf32",
                KEYS_FROM_POOL=True,
            ),
            cfg["num_warps"],
            cfg["num_stages"],
            EXT_FLOATS,
        )
        ok &= compile_kernel(
            f"store_kv {dt} -> fp8",
            kv_store._store_kv_kernel,
            {**p("K", "V"), "KBuf": "*fp8e4nv", "VBuf": "*fp8e4nv", "Loc": "*i64"},
            dict(H=8, D=128, DV=128, BLOCK_H=8, BLOCK_D=128, BLOCK_DV=128, SCALED=True),
            4,
            1,
            STORE_FLOATS,
        )
    # fp32 models: IEEE dots (tf32 would flip greedy near-ties against the CPU path).
    p32 = lambda *names: {n: "*fp32" for n in names}
    attn = {"ReqToToken": "*i32", "ReqPoolIdx": "*i64", "SeqLens": "*i64"}
    cfg = da._stage1_config(64, True, True)
    ok &= compile_kernel(
        "decode grouped fp32 ieee D64",
        da._decode_stage1_grouped,
        {**p32("Q", "K", "V", "O", "Mid", "MidLse"), **attn, "NumSplits": "*i32"},
        dict(
            GROUP=4,
            BLOCKS_PER_KV=1,
            KV_PACK=1,
            MAX_SPLITS=16,
            D=64,
            DV=64,
            BLOCK_H=da._GROUP_BLOCK_H,
            BLOCK_N=cfg["BLOCK_N"],
            BLOCK_D=64,
            BLOCK_DV=64,
            HAS_CAP=False,
            SLOT_INT64=False,
            DOT_PREC="ieee",
        ),
        cfg["num_warps"],
        cfg["num_stages"],
        ("sm_scale", "logit_cap"),
    )
    cfg = ea._extend_config(64, 64, True)
    ok &= compile_kernel(
        "extend fp32 ieee D64",
        ea._extend_attention_kernel,
        {
            **p32("Q", "KExt", "VExt", "O", "KBuf", "VBuf"),
            **attn,
            "ExtLens": "*i64",
            "ExtStart": "*i64",
        },
        dict(
            GROUP=4,
            D=64,
            DV=64,
            BLOCK_M=cfg["BLOCK_M"],
            BLOCK_N=cfg["BLOCK_N"],
            BLOCK_D=64,
            BLOCK_DV=64,
            HAS_CAP=False,
            SLOT_INT64=False,
            SCALED_PREFIX=False,
            DOT_PREC="ieee",
            KEYS_FROM_POOL=False,
        ),
        cfg["num_warps"],
        cfg["num_stages"],
        EXT_FLOATS,
    )
    for dt, cfg in (
        ("bf16", invariant_matmul._CONFIG_CUDA),
        ("fp16", invariant_matmul._CONFIG_CUDA),
        ("bf16", invariant_matmul._CONFIG_CUDA_LARGE),
    ):
        ok &= compile_kernel(
            f"invariant matmul {dt} {cfg['BLOCK_M']}x{cfg['BLOCK_N']}x{cfg['BLOCK_K']}",
            invariant_matmul._invariant_mm_kernel,
            {"X": f"*{dt}", "W": f"*{dt}", "Y": f"*{dt}", "Bias": f"*{dt}"},
            dict(
                HAS_BIAS=dt == "fp16",
                BLOCK_M=cfg["BLOCK_M"],
                BLOCK_N=cfg["BLOCK_N"],
                BLOCK_K=cfg["BLOCK_K"],
                GROUP_M=cfg["GROUP_M"],
                DOT_PREC="tf32",
            ),
            cfg["num_warps"],
            cfg["num_stages"],
        )
    ok &= compile_kernel(
        "sampler race fp32",
        sampling._race_kernel,
        {"Probs": "*fp32", "RowHash": "*i64", "BestVal": "*fp32", "BestIdx": "*i32"},
        dict(BLOCK=1024),
        4,
        1,
    )
    for dt in ("fp32", "bf16"):
        ok &= compile_kernel(
            f"greedy partial {dt}",
            sampling._greedy_partial_kernel,
            {"Logits": f"*{dt}", "BestVal": "*fp32", "BestIdx": "*i32"},
            dict(BLOCK=1024),
            4,
            3,
        )
    ok &= compile_kernel(
        "greedy final",
        sampling._greedy_final_kernel,
        {"BestVal": "*fp32", "BestIdx": "*i32", "Ids": "*i64", "Dead": "*i1"},
        dict(BLOCK_S=512),
        1,
        1,
    )
    print("all compiled" if ok else "COMPILE FAILURES")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
