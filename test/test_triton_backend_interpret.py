"""The Triton attention backend, the CUDA-graph runner's padding logic and the fused-op bindings on
the CPU (Triton interpreter) against the torch-native path, on small random checkpoints.

The checks run in a child process (test/backend_checks.py) because TRITON_INTERPRET must be set
before triton is imported and changes every kernel in the process.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


# qwen3 adds q/k norm and head_dim 32 on the same kernels: slow, the default run keeps llama.
@pytest.mark.parametrize("arch", ["llama", pytest.param("qwen3", marks=pytest.mark.slow)])
def test_triton_backend_matches_torch_native_in_interpreter(arch: str, tiny_models) -> None:
    env = dict(os.environ, TRITON_INTERPRET="1")
    # qwen3 covers q/k-norm and head_dim != hidden/heads; llama covers llama3 rope scaling. The fp8
    # and fused-op checks do not depend on the architecture: run them once.
    only = "backend,graph,fp8,fused" if arch == "llama" else "backend,graph"
    proc = subprocess.run(
        [sys.executable, str(HERE / "backend_checks.py"), tiny_models[arch], "--only", only],
        cwd=HERE.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    report = proc.stdout[-20000:] + "\n" + proc.stderr[-5000:]
    assert proc.returncode == 0, f"backend_checks exited {proc.returncode}:\n{report}"
