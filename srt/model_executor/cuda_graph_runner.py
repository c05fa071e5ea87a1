"""CudaGraphRunner: decode forward passes captured once per batch size and replayed.

A decode step launches hundreds of small kernels; launching them from Python costs more than the
GPU work at small batch. Each size in `capture_bs` is captured once (largest first, all graphs
sharing one memory pool) over static input buffers. A batch of raw size n replays the graph of the
smallest captured size bs >= n: its inputs are copied into rows [0, n) of the static buffers and
rows [n, bs) are padding that points at the dummy request row 0 and dummy KV slot 0 (seq_len =
the backend's fill value), so they read and write nothing real. Logits of rows [0, n) are returned.

The sampler stays outside the graph (it depends on per-request parameters and may need host-side
masks). Logprob requests are fine: decode logprobs come from the sampler, not the graph.
"""

from __future__ import annotations

import bisect
import gc
import logging
import time
from typing import Callable, Dict, List, Optional, Tuple

import torch

from sglang.srt.core.forward_batch_info import ForwardBatch, ForwardMode
from sglang.srt.layers.logits_processor import LogitsProcessorOutput

logger = logging.getLogger(__name__)

GB = 1 << 30
GRAPHS_PER_SIZE = 2


def default_capture_bs(max_bs: int) -> List[int]:
    """Dense where padding would cost most (small batches), coarser above: 23 sizes up to 256 keep
    capture to a few seconds while padding stays under ~15%."""
    sizes = [
        1,
        2,
        3,
        4,
        8,
        12,
        16,
        24,
        32,
        40,
        48,
        56,
        64,
        72,
        80,
        96,
        112,
        128,
        144,
        160,
        192,
        224,
        256,
    ]
    sizes += list(range(288, max_bs + 1, 32))
    out = [s for s in sizes if s <= max_bs]
    if not out or out[-1] != max_bs:
        out.append(max_bs)
    return out


def default_cuda_graph_max_bs(total_mem_gb: float) -> int:
    """Largest captured decode batch by device memory (graph outputs and workspaces grow with it)."""
    if total_mem_gb >= 60:
        return 256
    if total_mem_gb >= 35:
        return 160
    return 48


class _CudaGraph:
    """torch.cuda.CUDAGraph behind the two calls the runner needs."""

    def __init__(self, pool, stream: torch.cuda.Stream):
        self.graph = torch.cuda.CUDAGraph()
        self.pool = pool
        self.stream = stream

    def capture(self, fn: Callable[[], LogitsProcessorOutput]) -> LogitsProcessorOutput:
        with torch.cuda.graph(self.graph, pool=self.pool, stream=self.stream):
            out = fn()
        return out

    def replay(self) -> None:
        self.graph.replay()


class EagerReplayGraph:
    """A stand-in graph for CPU tests: 'replay' re-runs the captured function over the same static
    buffers and copies into the captured outputs, so the runner's padding and buffer logic can be
    checked without a GPU."""

    def __init__(self, pool=None, stream=None):
        self.fn: Optional[Callable[[], LogitsProcessorOutput]] = None
        self.out: Optional[LogitsProcessorOutput] = None

    def capture(self, fn: Callable[[], LogitsProcessorOutput]) -> LogitsProcessorOutput:
        self.fn = fn
        self.out = fn()
        return self.out

    def replay(self) -> None:
        fresh = self.fn()
        self.out.next_token_logits.copy_(fresh.next_token_logits)
        if fresh.hidden_states is not None:
            self.out.hidden_states.copy_(fresh.hidden_states)


