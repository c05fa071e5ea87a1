"""Launching passes one ahead: FutureMap placeholders and asynchronous results.

The overlap loop builds pass N+1 before the sampled tokens of pass N are on the host. Requests
of pass N get negative placeholder ids (-k) as their next input; the device resolves -k to the
token stored at slot k of the FutureMap right before the forward of N+1. On CUDA all device work
is queued on one stream (so it is ordered) and only the sampled ids are copied back, with an
event; on the CPU the passes run in order on one worker thread.
"""

from __future__ import annotations

import concurrent.futures
import math
from dataclasses import dataclass
from typing import Callable, List, Optional

import torch

from sglang.srt.layers.logits_processor import LogitsProcessorOutput
from sglang.srt.layers.sampler import SampleOutput


class FutureMap:
    def __init__(self, max_running_requests: int, context_len: int, chunked_prefill_size: int, device: str):
        chunks = math.ceil(context_len / max(chunked_prefill_size, 1))
        self.limit = max_running_requests * (3 + chunks)
        self.buf = torch.zeros(self.limit + 2 * max_running_requests + 1, dtype=torch.int64, device=device)
        self.ct = 0
        self.device = device

    def alloc(self, bs: int) -> torch.Tensor:
        """Indices in [1, limit + bs]: slot 0 is never used, so -index is always negative.
        Made on the device: a host tensor here would need a copy, and a blocking one syncs the stream
        (waiting for the pass just launched, which defeats the overlap)."""
        start = self.ct + 1
        self.ct = (self.ct + bs) % self.limit
        return torch.arange(start, start + bs, dtype=torch.int64, device=self.device)

    def resolve(self, input_ids: torch.Tensor) -> torch.Tensor:
        return torch.where(input_ids < 0, self.buf[(-input_ids).clamp(min=0)], input_ids)

    def store(self, indices: torch.Tensor, next_ids: torch.Tensor) -> None:
        self.buf[indices] = next_ids


@dataclass
class GenerationResult:
    next_token_ids: List[int]
    invalid: List[bool]
    next_token_logprobs: Optional[List[float]] = None
    top_logprobs_val: Optional[List[List[float]]] = None
    top_logprobs_idx: Optional[List[List[int]]] = None
    input_token_logprobs: Optional[List[float]] = None
    input_top_logprobs_val: Optional[List[List[float]]] = None
    input_top_logprobs_idx: Optional[List[List[int]]] = None
    forward_time: float = 0.0


class PendingResult:
    """A launched pass; get() blocks until its sampled ids are on the host."""

    def __init__(self, getter: Callable[[], GenerationResult], device_ids: Optional[torch.Tensor] = None):
        self._getter = getter
        self._value: Optional[GenerationResult] = None
        # The sampled ids still on the device: the plain loop's next decode reads them with no copy.
        self.device_ids = device_ids

    def get(self) -> GenerationResult:
        if self._value is None:
            self._value = self._getter()
        return self._value


def _to_host(logits_out: LogitsProcessorOutput, sample_out: SampleOutput, return_logprob: bool) -> dict:
    """Start device->host copies (non-blocking on CUDA); the dict holds host tensors."""

    def cp(t):
        if t is None:
            return None
        if t.is_cuda:
            host = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
            host.copy_(t, non_blocking=True)
            return host
        return t

    out = {"ids": cp(sample_out.next_token_ids), "invalid": cp(sample_out.invalid)}
    if return_logprob:
        out.update(
            lp=cp(sample_out.next_token_logprobs),
            tv=cp(sample_out.top_logprobs_val),
            ti=cp(sample_out.top_logprobs_idx),
            ilp=cp(logits_out.input_token_logprobs),
            itv=cp(logits_out.input_top_logprobs_val),
            iti=cp(logits_out.input_top_logprobs_idx),
        )
    return out


