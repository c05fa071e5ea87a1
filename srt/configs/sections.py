"""Frozen views of ServerArgs, one per concern, so each part receives only the flags it reads (the
model runner sees no HTTP flag, the HTTP process no kernel flag). ServerArgs stays the one source:
every section is built from it."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Optional

from sglang.srt.server_args import ServerArgs


@dataclass(frozen=True)
class ModelSection:
    """What is loaded and how it runs."""

    model_path: Optional[str]
    load_format: str
    dtype: str
    random_seed: int
    attention_backend: str
    disable_cuda_graph: bool
    cuda_graph_max_bs: Optional[int]
    skinny_matmul: str
    disable_pdl: bool
    cublas_workspace_kib: int
    quantization: Optional[str] = None
    enable_deterministic_inference: bool = False
    # Decode-batch rows per running request: speculative verify passes run one row per token.
    decode_rows_per_request: int = 1
    # The graphs wait for the caller (init_cuda_graphs): an EAGLE head's hidden-state layers are
    # known only once it is loaded, and its verify passes must return them.
    defer_cuda_graph: bool = False

    @staticmethod
    def of(sa: ServerArgs) -> "ModelSection":
        return ModelSection(
            model_path=sa.model_path,
            load_format=sa.load_format,
            dtype=sa.dtype,
            random_seed=sa.random_seed or 0,
            attention_backend=sa.resolved_attention_backend(),
            disable_cuda_graph=sa.disable_cuda_graph,
            cuda_graph_max_bs=sa.cuda_graph_max_bs,
            skinny_matmul=sa.skinny_matmul,
            disable_pdl=sa.disable_pdl,
            cublas_workspace_kib=sa.cublas_workspace_kib,
            quantization=sa.quantization,
            enable_deterministic_inference=sa.enable_deterministic_inference,
            decode_rows_per_request=(
                sa.speculative_num_draft_tokens if sa.speculative_algorithm else 1
            ),
            defer_cuda_graph=sa.speculative_algorithm in ("EAGLE", "EAGLE3"),
        )


@dataclass(frozen=True)
class MemorySection:
    """How large the KV pool and the request table are."""

    mem_fraction_static: Optional[float]
    max_total_tokens: Optional[int]
    max_running_requests: Optional[int]
    page_size: int
    kv_cache_dtype: str
    chunked_prefill_size: Optional[int]  # the activation reserve grows with the chunk
    # Speculative decoding's draft model: its weights and a KV pool as large as this one come out
    # of the same memory, so the target's pool shrinks by both.
    draft_model_path: Optional[str] = None
    # An EAGLE head's folder: its one-layer KV pool (and its small weights) come out of it too.
    eagle_head_path: Optional[str] = None
    # The draft model's own runner: exactly max_total_tokens slots (the target's slot numbers).
    exact_pool: bool = False
    # Draft trees: request-table rows per running request for the tree nodes' attention views.
    tree_rows_per_request: int = 0
    # KV slots past the allocator's (never handed out): a draft model's tree nodes while drafting.
    scratch_slots: int = 0

    @staticmethod
    def of(sa: ServerArgs) -> "MemorySection":
        return MemorySection(
            mem_fraction_static=sa.mem_fraction_static,
            max_total_tokens=sa.max_total_tokens,
            max_running_requests=sa.max_running_requests,
            page_size=sa.page_size,
            kv_cache_dtype=sa.kv_cache_dtype,
            chunked_prefill_size=sa.chunked_prefill_size,
            draft_model_path=(
                sa.speculative_draft_model_path
                if sa.speculative_algorithm == "STANDALONE"
                else None
            ),
            eagle_head_path=(
                sa.speculative_draft_model_path
                if sa.speculative_algorithm in ("EAGLE", "EAGLE3")
                else None
            ),
            tree_rows_per_request=_tree_rows_per_request(sa),
        )


def _tree_rows_per_request(sa: ServerArgs) -> int:
    """A row per verify row of a tree, and per frontier node of a draft model's tree search."""
    algo = sa.speculative_algorithm
    if algo == "NGRAM" and sa.speculative_ngram_max_bfs_breadth > 1:
        return sa.speculative_num_draft_tokens
    if algo is not None and algo != "NGRAM" and (sa.speculative_eagle_topk or 1) > 1:
        return max(sa.speculative_num_draft_tokens, sa.speculative_eagle_topk)
    return 0


