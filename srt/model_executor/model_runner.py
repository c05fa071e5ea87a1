"""ModelRunner: owns the model, the KV pools and the attention backend of one (TP) rank."""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass
from typing import Optional, Sequence, Tuple

import psutil
import torch

from sglang.srt.configs.model_config import ModelConfig
from sglang.srt.configs.sections import MemorySection, ModelSection
from sglang.srt.core.forward_batch_info import ForwardBatch
from sglang.srt.distributed.parallel_state import get_tp_size
from sglang.srt.layers.logits_processor import LogitsProcessorOutput
from sglang.srt.layers.quantization.fp8 import resolve_quantization
from sglang.srt.layers.sampler import SampleOutput, sample
from sglang.srt.mem_cache.allocator import PagedTokenToKVPoolAllocator, TokenToKVPoolAllocator
from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, ReqToTokenPool
from sglang.srt.model_executor.weight_sync import WeightUpdateGroups, load_named
from sglang.srt.model_loader.loader import load_model, reload_weights
from sglang.srt.sampling.sampling_batch_info import SamplingBatchInfo
from sglang.srt.server_args import ServerArgs
from sglang.srt.utils import jit_watch
from sglang.srt.utils.cublas_workspace import configure_cublas_workspace

logger = logging.getLogger(__name__)

GB = 1 << 30
# On the CPU the KV pool takes this share of free RAM unless --mem-fraction-static says otherwise.
CPU_DEFAULT_KV_FRACTION = 0.05


@dataclass
class PoolSizes:
    max_total_num_tokens: int
    max_running_requests: int
    available_mem_gb: float