class CudaGraphRunner:
    def __init__(
        self,
        model_runner,
        capture_bs: Optional[List[int]] = None,
        graph_cls=None,
        capture_hidden: Optional[Tuple[int, ...]] = None,
    ):
        """capture_hidden: the graphs also output these layers' hidden states (ForwardBatch.
        capture_hidden; () is the last layer's), and replay batches asking for them."""
        self.runner = model_runner
        self.capture_hidden = capture_hidden
        self.device = model_runner.device
        self.backend = model_runner.attn_backend
        sa = model_runner.model_section
        if capture_bs is None:
            max_bs = sa.cuda_graph_max_bs
            if max_bs is None:
                total = torch.cuda.get_device_properties(model_runner.gpu_id).total_memory / GB
                max_bs = default_cuda_graph_max_bs(total)
            rows = model_runner.max_running_requests * sa.decode_rows_per_request
            max_bs = min(max_bs, rows)
            capture_bs = default_capture_bs(max_bs)
        self.capture_bs = sorted(set(capture_bs))
        self.max_bs = self.capture_bs[-1]
        self.fill_seq_len = self.backend.get_cuda_graph_seq_len_fill_value()
        self.graph_cls = graph_cls or _CudaGraph

        # Static inputs. Rows 0..3 of `packed` are positions, req_pool_indices, seq_lens, out_cache_loc
        # (ForwardBatch.decode_packed's layout), so one copy fills all four.
        n = self.max_bs
        self.input_ids = torch.zeros(n, dtype=torch.int64, device=self.device)
        self.packed = torch.zeros((4, n), dtype=torch.int64, device=self.device)
        self.packed[2].fill_(self.fill_seq_len)
        # A model that reads a feature per row beside its token (an EAGLE head) gets a static
        # buffer of them; padding rows keep whatever an earlier replay left (their output is dropped).
        size = getattr(model_runner.model, "feature_size", None)
        self.features = (
            None
            if size is None
            else torch.zeros((n, size), dtype=model_runner.dtype, device=self.device)
        )
        # The padding column: position 0, dummy row 0, fill seq_len, dummy slot 0.
        self.pad_col = torch.tensor(
            [0, 0, self.fill_seq_len, 0], dtype=torch.int64, device=self.device
        ).view(4, 1)
        self.backend.init_cuda_graph_state(n)

        self.graphs: Dict[int, List[object]] = {}
        self.outputs: Dict[int, List[LogitsProcessorOutput]] = {}
        self.num_replays = 0
        t0 = time.perf_counter()
        mem0 = self._free_mem()
        self._capture_all()
        self.capture_time = time.perf_counter() - t0
        self.capture_mem_gb = (mem0 - self._free_mem()) / GB
        logger.info(
            "Captured CUDA graphs for decode bs %s in %.1f s (%.2f GB)",
            self.capture_bs,
            self.capture_time,
            self.capture_mem_gb,
        )

    # ------------------------------------------------------------------ capture
    def _free_mem(self) -> int:
        if torch.device(self.device).type == "cuda":
            return torch.cuda.mem_get_info()[0]
        return 0

    def _static_batch(self, bs: int) -> ForwardBatch:
        r = self.runner
        return ForwardBatch(
            forward_mode=ForwardMode.DECODE,
            batch_size=bs,
            input_ids=self.input_ids[:bs],
            positions=self.packed[0, :bs],
            req_pool_indices=self.packed[1, :bs],
            seq_lens=self.packed[2, :bs],
            out_cache_loc=self.packed[3, :bs],
            seq_lens_cpu=None,
            seq_lens_sum=bs * self.fill_seq_len,
            req_to_token_pool=r.req_to_token_pool,
            token_to_kv_pool=r.token_to_kv_pool,
            attn_backend=self.backend,
            capture_hidden=self.capture_hidden,
            spec_features=None if self.features is None else self.features[:bs],
        )

    def _forward_static(self, bs: int) -> LogitsProcessorOutput:
        """The captured work: reads only static buffers."""
        fb = self._static_batch(bs)
        self.backend.init_forward_metadata_capture_cuda_graph(
            bs, fb.req_pool_indices, fb.seq_lens, fb.out_cache_loc
        )
        return self.runner.model.forward(fb.input_ids, fb.positions, fb)

    def _capture_all(self) -> None:
        # No garbage collection while capturing: collecting an earlier pass's pinned buffers or
        # events mid-capture records on the default stream, which invalidates the capture.
        gc.collect()
        gc.disable()
        try:
            self._capture_sizes()
        finally:
            gc.enable()

    def _capture_sizes(self) -> None:
        is_cuda = torch.device(self.device).type == "cuda"
        pool = torch.cuda.graph_pool_handle() if is_cuda else None
        stream = torch.cuda.Stream() if is_cuda else None
        with torch.no_grad():
            # Largest first: later (smaller) graphs reuse the pool blocks the larger ones freed.
            for bs in reversed(self.capture_bs):
                if is_cuda:
                    # Warm-up outside the capture on the capture stream (Triton compiles, cuBLAS picks
                    # its kernels and workspaces here, not inside the graph).
                    stream.wait_stream(torch.cuda.current_stream())
                    with torch.cuda.stream(stream):
                        for _ in range(2):
                            self._forward_static(bs)
                    torch.cuda.current_stream().wait_stream(stream)
                    torch.cuda.synchronize()
                # Two instances per size, replayed alternately: launching a graph while the same graph
                # is still running makes the next launch on the stream wait for it (measured on the
                # H200: 15 ms of host blocking after two back-to-back replays), which would serialise
                # the overlap loop. A different graph does not.
                self.graphs[bs], self.outputs[bs] = [], []
                for _ in range(GRAPHS_PER_SIZE):
                    graph = self.graph_cls(pool, stream)
                    self.outputs[bs].append(graph.capture(lambda bs=bs: self._forward_static(bs)))
                    self.graphs[bs].append(graph)
            if is_cuda:
                torch.cuda.synchronize()

    # ------------------------------------------------------------------ replay
    def can_run(self, fb: ForwardBatch) -> bool:
        return (
            fb.forward_mode.is_decode()
            and 0 < fb.batch_size <= self.max_bs
            and (fb.capture_hidden is None or fb.capture_hidden == self.capture_hidden)
            and (self.features is None) == (fb.spec_features is None)
        )

    def padded_size(self, raw_bs: int) -> int:
        return self.capture_bs[bisect.bisect_left(self.capture_bs, raw_bs)]

    def replay(self, fb: ForwardBatch) -> LogitsProcessorOutput:
        raw = fb.batch_size
        bs = self.padded_size(raw)
        if bs != raw:
            # Rows a previous, larger batch filled must point at the dummies again.
            self.packed[:, raw:bs].copy_(self.pad_col.expand(4, bs - raw))
            self.input_ids[raw:bs].zero_()
        self.input_ids[:raw].copy_(fb.input_ids, non_blocking=True)
        if fb.decode_packed is not None:
            self.packed[:, :raw].copy_(fb.decode_packed, non_blocking=True)
        else:
            for i, t in enumerate(
                (fb.positions, fb.req_pool_indices, fb.seq_lens, fb.out_cache_loc)
            ):
                self.packed[i, :raw].copy_(t, non_blocking=True)
        if self.features is not None:
            self.features[:raw].copy_(fb.spec_features, non_blocking=True)
        fb.num_padded = bs - raw
        self.backend.init_forward_metadata_replay_cuda_graph(
            bs, self.packed[1, :bs], self.packed[2, :bs]
        )
        k = self.num_replays % len(self.graphs[bs])
        self.graphs[bs][k].replay()
        self.num_replays += 1
        out = self.outputs[bs][k]
        hidden = out.hidden_states[:raw] if out.hidden_states is not None else None
        return LogitsProcessorOutput(
            next_token_logits=out.next_token_logits[:raw], hidden_states=hidden
        )