@dataclass(frozen=True)
class ParallelSection:
    tp_size: int
    dp_size: int
    dist_init_addr: Optional[str]
    dist_timeout: int
    force_distributed: bool

    @staticmethod
    def of(sa: ServerArgs) -> "ParallelSection":
        return ParallelSection(
            sa.tp_size, sa.dp_size, sa.dist_init_addr, sa.dist_timeout, sa.force_distributed
        )


# What SGLang calls the write-through threshold: a node is copied to the host at this many hits.
WRITE_THROUGH_THRESHOLDS = {"write_through": 1, "write_through_selective": 2}
DEFAULT_HICACHE_STORAGE_DIR = "/tmp/hicache"


@dataclass(frozen=True)
class HiCacheSection:
    """The hierarchical cache: a host pool under the device pool, and an optional storage tier."""

    ratio: float
    size_gb: int
    write_policy: str
    io_backend: str
    storage_backend: Optional[str]
    prefetch_policy: str
    storage_dir: str
    prefetch_threshold: int = 256  # storage hits shorter than this are recomputed instead

    @property
    def write_through_threshold(self) -> Optional[int]:
        """Hits at which a node is copied down; None under write_back (copied only when evicted)."""
        return WRITE_THROUGH_THRESHOLDS.get(self.write_policy)

    @staticmethod
    def of(sa: ServerArgs) -> Optional["HiCacheSection"]:
        if not sa.enable_hierarchical_cache:
            return None
        extra = json.loads(sa.hicache_storage_backend_extra_config or "{}")
        storage_dir = extra.get("storage_dir") or os.environ.get(
            "SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR", DEFAULT_HICACHE_STORAGE_DIR
        )
        return HiCacheSection(
            ratio=sa.hicache_ratio,
            size_gb=sa.hicache_size,
            write_policy=sa.hicache_write_policy,
            io_backend=sa.hicache_io_backend,
            storage_backend=sa.hicache_storage_backend,
            prefetch_policy=sa.hicache_storage_prefetch_policy,
            storage_dir=storage_dir,
            prefetch_threshold=int(extra.get("prefetch_threshold", 256)),
        )


@dataclass(frozen=True)
class SpecSection:
    """Speculative decoding: how drafts are made and how many a verify pass checks."""

    algorithm: str
    num_draft_tokens: int  # per request per verify pass, the pending token included
    draft_model_path: Optional[str]
    ngram_min_window: int
    ngram_max_window: int
    ngram_max_breadth: int = 1  # NGRAM: continuations per draft tree (1: a chain)
    topk: int = 1  # a draft model's candidates per tree node (1: a chain)
    num_steps: int = 0  # a draft model's steps per verify pass (the deepest tree node)

    @property
    def max_drafts(self) -> int:
        return self.num_draft_tokens - 1

    @staticmethod
    def of(sa: ServerArgs) -> Optional["SpecSection"]:
        if sa.speculative_algorithm is None:
            return None
        return SpecSection(
            algorithm=sa.speculative_algorithm,
            num_draft_tokens=sa.speculative_num_draft_tokens,
            draft_model_path=sa.speculative_draft_model_path,
            ngram_min_window=sa.speculative_ngram_min_match_window_size,
            ngram_max_window=sa.speculative_ngram_max_match_window_size,
            ngram_max_breadth=sa.speculative_ngram_max_bfs_breadth,
            topk=sa.speculative_eagle_topk,
            num_steps=sa.speculative_num_steps,
        )
