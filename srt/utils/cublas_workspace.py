"""The cuBLAS / cuBLASLt workspace size, set before the first matmul of the process.

With torch's default workspace on sm_90 (32 MiB) cuBLAS picks split-K kernels plus a separate
reduce kernel for the decode step's narrow matmuls (64 rows: down_proj 33.8 + 2.9 us, o_proj 12.2).
With 64 KiB it picks kernels without split-K (44.7 us for the pair, was 48.9 with the reduce): on the
H200 a batch-64 Llama-3-8B decode step drops by 0.18-0.22 ms pipelined (5.88 -> 5.66), batch 8 by
0.05-0.08 ms, batch 1 and a 4,096-token prefill unchanged (benchmark/RESULTS.md, runs 18-19).

torch reads both variables once, at the first cuBLAS call of the process, so this must run before any
matmul (a benchmark that runs an HF peer first calls it at its own start).
"""

from __future__ import annotations

import logging
import os
from typing import Optional

logger = logging.getLogger(__name__)

_VARS = ("CUBLAS_WORKSPACE_CONFIG", "CUBLASLT_WORKSPACE_SIZE")


def configure_cublas_workspace(kib: Optional[int]) -> Optional[int]:
    """Ask torch for a `kib` KiB workspace (None or < 0: leave torch's default). A variable the user
    already set wins. Returns the size requested, or None when nothing was changed."""
    if kib is None or kib < 0 or any(v in os.environ for v in _VARS):
        return None
    os.environ["CUBLAS_WORKSPACE_CONFIG"] = f":{kib}:1"  # ":SIZE_KiB:COUNT" (torch's format)
    os.environ["CUBLASLT_WORKSPACE_SIZE"] = str(kib)  # KiB
    logger.debug("cuBLAS workspace %d KiB", kib)
    return kib
