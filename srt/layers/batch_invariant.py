"""Batch-invariant operations for --enable-deterministic-inference.

A library matmul picks its kernel, and with it the order in which each output is summed over K, by
the shape of the whole product; a row computed alone and the same row in a batch of 64 can then
differ in their last bits, and at a near tie the next token flips. In deterministic mode every row's
result is a function of that row alone, so a request's tokens do not depend on what it was batched
with, how its prompt was chunked, or how much of it came from the radix cache:

- Linear layers (and the LM head): on the CPU each row is its own [1, K] x [K, N] product on a
  freshly allocated copy (every row then takes the same library path with the same alignment); on
  CUDA one Triton kernel with a fixed tile shape and no split-K (triton_ops/invariant_matmul.py).
- Attention: invariant_attention.py on the CPU; on CUDA the Triton backend's extend kernel reads
  every key from the pool in tiles from key 0 and its decode splits follow each request's length.
- Elementwise transcendental functions on the CPU: torch's vectorized loop computes exp / sigmoid
  with a vector routine and the leftover tail of a chunk with the scalar one, which can differ in
  the last bit. Deterministic mode runs the scheduler's torch ops on one thread (one chunk per op)
  and pads a row whose length is not a multiple of PAD_TO, so no element is ever in a tail.
"""

from __future__ import annotations

from typing import Callable, Optional

import torch
import torch.nn.functional as F

from sglang.srt.layers import activation
from sglang.srt.layers import linear as linear_mod

# Elements per row that no vectorized loop splits into a tail: 2 x 16 floats (AVX-512, unrolled).
PAD_TO = 64


def rowwise_linear(
    x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor] = None
) -> torch.Tensor:
    """x @ weight^T (+ bias), one row at a time (the CPU path)."""
    lead, k = x.shape[:-1], x.shape[-1]
    rows = x.reshape(-1, k)
    out = rows.new_empty((rows.shape[0], weight.shape[0]))
    for i in range(rows.shape[0]):
        out[i] = F.linear(rows[i : i + 1].clone(), weight, bias)[0]
    return out.reshape(*lead, weight.shape[0])


def padded_rows(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """fn (elementwise) over x with each row padded to a multiple of PAD_TO elements."""
    n = x.shape[-1]
    pad = -n % PAD_TO
    if pad == 0:
        return fn(x.contiguous())
    return fn(F.pad(x, (0, pad)))[..., :n]


def silu_and_mul_rows(x: torch.Tensor) -> torch.Tensor:
    d = x.shape[-1] // 2
    return padded_rows(F.silu, x[..., :d]) * x[..., d:]


def cuda_linear(x, weight, bias=None):
    """The linear hook on CUDA: the fixed-tile Triton matmul (imported late: no Triton on CPU)."""
    from sglang.srt.layers.triton_ops.invariant_matmul import invariant_matmul

    return invariant_matmul(x, weight, bias)


_saved_threads: Optional[int] = None


def bind_batch_invariant(device: str) -> None:
    """Route the layers through the invariant operations for this process."""
    global _saved_threads
    if device == "cuda":
        linear_mod.set_invariant_matmul(cuda_linear)
        return
    if _saved_threads is None:
        _saved_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    linear_mod.set_invariant_matmul(rowwise_linear)
    activation.set_cpu_silu_and_mul(silu_and_mul_rows)


def unbind_batch_invariant() -> None:
    """Back to the library operations (a later model in the same process may not want them)."""
    global _saved_threads
    linear_mod.set_invariant_matmul(None)
    activation.set_cpu_silu_and_mul(None)
    if _saved_threads is not None:
        torch.set_num_threads(_saved_threads)
        _saved_threads = None
