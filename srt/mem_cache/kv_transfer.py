"""Copies between the device KV pool and the host pool, ordered with the forward passes.

Ordering rules (the radix tree hands slots around on the host before any copy has run):
- A write to the host reads KV that queued forward passes compute: it starts after them.
- A load into the device starts after the queued passes too (one of them may still read the slots'
  previous owner), and the next pass waits for it layer by layer: layer i's attention waits for
  layer i's copy only, so the copy of later layers overlaps the compute of earlier ones.
- Device slots freed while a write may still read them are reused by a later pass only after that
  write: fence_writes() makes the compute stream wait for the writes queued so far.
On CUDA the copies run on their own stream; on the CPU they run in order on the forward worker
(the overlap loop) or at once (the plain loop), which gives the same guarantees.
"""

from __future__ import annotations

import concurrent.futures
import logging
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable, Deque, List, Optional, Tuple

import torch

from sglang.srt.mem_cache.host_pool import HostKVPool
from sglang.srt.mem_cache.kv_copy_kernel import copy_rows_ref

logger = logging.getLogger(__name__)

Submit = Callable[[Callable[[], None]], concurrent.futures.Future]


@dataclass
class TransferStats:
    loaded_tokens: int = 0
    loaded_bytes: int = 0
    written_tokens: int = 0
    written_bytes: int = 0
    load_time_s: float = 0.0  # copy time of completed loads (device-side on CUDA)


class LayerWaits:
    """Events of the loads queued since the last pass, one per layer (CUDA)."""

    def __init__(self, events: List[torch.cuda.Event]):
        self.events = events

    def wait_layer(self, layer_id: int) -> None:
        torch.cuda.current_stream().wait_event(self.events[layer_id])

    def wait_all(self) -> None:
        torch.cuda.current_stream().wait_event(self.events[-1])


class CopyDone:
    """Lets the host wait until a queued copy has finished (the storage tier reads host rows)."""

    def __init__(self, wait: Callable[[], None]):
        self._wait = wait

    def wait(self) -> None:
        self._wait()


