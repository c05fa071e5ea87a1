"""Triton kernels checked on the CPU: math through the Triton interpreter, compilation for sm_90.

TRITON_INTERPRET must be set before triton is first imported and changes every @triton.jit in the
process, so the checks run in child processes (test/kernel_checks.py, test/kernel_compile_check.py)
and this pytest process is left untouched for the other test files.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest
import torch

HERE = Path(__file__).resolve().parent
# The interpreter runs tl.dot as numpy's matmul. OpenBLAS's Haswell sgemm kernel (what it picks on
# AVX2 machines, or OPENBLAS_CORETYPE=Haswell) gives a row a result that depends on the row's place
# in the block, so a bit-equality check of a kernel would see the BLAS, not the kernel. Its AVX
# (Sandybridge) kernel does not, and runs on every x86-64 machine since 2011.
ROW_INVARIANT_BLAS = {"OPENBLAS_CORETYPE": "Sandybridge"} if platform.machine() == "x86_64" else {}


def _run(script: str, *args: str, interpret: bool, timeout: int, env_extra=None) -> None:
    env = dict(os.environ, **(env_extra or {}))
    env.pop("TRITON_INTERPRET", None)
    if interpret:
        env["TRITON_INTERPRET"] = "1"
    proc = subprocess.run(
        [sys.executable, str(HERE / script), *args],
        cwd=HERE.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    report = proc.stdout[-20000:] + "\n" + proc.stderr[-5000:]
    # A negative return code is a crash (e.g. a wild read of a poisoned slot id): still a failure.
    assert proc.returncode == 0, f"{script} {' '.join(args)} exited {proc.returncode}:\n{report}"


@pytest.mark.parametrize("group", ["decode", "extend", "fused", "invariant"])
def test_kernels_match_torch_in_interpreter(group: str) -> None:
    extra = ROW_INVARIANT_BLAS if group == "invariant" else None
    _run("kernel_checks.py", group, interpret=True, timeout=300, env_extra=extra)


@pytest.mark.slow
@pytest.mark.parametrize("group", ["decode", "extend", "fused"])
def test_kernels_match_torch_in_interpreter_full(group: str) -> None:
    _run("kernel_checks.py", "--full", group, interpret=True, timeout=600)


@pytest.mark.slow
def test_kernels_compile_for_sm90() -> None:
    pytest.importorskip("triton.backends.nvidia.compiler")
    _run("kernel_compile_check.py", interpret=False, timeout=600)


def test_num_kv_splits_heuristic() -> None:
    """Pure torch (no triton launch): split counts grow with length, shrink with batch, stay in range."""
    from sglang.srt.layers.attention.triton_ops.decode_attention import compute_num_kv_splits

    one_long = compute_num_kv_splits(torch.tensor([4096]), 32, 8, max_kv_splits=16, num_sms=132)
    assert one_long.dtype == torch.int32 and one_long.tolist() == [16]
    mixed = compute_num_kv_splits(
        torch.tensor([8000, 100, 1, 0]), 32, 8, max_kv_splits=16, num_sms=132
    ).tolist()
    assert mixed[0] > mixed[1] >= 1 and mixed[2] == 1 and mixed[3] == 1
    big = compute_num_kv_splits(torch.full((256,), 4096), 32, 8, max_kv_splits=16, num_sms=132)
    assert big.tolist() == [1] * 256  # 2048 programs already fill the GPU
    # The split counts the H200 table of forced splits found fastest (RESULTS.md run 8, ctx 528-4096):
    for bs, ctx, want in ((64, 528, 1), (64, 4096, 1), (128, 1024, 1), (32, 528, 2), (16, 2048, 4)):
        got = compute_num_kv_splits(torch.full((bs,), ctx), 32, 8, max_kv_splits=16, num_sms=132)
        assert got.tolist() == [want] * bs, (bs, ctx, got[0].item())
    # Batch 1 reaches 64 splits under the long-context cap: 32k tokens fill 3 waves of programs.
    from sglang.srt.layers.attention.triton_backend import max_kv_splits_for

    # Up to batch 64 the cap is at least 32 (a long request among short ones), above it 16.
    assert [max_kv_splits_for(bs, 8, 132, 16) for bs in (1, 2, 3, 4, 64, 65, 256)] == [
        50,
        32,
        32,
        32,
        32,
        16,
        16,
    ]
    cap = max_kv_splits_for(1, 8, 132, 16)
    long = compute_num_kv_splits(torch.tensor([131072]), 32, 8, max_kv_splits=cap, num_sms=132)
    assert long.tolist() == [50]
    out = torch.zeros(3, dtype=torch.int32)
    res = compute_num_kv_splits(
        torch.tensor([512, 512, 512]), 32, 8, max_kv_splits=8, num_sms=132, out=out
    )
    assert res is out and all(1 <= n <= 8 for n in out.tolist())


def test_kv_pack_rule() -> None:
    """Pure Python: two kv heads per program from the batch where 4 programs per SM remain (H100 runs
    21-22), never more than two, never where the packed query rows overflow one head block, and one
    head on the CPU."""
    from sglang.srt.layers.attention.triton_ops.decode_attention import (
        kv_heads_per_program,
        kv_pack_for,
    )

    # Llama-3-8B heads (group 4, 8 kv heads) on 132 SMs: 4 x 132 = 528 programs wanted.
    assert [kv_pack_for(bs, 4, 8, 132, 4) for bs in (1, 64, 128, 131, 132, 256, 1024)] == [
        1, 1, 1, 1, 2, 2, 2,
    ]  # fmt: skip
    assert kv_pack_for(256, 2, 8, 132, 4) == 2  # Qwen3-0.6B heads
    assert kv_pack_for(1024, 16, 8, 132, 4) == 1  # 2 x 16 query rows exceed one 16-row block
    assert kv_pack_for(1024, 4, 1, 132, 4) == 1  # one kv head cannot be split into pairs
    assert kv_heads_per_program(1024, 4, 8, torch.zeros(1, 32, 128)) == 1