def _to_result(h: dict) -> GenerationResult:
    def tl(t):
        return None if t is None else t.tolist()

    return GenerationResult(
        next_token_ids=h["ids"].tolist(),
        invalid=h["invalid"].tolist() if h["invalid"] is not None else [],
        next_token_logprobs=tl(h.get("lp")),
        top_logprobs_val=tl(h.get("tv")),
        top_logprobs_idx=tl(h.get("ti")),
        input_token_logprobs=tl(h.get("ilp")),
        input_top_logprobs_val=tl(h.get("itv")),
        input_top_logprobs_idx=tl(h.get("iti")),
    )


@dataclass
class ForwardHandle:
    """A launched forward pass: its logits (device path) or the worker's future (CPU overlap path)."""

    logits: Optional[LogitsProcessorOutput] = None
    future: Optional[concurrent.futures.Future] = None


class BatchLauncher:
    """Runs forward + sample for a ForwardBatch, now (plain loop) or ahead (overlap loop)."""

    def __init__(self, model_runner, future_map: Optional[FutureMap], overlap: bool, prof=None):
        from sglang.srt.managers.loop_profiler import LoopProfiler

        self.prof = prof or LoopProfiler()
        self.runner = model_runner
        self.future_map = future_map
        self.overlap = overlap
        self.device = model_runner.device
        self._pool = (
            concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="forward")
            if overlap and self.device == "cpu"
            else None
        )

    def launch(
        self,
        fb,
        sampling_info,
        return_logprob: bool,
        top_logprobs_nums: Optional[List[int]],
        future_indices: Optional[torch.Tensor],
    ) -> PendingResult:
        return self.launch_sample(
            self.launch_forward(fb), sampling_info, return_logprob, top_logprobs_nums, future_indices
        )

    def launch_forward(self, fb) -> "ForwardHandle":
        """Queue the forward pass alone; sampling follows with launch_sample (possibly after the host
        has processed earlier results, e.g. to build grammar masks from every accepted token)."""
        if self._pool is not None:
            return ForwardHandle(future=self._pool.submit(self._forward, fb))
        return ForwardHandle(logits=self._forward(fb))

    def launch_sample(
        self,
        handle: "ForwardHandle",
        sampling_info,
        return_logprob: bool,
        top_logprobs_nums: Optional[List[int]],
        future_indices: Optional[torch.Tensor],
    ) -> PendingResult:
        args = (sampling_info, return_logprob, top_logprobs_nums, future_indices)
        if self._pool is not None:
            # One worker thread: this runs after the forward it reads, whatever was queued between.
            fut = self._pool.submit(lambda: self._sample(handle.future.result(), *args))
            return PendingResult(lambda: _to_result({k: v for k, v in fut.result().items() if k != "ids_dev"}))
        host = self._sample(handle.logits, *args)
        ids_dev = host.pop("ids_dev")
        if self.device == "cuda":
            event = torch.cuda.Event()
            event.record()

            def wait() -> GenerationResult:
                event.synchronize()
                return _to_result(host)

            return PendingResult(wait, ids_dev)
        return PendingResult(lambda: _to_result(host), ids_dev)

    def _forward(self, fb) -> LogitsProcessorOutput:
        with torch.no_grad(), self.prof.phase("c.forward"):
            if self.future_map is not None:
                fb.input_ids = self.future_map.resolve(fb.input_ids)
            return self.runner.forward(fb)

    def _sample(self, logits_out, sampling_info, return_logprob, top_logprobs_nums, future_indices) -> dict:
        p = self.prof
        with torch.no_grad():
            with p.phase("c.sample"):
                sample_out = self.runner.sample(logits_out, sampling_info, return_logprob, top_logprobs_nums)
            if self.future_map is not None and future_indices is not None:
                self.future_map.store(future_indices.to(self.device, non_blocking=True), sample_out.next_token_ids)
            with p.phase("c.host"):
                host = _to_host(logits_out, sample_out, return_logprob)
            host["ids_dev"] = sample_out.next_token_ids
            return host

    def shutdown(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
