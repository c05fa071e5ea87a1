"""torch.distributed setup for tensor parallelism: NCCL on CUDA, gloo on the CPU, plus a gloo group
for broadcasting Python objects (the requests rank 0 received) whatever the device backend."""

from __future__ import annotations

import datetime
import logging
import os

import torch
import torch.distributed as dist

from sglang.srt.distributed.parallel_state import init_tensor_parallel

logger = logging.getLogger(__name__)

# NVLink multicast can take a shared host's GPUs out of service; never let NCCL or torch use it.
SAFE_NCCL_ENV = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}


def init_distributed(server_args, nccl_port: int, tp_rank: int, device: str) -> None:
    world = server_args.tp_size
    if world == 1 and not server_args.force_distributed:
        return
    for k, v in SAFE_NCCL_ENV.items():
        os.environ.setdefault(k, v)
    addr = server_args.dist_init_addr or f"127.0.0.1:{nccl_port}"
    backend = "nccl" if device == "cuda" else "gloo"
    timeout = datetime.timedelta(seconds=server_args.dist_timeout)
    dist.init_process_group(
        backend, init_method=f"tcp://{addr}", world_size=world, rank=tp_rank, timeout=timeout
    )
    # A group of its own even on gloo: under the overlap loop the forward's collectives (worker thread)
    # and the request broadcasts (scheduler thread) run concurrently and must not interleave on one group.
    cpu_group = dist.new_group(backend="gloo", timeout=timeout)
    init_tensor_parallel(tp_rank, world, dist.group.WORLD, cpu_group)
    if device == "cuda":
        # Warm the communicator up so the first forward does not pay for it.
        t = torch.ones(1, device="cuda")
        dist.all_reduce(t)
    logger.info("tensor parallel rank %d/%d ready (%s)", tp_rank, world, backend)
