"""Host-to-device copies that never block the host.

A non_blocking copy from pageable host memory is still synchronous: CUDA first waits for the
stream, i.e. for the pass just launched, which would serialise the overlap loop. Staging through
pinned memory (PyTorch's caching host allocator) makes the copy truly asynchronous.
"""

from __future__ import annotations

import torch


def to_device(t: torch.Tensor, device) -> torch.Tensor:
    dev = torch.device(device)
    if dev.type != "cuda" or t.device.type == "cuda":
        return t.to(dev)
    if t.numel() == 0:
        return t.to(dev)
    return t.pin_memory().to(dev, non_blocking=True)


def to_host_async(t: torch.Tensor) -> torch.Tensor:
    """A CUDA tensor's copy into pinned host memory, queued without waiting (the caller syncs an
    event before reading it); any other tensor as it is."""
    if not t.is_cuda:
        return t
    host = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
    host.copy_(t, non_blocking=True)
    return host