class ModelRunner:
    @classmethod
    def from_server_args(
        cls,
        model_config: ModelConfig,
        sa: ServerArgs,
        device: str,
        gpu_id: int = 0,
        show_progress: bool = True,
    ) -> "ModelRunner":
        return cls(
            model_config, ModelSection.of(sa), MemorySection.of(sa), device, gpu_id, show_progress
        )

    def __init__(
        self,
        model_config: ModelConfig,
        model: ModelSection,
        memory: MemorySection,
        device: str,
        gpu_id: int = 0,
        show_progress: bool = True,
        req_to_token_pool: Optional[ReqToTokenPool] = None,
        prebuilt: Optional[torch.nn.Module] = None,
    ):
        """req_to_token_pool: another runner's request table to read and write instead of an own
        one (a draft model keeps its KV at the target's slot numbers); set before the attention
        backend and the CUDA graphs bind it. prebuilt: a model already in memory (an EAGLE head
        over the target's embedding) instead of one loaded from model_config."""
        self.model_config = model_config
        self.model_section = model
        self.memory_section = memory
        self.device = device
        self.gpu_id = gpu_id
        self.tp_size = get_tp_size()
        self.dtype = model_config.resolve_dtype(model.dtype, device)
        self.page_size = memory.page_size
        if device == "cuda":
            configure_cublas_workspace(model.cublas_workspace_kib)
            torch.cuda.set_device(gpu_id)
            jit_watch.install()
        self._pre_load_free = self._free_memory()
        t0 = time.perf_counter()
        self.quantization = resolve_quantization(
            model.quantization, model_config.quantization_config
        )
        self.model = (
            prebuilt
            if prebuilt is not None
            else load_model(
                model_config,
                model.load_format,
                self.dtype,
                device,
                seed=model.random_seed,
                show_progress=show_progress,
                quantization=self.quantization,
            )
        )
        self.load_time = time.perf_counter() - t0
        # Where the weights in memory came from (a failed update rolls back to it).
        self.weights_source = (model_config, model.load_format)
        self.update_groups = WeightUpdateGroups()
        self.vocab_size = model_config.vocab_size
        self.kv_dtype = self._kv_dtype()
        self.sizes = self._size_pools()
        self.max_total_num_tokens = self.sizes.max_total_num_tokens
        self.max_running_requests = self.sizes.max_running_requests
        self._init_pools(req_to_token_pool)
        self.attn_backend = self._make_attn_backend()
        self.fused_ops = self._bind_fused_ops()
        self._bind_batch_invariant()
        self.graph_runner = None
        self._graph_hidden: Optional[Tuple[int, ...]] | bool = False  # False: never captured
        if not model.defer_cuda_graph:
            self.init_cuda_graphs()
        else:
            self.sizes.available_mem_gb = self._free_memory() / GB
        if device == "cuda":
            logger.info(
                "KV pool: max_total_num_tokens=%d (%s, %d B/token), weights %.2f GB, mem_fraction_static=%.3f, "
                "available_gpu_mem=%.2f GB",
                self.max_total_num_tokens,
                str(self.kv_dtype).replace("torch.", ""),
                self.cell_size(),
                self.weight_bytes() / GB,
                self.mem_fraction,
                self.sizes.available_mem_gb,
            )

    def update_weights_from_disk(self, model_path: str, load_format: Optional[str]) -> None:
        """Load another checkpoint of the same model into the weights in place (the CUDA graphs
        read the same buffers); ValueError or the loader's error says why it was refused."""
        self._refuse_quantized()
        new = (ModelConfig.from_path(model_path), load_format or "auto")
        reload_weights(self.model, self.weights_source, new, self.model_section.random_seed)
        self.weights_source = new

    def update_weights_from_tensor(
        self, named: Sequence[Tuple[str, torch.Tensor]], load_format: Optional[str] = None
    ) -> None:
        """Some or all weights, in place, from tensors (see weight_sync.load_named). A later failed
        disk update rolls back to the last checkpoint loaded from disk."""
        self._refuse_quantized()
        load_named(self.model, named, load_format)

    def update_weights_from_distributed(
        self,
        names: Sequence[str],
        dtypes: Sequence[str],
        shapes: Sequence[Sequence[int]],
        group_name: str,
    ) -> None:
        self._refuse_quantized()
        named = self.update_groups.receive(names, dtypes, shapes, group_name, self.model_device())
        load_named(self.model, named, None)

    def model_device(self) -> torch.device:
        return next(self.model.parameters()).device

    def _refuse_quantized(self) -> None:
        if self.quantization is not None:
            raise ValueError("Updating weights is not supported with --quantization yet.")

    def kv_buffers(self) -> list:
        pool = self.token_to_kv_pool
        return [*pool.k_buffer, *pool.v_buffer]

    def set_cuda_graphs(self, on: bool) -> None:
        """Drop the captured graphs, or capture them again as they were (memory was released)."""
        if not on:
            self.graph_runner = None
        elif self._graph_hidden is not False:
            self.init_cuda_graphs(self._graph_hidden)

    def init_cuda_graphs(self, capture_hidden: Optional[Tuple[int, ...]] = None) -> None:
        """Capture the decode graphs (CUDA, graphs on, a backend that supports them). With
        capture_hidden, each replay also returns those layers' hidden states (an EAGLE head's
        features of the verified positions)."""
        self._graph_hidden = capture_hidden
        if (
            self.device == "cuda"
            and not self.model_section.disable_cuda_graph
            and self.attn_backend.supports_cuda_graph
        ):
            from sglang.srt.model_executor.cuda_graph_runner import CudaGraphRunner

            self.graph_runner = CudaGraphRunner(self, capture_hidden=capture_hidden)
        # What is left for activations once weights, pools and graphs are in place (the startup line).
        self.sizes.available_mem_gb = self._free_memory() / GB

    # ------------------------------------------------------------------ memory
    def _free_memory(self) -> int:
        if self.device == "cuda":
            free, _ = torch.cuda.mem_get_info(self.gpu_id)
            return free
        return psutil.virtual_memory().available

    def _kv_dtype(self) -> torch.dtype:
        k = self.memory_section.kv_cache_dtype
        if k == "auto":
            return self.dtype
        if k == "fp8_e4m3":
            return torch.float8_e4m3fn
        return getattr(torch, k)

    def cell_size(self) -> int:
        cfg = self.model_config
        return MHATokenToKVPool.bytes_per_token(
            cfg.kv_heads_per_rank(self.tp_size), cfg.head_dim, cfg.num_hidden_layers, self.kv_dtype
        )

    def weight_bytes(self) -> int:
        return sum(p.numel() * p.element_size() for p in self.model.parameters())

    def quantization_name(self) -> Optional[str]:
        q = self.quantization
        if q is None:
            return None
        return f"fp8 (blocks {q.block[0]}x{q.block[1]})" if q.block else "fp8 (per channel)"

    def _size_pools(self) -> PoolSizes:
        mem = self.memory_section
        post_free = self._free_memory()
        if self.device == "cuda":
            # mem_fraction_static = (weights + KV pool) / device memory: the KV pool gets what is free
            # after loading minus the reserve (1 - fraction) x total kept for activations and graphs.
            total = torch.cuda.get_device_properties(self.gpu_id).total_memory
            frac = mem.mem_fraction_static or default_mem_fraction(total, mem, self.model_section)
            rest = post_free - total * (1 - frac)
        else:
            frac = mem.mem_fraction_static or CPU_DEFAULT_KV_FRACTION
            rest = post_free * frac
        self.mem_fraction = frac
        draft_weights, draft_cell = self._draft_reserve()
        tokens = int(max(rest - draft_weights, 0) // (self.cell_size() + draft_cell))
        if mem.max_total_tokens is not None:
            exact = self.device == "cpu" or mem.exact_pool
            tokens = mem.max_total_tokens if exact else min(tokens, mem.max_total_tokens)
        tokens = tokens // self.page_size * self.page_size
        if tokens < 16:
            raise RuntimeError(
                f"Not enough memory for the KV cache ({rest / GB:.2f} GB left after weights). "
                "Raise --mem-fraction-static or set --max-total-tokens."
            )
        ctx = self.model_config.context_len
        estimated = int(min(max(tokens / ctx * 512, 2048), 4096))
        if mem.max_running_requests:
            max_running = min(mem.max_running_requests, estimated)
        else:
            max_running = max(1, min(estimated, tokens // 2))
        return PoolSizes(tokens, max_running, post_free / GB)

    def _draft_reserve(self) -> tuple:
        """(weight bytes, KV bytes per token) of the speculative draft model or EAGLE head, if
        one is set (the head's pool is one layer at this pool's slot count)."""
        elem = torch.empty(0, dtype=self.dtype).element_size()
        head = self.memory_section.eagle_head_path
        if head:
            kv_heads, head_dim, weights = eagle_head_shape(head)
            return weights * elem, MHATokenToKVPool.bytes_per_token(
                kv_heads, head_dim, 1, self.kv_dtype
            )
        path = self.memory_section.draft_model_path
        if not path:
            return 0, 0
        cfg = ModelConfig.from_path(path)
        cell = MHATokenToKVPool.bytes_per_token(
            cfg.kv_heads_per_rank(self.tp_size), cfg.head_dim, cfg.num_hidden_layers, self.kv_dtype
        )
        return cfg.num_params() * elem, cell

    def _init_pools(self, shared_table: Optional[ReqToTokenPool] = None) -> None:
        cfg = self.model_config
        self.req_to_token_pool = shared_table or ReqToTokenPool(
            self.max_running_requests,
            cfg.context_len + 4,
            self.device,
            scratch_rows=self.max_running_requests * self.memory_section.tree_rows_per_request,
        )
        # Scratch slots sit after every slot the allocator can hand out (see scratch_slot_base).
        self.token_to_kv_pool = MHATokenToKVPool(
            self.max_total_num_tokens + self.memory_section.scratch_slots,
            self.page_size,
            self.kv_dtype,
            cfg.kv_heads_per_rank(self.tp_size),
            cfg.head_dim,
            cfg.num_hidden_layers,
            self.device,
        )
        if self.page_size == 1:
            self.token_to_kv_pool_allocator = TokenToKVPoolAllocator(self.max_total_num_tokens)
        else:
            self.token_to_kv_pool_allocator = PagedTokenToKVPoolAllocator(
                self.max_total_num_tokens, self.page_size
            )

    # ------------------------------------------------------------------ kernels
    def _make_attn_backend(self):
        name = self.model_section.attention_backend
        if name == "torch_native":
            from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend

            return TorchNativeAttnBackend(
                self, deterministic=self.model_section.enable_deterministic_inference
            )
        if name == "triton":
            if self.device != "cuda":
                raise ValueError("--attention-backend triton needs a CUDA device")
            from sglang.srt.layers.attention.triton_backend import TritonAttnBackend

            return TritonAttnBackend(self)
        raise ValueError(f"unknown attention backend {name}")

    def _bind_fused_ops(self) -> Optional[dict]:
        """Triton (or sgl-kernel) RMSNorm, SiLU-and-mul and rotary on CUDA; the torch code stays on the CPU."""
        if self.device != "cuda":
            return None
        try:
            from sglang.srt.layers.fused_ops_binding import bind_fused_ops
        except ImportError as e:
            logger.warning("fused ops unavailable, using torch: %s", e)
            return None
        sa = self.model_section
        sm90 = torch.cuda.get_device_capability(self.gpu_id)[0] >= 9
        mode = {"triton": "all", "cublas": "cublas", "auto": "measured" if sm90 else "cublas"}[
            sa.skinny_matmul
        ]
        return bind_fused_ops(skinny_matmul=mode, pdl=not sa.disable_pdl)

    def _bind_batch_invariant(self) -> None:
        """--enable-deterministic-inference: every matmul through batch_invariant's (the binding is
        per process, so a runner without the flag undoes an earlier one's)."""
        from sglang.srt.layers import batch_invariant

        if self.model_section.enable_deterministic_inference:
            batch_invariant.bind_batch_invariant(self.device)
            logger.info("deterministic inference: batch-invariant matmuls and attention")
        else:
            batch_invariant.unbind_batch_invariant()

    # ------------------------------------------------------------------ forward
    def forward(self, fb: ForwardBatch) -> LogitsProcessorOutput:
        """Logits of the batch. A decode batch that fits a captured CUDA graph replays it; its logits
        are then a view of the graph's output buffer, valid until the next forward."""
        fb.req_to_token_pool = self.req_to_token_pool
        fb.token_to_kv_pool = self.token_to_kv_pool
        fb.attn_backend = self.attn_backend
        if self.graph_runner is not None and self.graph_runner.can_run(fb):
            if fb.kv_layer_waits is not None:  # a replayed graph has no per-layer hook
                fb.kv_layer_waits.wait_all()
            return self.graph_runner.replay(fb)
        self.attn_backend.init_forward_metadata(fb)
        return self.model.forward(fb.input_ids, fb.positions, fb)

    def sample(
        self,
        logits_output: LogitsProcessorOutput,
        info: SamplingBatchInfo,
        return_logprob: bool = False,
        top_logprobs_nums: Optional[list] = None,
    ) -> SampleOutput:
        return sample(logits_output.next_token_logits, info, return_logprob, top_logprobs_nums)


def eagle_head_shape(path: str) -> Tuple[int, int, int]:
    """(KV heads, head dim, parameter count) of an EAGLE head from its config.json; the
    count is EAGLE-3's layout (fc over three features, a 2H-wide attention input, an own LM head
    over its draft vocabulary), the larger of the two."""
    with open(os.path.join(path, "config.json")) as f:
        d = json.load(f)
    h, heads = d["hidden_size"], d["num_attention_heads"]
    kv, hd = d.get("num_key_value_heads", heads), d.get("head_dim") or h // heads
    attn = 2 * h * (heads + 2 * kv) * hd + heads * hd * h
    vocab = d.get("draft_vocab_size") or d["vocab_size"]
    return kv, hd, 3 * h * h + attn + 3 * h * d["intermediate_size"] + vocab * h


def default_mem_fraction(total_bytes: int, mem: MemorySection, model: ModelSection) -> float:
    """Weights + KV over device memory, leaving a reserve for activations and graphs."""
    gb = total_bytes / GB
    chunk = (
        default_chunked_prefill_size(gb)
        if mem.chunked_prefill_size is None
        else max(mem.chunked_prefill_size, 0)
    )
    reserved = 0.5 + 1.5 * chunk / 1024 + (4.0 if not model.disable_cuda_graph else 0.0)
    if gb > 60:
        reserved = max(reserved, 10.0)
    return round((gb - reserved) / gb, 3)


def default_chunked_prefill_size(device_mem_gb: Optional[float]) -> int:
    """The guide's table: 2048 under 20 GB, 4096 up to 60 GB, 8192 up to 160 GB, 16384 above."""
    if device_mem_gb is None:
        return 2048  # CPU: keep each prefill step short so decode stays responsive
    if device_mem_gb < 20:
        return 2048
    if device_mem_gb < 60:
        return 4096
    if device_mem_gb < 160:
        return 8192
    return 16384
