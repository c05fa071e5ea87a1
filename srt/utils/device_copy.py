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
