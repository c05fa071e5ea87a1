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
from typing import Any, Callable, List, Optional

import torch

from sglang.srt.layers.logits_processor import LogitsProcessorOutput
from sglang.srt.layers.sampler import SampleOutput
from sglang.srt.managers.scheduler.loop_profiler import LoopProfiler
from sglang.srt.managers.scheduler.step_trace import PassRecord, StepTrace
from sglang.srt.utils.device_copy import to_host_async


class FutureMap:
    def __init__(
        self, max_running_requests: int, context_len: int, chunked_prefill_size: int, device: str
    ):
        chunks = math.ceil(context_len / max(chunked_prefill_size, 1))
        self.limit = max_running_requests * (3 + chunks)
        self.buf = torch.zeros(
            self.limit + 2 * max_running_requests + 1, dtype=torch.int64, device=device
        )
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

    def __init__(
        self, getter: Callable[[], GenerationResult], device_ids: Optional[torch.Tensor] = None
    ):
        self._getter = getter
        self._value: Optional[GenerationResult] = None
        # The sampled ids still on the device: the plain loop's next decode reads them with no copy.
        self.device_ids = device_ids

    def get(self) -> GenerationResult:
        if self._value is None:
            self._value = self._getter()
        return self._value


@dataclass
class HostCopies:
    """A pass's outputs being copied to the host (pinned buffers, non-blocking on CUDA)."""

    next_token_ids: torch.Tensor
    invalid: Optional[torch.Tensor]
    next_token_ids_device: (
        torch.Tensor
    )  # the same ids left on the device (the plain loop's next input)
    next_token_logprobs: Optional[torch.Tensor] = None
    top_logprobs_val: Optional[torch.Tensor] = None
    top_logprobs_idx: Optional[torch.Tensor] = None
    input_token_logprobs: Optional[torch.Tensor] = None
    input_top_logprobs_val: Optional[torch.Tensor] = None
    input_top_logprobs_idx: Optional[torch.Tensor] = None

    @classmethod
    def start(
        cls, logits_out: LogitsProcessorOutput, sample_out: SampleOutput, return_logprob: bool
    ) -> "HostCopies":
        def cp(t: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
            return None if t is None else to_host_async(t)

        out = cls(cp(sample_out.next_token_ids), cp(sample_out.invalid), sample_out.next_token_ids)
        if return_logprob:
            out.next_token_logprobs = cp(sample_out.next_token_logprobs)
            out.top_logprobs_val = cp(sample_out.top_logprobs_val)
            out.top_logprobs_idx = cp(sample_out.top_logprobs_idx)
            out.input_token_logprobs = cp(logits_out.input_token_logprobs)
            out.input_top_logprobs_val = cp(logits_out.input_top_logprobs_val)
            out.input_top_logprobs_idx = cp(logits_out.input_top_logprobs_idx)
        return out

    def to_result(self) -> GenerationResult:
        """Host lists; call once the copies are complete."""

        def tl(t: Optional[torch.Tensor]) -> Optional[list]:
            return None if t is None else t.tolist()

        return GenerationResult(
            next_token_ids=self.next_token_ids.tolist(),
            invalid=self.invalid.tolist() if self.invalid is not None else [],
            next_token_logprobs=tl(self.next_token_logprobs),
            top_logprobs_val=tl(self.top_logprobs_val),
            top_logprobs_idx=tl(self.top_logprobs_idx),
            input_token_logprobs=tl(self.input_token_logprobs),
            input_top_logprobs_val=tl(self.input_top_logprobs_val),
            input_top_logprobs_idx=tl(self.input_top_logprobs_idx),
        )


@dataclass
class ForwardHandle:
    """A launched forward pass: its logits (device path) or the worker's future (CPU overlap path)."""

    logits: Optional[LogitsProcessorOutput] = None
    future: Optional[concurrent.futures.Future] = None
    trace: Optional[PassRecord] = None


class BatchLauncher:
    """Runs forward + sample for a ForwardBatch, now (plain loop) or ahead (overlap loop)."""

    def __init__(
        self, model_runner, future_map: Optional[FutureMap], overlap: bool, prof: LoopProfiler
    ):
        self.prof = prof
        self.runner = model_runner
        self.future_map = future_map
        self.overlap = overlap
        self.device = model_runner.device
        self.trace = StepTrace(self.device)
        self._pool = (
            concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="forward")
            if overlap and self.device == "cpu"
            else None
        )

    def device_work_executor(self) -> Optional[Callable[[Callable[[], None]], Any]]:
        """Where other device work queues in order with the passes: the CPU overlap loop's forward
        worker (None: run it at once, as the plain loop and CUDA streams allow)."""
        return self._pool.submit if self._pool is not None else None

    def launch(
        self,
        fb,
        sampling_info,
        return_logprob: bool,
        top_logprobs_nums: Optional[List[int]],
        future_indices: Optional[torch.Tensor],
    ) -> PendingResult:
        return self.launch_sample(
            self.launch_forward(fb),
            sampling_info,
            return_logprob,
            top_logprobs_nums,
            future_indices,
        )

    def launch_forward(self, fb) -> "ForwardHandle":
        """Queue the forward pass alone; sampling follows with launch_sample (possibly after the host
        has processed earlier results, e.g. to build grammar masks from every accepted token)."""
        rec = self.trace.new(fb)
        if self._pool is not None:
            return ForwardHandle(future=self._pool.submit(self._forward, fb, rec), trace=rec)
        return ForwardHandle(logits=self._forward(fb, rec), trace=rec)

    def launch_sample(
        self,
        handle: "ForwardHandle",
        sampling_info,
        return_logprob: bool,
        top_logprobs_nums: Optional[List[int]],
        future_indices: Optional[torch.Tensor],
    ) -> PendingResult:
        args = (sampling_info, return_logprob, top_logprobs_nums, future_indices, handle.trace)
        if self._pool is not None:
            # One worker thread: this runs after the forward it reads, whatever was queued between.
            fut = self._pool.submit(lambda: self._sample(handle.future.result(), *args))
            return PendingResult(lambda: fut.result().to_result())
        host = self._sample(handle.logits, *args)
        if self.device == "cuda":
            event = torch.cuda.Event()
            event.record()

            def wait() -> GenerationResult:
                event.synchronize()
                return host.to_result()

            return PendingResult(wait, host.next_token_ids_device)
        return PendingResult(host.to_result, host.next_token_ids_device)

    def _forward(self, fb, rec: Optional[PassRecord] = None) -> LogitsProcessorOutput:
        self.trace.mark(rec, "start")
        with torch.no_grad(), self.prof.phase("c.forward"):
            if self.future_map is not None:
                fb.input_ids = self.future_map.resolve(fb.input_ids)
            return self.runner.forward(fb)

    def _sample(
        self,
        logits_out,
        sampling_info,
        return_logprob,
        top_logprobs_nums,
        future_indices,
        rec: Optional[PassRecord] = None,
    ) -> HostCopies:
        p = self.prof
        with torch.no_grad():
            with p.phase("c.sample"):
                sample_out = self.runner.sample(
                    logits_out, sampling_info, return_logprob, top_logprobs_nums
                )
            if self.future_map is not None and future_indices is not None:
                self.future_map.store(
                    future_indices.to(self.device, non_blocking=True), sample_out.next_token_ids
                )
            with p.phase("c.host"):
                copies = HostCopies.start(logits_out, sample_out, return_logprob)
            self.trace.mark(rec, "end")
            return copies

    def shutdown(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
