"""Row gather/scatter between two token-slot buffers: dst[dst_idx[i]] = src[src_idx[i]] for K and V
of one layer in one launch. On CUDA one side may be pinned host memory, which the kernel reads or
writes directly (unified addressing), so a host<->device copy of scattered slots needs no staging
buffer and no host-side gather."""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _copy_rows_kernel(
    k_src,
    k_dst,
    v_src,
    v_dst,
    src_idx,
    dst_idx,
    K_ROW: tl.constexpr,
    V_ROW: tl.constexpr,
    BLOCK: tl.constexpr,
):
    i = tl.program_id(0)
    s = tl.load(src_idx + i).to(tl.int64)
    d = tl.load(dst_idx + i).to(tl.int64)
    if tl.program_id(1) == 0:
        for off in tl.static_range(0, K_ROW, BLOCK):
            offs = off + tl.arange(0, BLOCK)
            m = offs < K_ROW
            tl.store(k_dst + d * K_ROW + offs, tl.load(k_src + s * K_ROW + offs, mask=m), mask=m)
    else:
        for off in tl.static_range(0, V_ROW, BLOCK):
            offs = off + tl.arange(0, BLOCK)
            m = offs < V_ROW
            tl.store(v_dst + d * V_ROW + offs, tl.load(v_src + s * V_ROW + offs, mask=m), mask=m)


def _as_words(buf: torch.Tensor) -> torch.Tensor:
    """The buffer as 32-bit words, one row per slot (rows are whole words for every head size)."""
    flat = buf.view(buf.shape[0], -1)
    if flat.element_size() == 4:
        return flat.view(torch.int32) if flat.dtype != torch.int32 else flat
    return flat.view(torch.uint8).view(torch.int32)


def copy_rows(
    k_src: torch.Tensor,
    k_dst: torch.Tensor,
    v_src: torch.Tensor,
    v_dst: torch.Tensor,
    src_idx: torch.Tensor,
    dst_idx: torch.Tensor,
) -> None:
    """k_dst[dst_idx] = k_src[src_idx] and the same for V (indices on the kernel's device)."""
    n = src_idx.numel()
    if n == 0:
        return
    ks, kd, vs, vd = (_as_words(t) for t in (k_src, k_dst, v_src, v_dst))
    k_row, v_row = ks.shape[1], vs.shape[1]
    block = min(triton.next_power_of_2(max(k_row, v_row)), 1024)
    _copy_rows_kernel[(n, 2)](ks, kd, vs, vd, src_idx, dst_idx, k_row, v_row, block)


def copy_rows_ref(
    k_src: torch.Tensor,
    k_dst: torch.Tensor,
    v_src: torch.Tensor,
    v_dst: torch.Tensor,
    src_idx: torch.Tensor,
    dst_idx: torch.Tensor,
) -> None:
    """The torch twin of copy_rows (same devices for everything)."""
    k_dst[dst_idx] = k_src[src_idx]
    v_dst[dst_idx] = v_src[src_idx]