class KVTransfer:
    def __init__(self, device_pool, host_pool: HostKVPool, io_backend: str = "kernel"):
        self.dev = device_pool
        self.host = host_pool
        self.cuda = torch.device(device_pool.device).type == "cuda"
        self.stats = TransferStats()
        self._submit: Optional[Submit] = None
        self._pending_waits: Optional[LayerWaits] = None
        self._last_write: Optional[torch.cuda.Event] = None
        self._timed: Deque[Tuple[torch.cuda.Event, torch.cuda.Event]] = deque()
        self.stream = torch.cuda.Stream() if self.cuda else None
        self.io_backend = self._check_backend(io_backend) if self.cuda else "cpu"

    def set_executor(self, submit: Optional[Submit]) -> None:
        """The CPU overlap loop's forward worker: copies queue behind the passes already on it."""
        self._submit = submit

    # ------------------------------------------------------------------ public copies
    def write_to_host(self, dev_idx: torch.Tensor, host_idx: torch.Tensor) -> CopyDone:
        n = len(dev_idx)
        self.stats.written_tokens += n
        self.stats.written_bytes += n * self.host.bytes_per_token
        if not self.cuda:
            return self._cpu_run(lambda: self._copy_all(self.dev, self.host, dev_idx, host_idx))
        with torch.cuda.stream(self.stream):
            self.stream.wait_stream(torch.cuda.current_stream(self.dev_device))
            self._gpu_copy(to_host=True, dev_idx=dev_idx, host_idx=host_idx)
            event = torch.cuda.Event()
            event.record(self.stream)
        self._last_write = event
        return CopyDone(event.synchronize)

    def load_to_device(self, host_idx: torch.Tensor, dev_idx: torch.Tensor) -> None:
        n = len(host_idx)
        self.stats.loaded_tokens += n
        self.stats.loaded_bytes += n * self.host.bytes_per_token
        if not self.cuda:
            self._cpu_run(lambda: self._timed_cpu_load(host_idx, dev_idx))
            return
        compute = torch.cuda.current_stream(self.dev_device)
        with torch.cuda.stream(self.stream):
            self.stream.wait_stream(compute)
            start = torch.cuda.Event(enable_timing=True)
            start.record(self.stream)
            events = self._gpu_copy(to_host=False, dev_idx=dev_idx, host_idx=host_idx)
            end = torch.cuda.Event(enable_timing=True)
            end.record(self.stream)
        self._timed.append((start, end))
        # Same stream: a later load's event for layer i covers every earlier copy of layer i.
        self._pending_waits = LayerWaits(events)

    def take_layer_waits(self) -> Optional[LayerWaits]:
        """What the next pass must wait for (None on the CPU, or with no load since the last pass)."""
        w, self._pending_waits = self._pending_waits, None
        return w

    def fence_writes(self) -> None:
        """The next pass may overwrite device slots that queued writes still read: wait for them."""
        if self.cuda and self._last_write is not None:
            torch.cuda.current_stream(self.dev_device).wait_event(self._last_write)

    def synchronize(self) -> None:
        """Block until every queued copy is done."""
        if self.cuda:
            self.stream.synchronize()
        elif self._submit is not None:
            self._submit(lambda: None).result()

    def poll_stats(self) -> TransferStats:
        """The stats, with the load time of loads that completed since the last call (CUDA)."""
        while self._timed and self._timed[0][1].query():
            start, end = self._timed.popleft()
            self.stats.load_time_s += start.elapsed_time(end) / 1e3
        return self.stats

    # ------------------------------------------------------------------ CPU
    @property
    def dev_device(self) -> torch.device:
        return torch.device(self.dev.device)

    def _cpu_run(self, fn: Callable[[], None]) -> CopyDone:
        if self._submit is None:
            fn()
            return CopyDone(lambda: None)
        fut = self._submit(fn)
        return CopyDone(fut.result)

    def _timed_cpu_load(self, host_idx: torch.Tensor, dev_idx: torch.Tensor) -> None:
        t0 = time.perf_counter()
        self._copy_all(self.host, self.dev, host_idx, dev_idx)
        self.stats.load_time_s += time.perf_counter() - t0

    @staticmethod
    def _copy_all(src, dst, src_idx: torch.Tensor, dst_idx: torch.Tensor) -> None:
        for layer in range(len(src.k_buffer)):
            copy_rows_ref(
                src.k_buffer[layer],
                dst.k_buffer[layer],
                src.v_buffer[layer],
                dst.v_buffer[layer],
                src_idx,
                dst_idx,
            )

    # ------------------------------------------------------------------ CUDA
    def _gpu_copy(
        self, to_host: bool, dev_idx: torch.Tensor, host_idx: torch.Tensor
    ) -> List[torch.cuda.Event]:
        """Queue one layer at a time on the copy stream; returns an event after each layer."""
        dev_d = dev_idx.pin_memory().to(self.dev_device, non_blocking=True)
        host_d = host_idx.pin_memory().to(self.dev_device, non_blocking=True)
        events = []
        for layer in range(self.dev.layer_num):
            dk, dv = self.dev.k_buffer[layer], self.dev.v_buffer[layer]
            hk, hv = self.host.k_buffer[layer], self.host.v_buffer[layer]
            if self.io_backend == "kernel":
                from sglang.srt.mem_cache.kv_copy_kernel import copy_rows

                if to_host:
                    copy_rows(dk, hk, dv, hv, dev_d, host_d)
                else:
                    copy_rows(hk, dk, hv, dv, host_d, dev_d)
            elif to_host:
                # direct: gather on the device, one blocking copy, scatter on the host.
                hk[host_idx] = dk.index_select(0, dev_d).cpu()
                hv[host_idx] = dv.index_select(0, dev_d).cpu()
            else:
                dk.index_copy_(0, dev_d, hk[host_idx].to(self.dev_device, non_blocking=True))
                dv.index_copy_(0, dev_d, hv[host_idx].to(self.dev_device, non_blocking=True))
            if not to_host:
                ev = torch.cuda.Event()
                ev.record(self.stream)
                events.append(ev)
        return events

    def _check_backend(self, name: str) -> str:
        """The kernel reads pinned host memory through unified addressing; check once that it can
        on this machine, else fall back to direct copies."""
        if name != "kernel":
            return name
        try:
            from sglang.srt.mem_cache.kv_copy_kernel import copy_rows

            host = torch.arange(64, dtype=torch.float16).view(4, 2, 8).pin_memory()
            dev = torch.zeros((4, 2, 8), dtype=torch.float16, device=self.dev_device)
            src = torch.tensor([1, 3], device=self.dev_device)
            dst = torch.tensor([2, 0], device=self.dev_device)
            copy_rows(host, dev, host, dev, src, dst)
            back = torch.zeros_like(host).pin_memory()  # zeros_like of pinned memory is not pinned
            copy_rows(dev, back, dev, back, dst, src)
            torch.cuda.synchronize()
            if torch.equal(dev[2].cpu(), host[1]) and torch.equal(back[3], host[3]):
                return "kernel"
            logger.warning("HiCache copy kernel gave wrong rows; using --hicache-io-backend direct")
        except Exception as e:  # noqa: BLE001 - any failure means: use the torch copies
            logger.warning("HiCache copy kernel unavailable (%s); using direct copies", e)
        return "direct"
