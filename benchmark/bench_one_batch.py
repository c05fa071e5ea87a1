"""Static-batch latency: one prefill of `bs` prompts, then decode steps, through ModelRunner directly
(no scheduler, no HTTP), with CUDA graphs and the default attention backend of the device.

    python benchmark/bench_one_batch.py --model-config llama3-8b --batch-size 1 8 64 256 \
        --input-len 512 --output-len 32 --long-prefill 4096 --hf --hf-batch-size 1 8
    python benchmark/bench_one_batch.py --model-config tiny-llama --batch-size 1 4 --input-len 32 \
        --output-len 4 --hf        # CPU, seconds

Prints max_total_num_tokens, prefill latency and throughput, the median decode step and its
throughput, and two floors measured in the same process: the decode floor (weight bytes / the
device-copy bandwidth) and the prefill floor (model FLOPs / the measured bf16 matrix rate), with the
ratios measured / floor. `--hf` times HF transformers `generate` on the same shapes (random init from
the same config) in the same run, before our runtime takes the memory. `--result-file` appends one
JSON line per measurement.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Callable, List, Optional

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from model_configs import MODEL_CONFIGS, write_model_config

from sglang.srt.server_args import ServerArgs
from sglang.srt.utils.cublas_workspace import configure_cublas_workspace

GB = 1e9


# ---------------------------------------------------------------------------------------------- timing
def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def timed(fn: Callable[[], object], device: str) -> float:
    sync(device)
    t0 = time.perf_counter()
    fn()
    sync(device)
    return time.perf_counter() - t0


def median_time(fn: Callable[[], object], device: str, reps: int, warmup: int = 2) -> float:
    for _ in range(warmup):
        fn()
    return statistics.median(timed(fn, device) for _ in range(reps))


def measure_bandwidth(device: str) -> float:
    """Device-to-device copy, bytes read + written per second (random data, median of 10)."""
    n = (1 << 30) if device == "cuda" else (64 << 20)  # 2 GiB of bf16 on a GPU: far past L2
    a = torch.randn(n, dtype=torch.bfloat16 if device == "cuda" else torch.float32, device=device)
    b = torch.empty_like(a)
    t = median_time(lambda: b.copy_(a), device, reps=10)
    return 2 * a.numel() * a.element_size() / t


def measure_matmul_rate(device: str) -> float:
    """Dense matrix product rate, FLOP/s (bf16 8192^3 on a GPU, fp32 512^3 on a CPU; random data)."""
    n, dt = (8192, torch.bfloat16) if device == "cuda" else (512, torch.float32)
    a = torch.randn(n, n, dtype=dt, device=device)
    b = torch.randn(n, n, dtype=dt, device=device)
    t = median_time(lambda: a @ b, device, reps=10)
    return 2 * n**3 / t


# ---------------------------------------------------------------------------------------------- model facts
@dataclass
class ModelFacts:
    weight_bytes: int
    layer_matmul_params: int  # 2-D weights inside the decoder layers
    lm_head_params: int
    num_layers: int
    num_heads: int
    head_dim: int
    kv_bytes_per_token: int

    def prefill_flops(self, lens: List[int]) -> float:
        """Linear layers for every token, the LM head for the last token of each request, and causal
        attention (QK^T and PV over n(n+1)/2 pairs per head and layer)."""
        tokens = sum(lens)
        attn = sum(
            4 * self.head_dim * self.num_heads * self.num_layers * n * (n + 1) / 2 for n in lens
        )
        return (
            2.0 * tokens * self.layer_matmul_params + 2.0 * len(lens) * self.lm_head_params + attn
        )

    def decode_roofline_s(self, batch_size: int, kv_bytes: float, bw: float, flops: float) -> float:
        """The step's floor when the matmuls can be compute-bound: each linear layer takes the longer
        of reading its weights and doing its multiply-adds for every row, and attention streams the KV
        (its FLOPs are small next to its bytes at decode). At large batches this exceeds the
        weights + KV floor, which assumes the matmuls are free once their weights are read."""
        matmul_flops = 2.0 * batch_size * (self.layer_matmul_params + self.lm_head_params)
        return max(self.weight_bytes / bw, matmul_flops / flops) + kv_bytes / bw


def model_facts(runner) -> ModelFacts:
    model = runner.model
    layer_params = sum(p.numel() for p in model.model.layers.parameters() if p.dim() == 2)
    cfg = runner.model_config
    return ModelFacts(
        runner.weight_bytes(),
        layer_params,
        model.lm_head.weight.numel(),
        cfg.num_hidden_layers,
        cfg.num_attention_heads,
        cfg.head_dim,
        runner.cell_size(),
    )


# ---------------------------------------------------------------------------------------------- results
@dataclass
class Result:
    system: str  # "ours" or "hf"
    batch_size: int
    input_len: int
    output_len: int
    prefill_s: float
    decode_step_s: Optional[float] = None  # median of steps each timed with a sync before and after
    decode_pipelined_s: Optional[float] = (
        None  # mean over steps queued back to back (host work overlaps)
    )
    decode_steps_s: List[float] = field(default_factory=list)

    @property
    def prefill_tok_s(self) -> float:
        return self.batch_size * self.input_len / self.prefill_s

    @property
    def decode_tok_s(self) -> Optional[float]:
        return None if not self.decode_step_s else self.batch_size / self.decode_step_s


def random_prompts(bs: int, input_len: int, vocab: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(100, max(101, vocab - 100), (bs, input_len), generator=g)


# ---------------------------------------------------------------------------------------------- ours
def make_runner(args, model_path: str, max_bs: int, max_len: int):
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.model_executor.model_runner import ModelRunner
    from sglang.srt.server_args import ServerArgs

    sa = ServerArgs(
        model_path=model_path,
        load_format=args.load_format,
        dtype=args.dtype,
        device=args.device,
        kv_cache_dtype=args.kv_cache_dtype,
        quantization=args.quantization,
        mem_fraction_static=args.mem_fraction_static,
        max_total_tokens=args.max_total_tokens,
        max_running_requests=max_bs,
        attention_backend=args.attention_backend,
        disable_cuda_graph=args.disable_cuda_graph,
        cuda_graph_max_bs=args.cuda_graph_max_bs or max_bs,
        random_seed=args.seed,
        context_length=max(max_len + 8, 64),
        skinny_matmul=args.skinny_matmul,
        disable_pdl=args.disable_pdl,
        cublas_workspace_kib=args.cublas_workspace_kib,
        enable_deterministic_inference=args.enable_deterministic_inference,
    )
    device = sa.resolved_device()
    return ModelRunner.from_server_args(
        ModelConfig.from_path(model_path, sa.context_length), sa, device, show_progress=False
    )


def greedy_info(bs: int, vocab: int, device: str, temperature: float = 0.0):
    from sglang.srt.sampling.sampling_batch_info import SamplingBatchInfo

    greedy = temperature <= 0
    return SamplingBatchInfo(
        temperatures=torch.full((bs, 1), 1.0 if greedy else temperature, device=device),
        top_ps=torch.ones(bs, device=device),
        top_ks=torch.full((bs,), vocab, dtype=torch.int64, device=device),
        min_ps=torch.zeros(bs, device=device),
        greedy=torch.full((bs,), greedy, device=device),
        seeds=torch.arange(bs, dtype=torch.int64, device=device),
        steps=torch.zeros(bs, dtype=torch.int64, device=device),
        is_all_greedy=greedy,
        need_top_p=False,
        need_top_k=False,
        need_min_p=False,
        vocab_size=vocab,
    )


def run_ours(
    runner,
    bs: int,
    input_len: int,
    output_len: int,
    seed: int,
    max_prefill_tokens: int,
    temperature: float = 0.0,
) -> Result:
    from sglang.srt.model_executor.static_batch import StaticBatch

    device = runner.device
    prompts = random_prompts(bs, input_len, runner.vocab_size, seed).tolist()
    info = greedy_info(bs, runner.vocab_size, device, temperature)
    sb = StaticBatch(runner)
    try:
        with torch.no_grad():
            res = Result("ours", bs, input_len, output_len, 0.0)
            holder = {}

            def prefill():
                out = sb.prefill(prompts, max_tokens_per_pass=max_prefill_tokens)
                holder["ids"] = runner.sample(out, info).next_token_ids

            def step():
                out = sb.decode(holder["ids"])  # sampled ids stay on the device: no host sync
                holder["ids"] = runner.sample(out, info).next_token_ids

            res.prefill_s = timed(prefill, device)
            for _ in range(output_len):
                res.decode_steps_s.append(timed(step, device))
            if res.decode_steps_s:
                res.decode_step_s = statistics.median(res.decode_steps_s)
                # The same steps without a sync between them: the host prepares step n+1 while the
                # device runs step n, as the overlap scheduler does.
                res.decode_pipelined_s = (
                    timed(lambda: [step() for _ in range(output_len)], device) / output_len
                )
    finally:
        sb.release()
    return res


# ---------------------------------------------------------------------------------------------- HF peer
def load_hf(model_path: str, device: str, dtype: torch.dtype):
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = AutoConfig.from_pretrained(model_path)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(cfg, dtype=dtype)
    return model.eval()


def run_hf(
    model,
    bs: int,
    input_len: int,
    output_len: int,
    seed: int,
    device: str,
    cache_implementation: Optional[str] = None,
) -> Result:
    """generate() with max_new_tokens 1 (prefill) and output_len (greedy, no early stop); the decode
    step is the difference over output_len - 1 steps. Both lengths run once untimed first: a static
    cache (cache_implementation="static") is sized by them and compiles per size."""
    vocab = model.config.vocab_size
    ids = random_prompts(bs, input_len, vocab, seed).to(device)
    mask = torch.ones_like(ids)

    def gen(n: int):
        return model.generate(
            input_ids=ids,
            attention_mask=mask,
            max_new_tokens=n,
            min_new_tokens=n,
            do_sample=False,
            pad_token_id=0,
            cache_implementation=cache_implementation,
        )

    with torch.no_grad():
        for n in sorted({1, max(output_len, 2)}):
            gen(n)  # warm-up
        t1 = timed(lambda: gen(1), device)
        res = Result("hf", bs, input_len, output_len, t1)
        if output_len > 1:
            tn = timed(lambda: gen(output_len), device)
            res.decode_step_s = max(tn - t1, 0.0) / (output_len - 1)
    return res


def release_memory() -> None:
    """Give cached device blocks back (call after dropping the last reference to the HF model)."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


# ---------------------------------------------------------------------------------------------- sampler
def bench_sampler(runner, batch_sizes: List[int]) -> List[dict]:
    """sample() alone on random logits: greedy vs temperature 1 (the seeded [bs, vocab] noise)."""
    rows = []
    device, vocab = runner.device, runner.vocab_size
    from sglang.srt.layers import sampler as sampler_mod
    from sglang.srt.layers.logits_processor import LogitsProcessorOutput

    for bs in batch_sizes:
        logits = LogitsProcessorOutput(torch.randn(bs, vocab, device=device))
        row = {"batch_size": bs, "vocab": vocab}
        for name, temp, fused in (
            ("greedy_ms", 0.0, True),
            ("greedy_torch_ms", 0.0, False),
            ("temp1_ms", 1.0, True),
            ("temp1_torch_ms", 1.0, False),
        ):
            info = greedy_info(bs, vocab, device, temp)
            sampler_mod.FUSED_RACE = (
                fused  # temp1: the fused Triton race (CUDA) vs the torch noise path
            )
            row[name] = 1e3 * median_time(lambda: runner.sample(logits, info), device, reps=20)
        sampler_mod.FUSED_RACE = True
        rows.append(row)
    return rows


# ---------------------------------------------------------------------------------------------- profile
def profile_decode(runner, bs: int, input_len: int, steps: int, seed: int, top: int = 22) -> dict:
    """Kernel time of `steps` pipelined decode steps (CUPTI sees the kernels inside graph replays):
    per-step device time of each kernel name, and how much of the steps' span no kernel ran (launch
    gaps, host waits). Printed as a table; returned as a dict for the result file."""
    from torch.profiler import ProfilerActivity, profile

    from sglang.srt.model_executor.static_batch import StaticBatch

    device = runner.device
    info = greedy_info(bs, runner.vocab_size, device)
    sb = StaticBatch(runner)
    try:
        with torch.no_grad():
            out = sb.prefill(random_prompts(bs, input_len, runner.vocab_size, seed).tolist())
            ids = runner.sample(out, info).next_token_ids
            for _ in range(3):
                ids = runner.sample(sb.decode(ids), info).next_token_ids
            sync(device)
            on_cuda = device == "cuda"
            with profile(
                activities=[ProfilerActivity.CUDA if on_cuda else ProfilerActivity.CPU]
            ) as prof:
                for _ in range(steps):
                    ids = runner.sample(sb.decode(ids), info).next_token_ids
                sync(device)
    finally:
        sb.release()
    if on_cuda:
        kernels = [
            e
            for e in prof.events()
            if e.device_type == torch.autograd.DeviceType.CUDA
            and not e.name.startswith("Memcpy")
            and not e.name.startswith("Memset")
        ]
    else:  # CPU: top-level ops stand in for kernels (a check of this function, not a measurement)
        kernels = [e for e in prof.events() if e.cpu_parent is None]
    if not kernels:
        print(f"[profile] bs {bs}: no device events recorded")
        return {}
    start = min(e.time_range.start for e in kernels)
    end = max(e.time_range.end for e in kernels)
    busy = sum(e.time_range.end - e.time_range.start for e in kernels)
    by_name: dict = {}
    for e in kernels:
        t, n = by_name.get(e.name, (0.0, 0))
        by_name[e.name] = (t + e.time_range.end - e.time_range.start, n + 1)
    rows = sorted(by_name.items(), key=lambda kv: -kv[1][0])
    span_step = (end - start) / steps
    print(
        f"[profile] bs {bs}: {len(kernels) / steps:.0f} kernels per step, span {span_step:.0f} us/step, "
        f"kernels busy {busy / steps:.0f} us/step, idle {100 * (1 - busy / (end - start)):.1f}%"
    )
    print(f"{'us/step':>9} {'n/step':>6} {'us each':>8}  kernel")
    for name, (t, n) in rows[:top]:
        print(f"{t / steps:9.1f} {n / steps:6.1f} {t / n:8.2f}  {name[:110]}")
    return {
        "batch_size": bs,
        "span_us": span_step,
        "busy_us": busy / steps,
        "kernels_per_step": len(kernels) / steps,
        "top": [(name[:160], t / steps, n / steps) for name, (t, n) in rows[:top]],
    }


# ---------------------------------------------------------------------------------------------- host time
def host_breakdown(
    runner,
    bs: int,
    input_len: int,
    steps: int,
    seed: int,
    max_prefill_tokens: int,
    host_profile: bool = False,
) -> dict:
    """Where a synced decode step's time goes: host time of each phase (prepare = slot + ForwardBatch,
    forward = input copies + graph launch, sample = sampler launches, wait = until the device is done)
    and the captured graph replayed alone (device time + launch). Medians over `steps` steps, in us.
    host_profile: also print the functions with the most host time in those steps (cProfile)."""
    import cProfile
    import pstats

    from sglang.srt.model_executor.static_batch import StaticBatch

    device = runner.device
    info = greedy_info(bs, runner.vocab_size, device)
    sb = StaticBatch(runner)
    names = ("prepare", "forward", "sample", "wait")
    times = {k: [] for k in names + ("total",)}
    try:
        with torch.no_grad():
            prompts = random_prompts(bs, input_len, runner.vocab_size, seed).tolist()
            ids = runner.sample(
                sb.prefill(prompts, max_tokens_per_pass=max_prefill_tokens), info
            ).next_token_ids
            prof = cProfile.Profile() if host_profile else None
            for i in range(steps + 3):
                if prof is not None and i == 3:
                    prof.enable()
                sync(device)
                t = [time.perf_counter()]
                fb = sb.prepare_decode(ids)
                t.append(time.perf_counter())
                out = runner.forward(fb)
                t.append(time.perf_counter())
                ids = runner.sample(out, info).next_token_ids
                t.append(time.perf_counter())
                sync(device)
                t.append(time.perf_counter())
                if i >= 3:  # warm-up steps dropped
                    for k, a, b in zip(names, t, t[1:]):
                        times[k].append(b - a)
                    times["total"].append(t[-1] - t[0])
            if prof is not None:
                prof.disable()
                print(f"[host] bs {bs}: cProfile of {steps} synced steps (tottime = own host time)")
                pstats.Stats(prof).sort_stats("tottime").print_stats(14)
            gr = runner.graph_runner
            graph_us = None
            if gr is not None and gr.can_run(fb):
                graph = gr.graphs[gr.padded_size(bs)][0]
                graph_us = 1e6 * median_time(graph.replay, device, reps=steps)
    finally:
        sb.release()
    row = {
        "batch_size": bs,
        **{k + "_us": 1e6 * statistics.median(v) for k, v in times.items()},
        "graph_alone_us": graph_us,
    }
    print(
        f"[host] bs {bs}: "
        + ", ".join(f"{k} {row[k + '_us']:.0f}" for k in names + ("total",))
        + (f" us; graph replayed alone {graph_us:.0f} us" if graph_us else " us"),
        flush=True,
    )
    return row


# ---------------------------------------------------------------------------------------------- main
def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--model-path", help="HF folder (config.json [+ weights])")
    g.add_argument(
        "--model-config",
        choices=sorted(MODEL_CONFIGS),
        help="write this architecture's config.json",
    )
    p.add_argument(
        "--load-format", default=None, help="default: dummy with --model-config, auto otherwise"
    )
    p.add_argument("--batch-size", type=int, nargs="+", default=[1])
    p.add_argument("--input-len", type=int, default=512)
    p.add_argument("--output-len", type=int, default=32)
    p.add_argument(
        "--long-prefill",
        type=int,
        default=0,
        help="also time one prefill of this many tokens (bs 1)",
    )
    p.add_argument(
        "--hf", action="store_true", help="time HF transformers generate on the same shapes first"
    )
    p.add_argument(
        "--hf-batch-size",
        type=int,
        nargs="*",
        default=None,
        help="batch sizes for HF (default: those of --batch-size up to 8; it is slow)",
    )
    p.add_argument("--hf-output-len", type=int, default=16)
    p.add_argument(
        "--bench-sampler", action="store_true", help="time sample() alone at each batch size"
    )
    p.add_argument(
        "--profile-bs",
        type=int,
        nargs="*",
        default=[],
        help="after the timings, profile the decode kernels at these batch sizes (table per size)",
    )
    p.add_argument(
        "--host-breakdown",
        action="store_true",
        help="after the timings, split a synced decode step into host phases at each batch size",
    )
    p.add_argument(
        "--host-profile",
        action="store_true",
        help="with --host-breakdown: cProfile those steps too",
    )
    p.add_argument(
        "--temperature", type=float, default=0.0, help="sampling temperature in the decode loop"
    )
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument("--dtype", default="auto")
    p.add_argument("--kv-cache-dtype", default="auto")
    p.add_argument("--quantization", default=None, choices=[None, "fp8"])
    p.add_argument("--attention-backend", default=None)
    p.add_argument("--mem-fraction-static", type=float, default=None)
    p.add_argument("--max-total-tokens", type=int, default=None)
    p.add_argument(
        "--max-prefill-tokens",
        type=int,
        default=16384,
        help="prefill larger batches in groups of requests up to this many tokens per pass",
    )
    p.add_argument("--disable-cuda-graph", action="store_true")
    p.add_argument(
        "--enable-deterministic-inference",
        action="store_true",
        help="batch-invariant matmuls and attention (ServerArgs' flag)",
    )
    p.add_argument("--skinny-matmul", default="auto", choices=["auto", "triton", "cublas"])
    p.add_argument("--disable-pdl", action="store_true")
    p.add_argument(
        "--cublas-workspace-kib",
        type=int,
        default=ServerArgs.cublas_workspace_kib,
        help="as the server flag (-1: torch's default); applies to the HF peer too",
    )
    p.add_argument("--cuda-graph-max-bs", type=int, default=None)
    p.add_argument(
        "--bw", type=float, default=None, help="bytes/s for the floor (default: measure)"
    )
    p.add_argument(
        "--flops", type=float, default=None, help="FLOP/s for the prefill floor (default: measure)"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--result-file", default=None, help="append JSON lines here")
    p.add_argument("--tag", default="")
    args = p.parse_args(argv)
    if args.load_format is None:
        args.load_format = "dummy" if args.model_config else "auto"
    return args


def fmt_ms(x: Optional[float]) -> str:
    return "-" if x is None else f"{1e3 * x:.2f}"


def main(argv=None) -> dict:
    args = parse_args(argv)
    # Before the HF peer's first matmul: torch fixes the cuBLAS workspace at the process's first call.
    configure_cublas_workspace(args.cublas_workspace_kib)
    model_path = args.model_path or write_model_config(args.model_config)
    device = (
        ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    )
    args.device = device
    name = args.model_config or model_path
    bw = args.bw or measure_bandwidth(device)
    flops = args.flops or measure_matmul_rate(device)
    max_len = max(
        args.input_len + 2 * args.output_len, args.long_prefill + 2
    )  # synced + pipelined steps
    results: List[Result] = []

    if args.hf:
        hf_bs = (
            args.hf_batch_size
            if args.hf_batch_size is not None
            else [b for b in args.batch_size if b <= 8]
        )
        hf_dtype = torch.bfloat16 if device == "cuda" else torch.float32
        t0 = time.perf_counter()
        hf = load_hf(model_path, device, hf_dtype)
        print(f"[hf] model ready in {time.perf_counter() - t0:.1f}s", flush=True)
        for bs in hf_bs:
            r = run_hf(hf, bs, args.input_len, args.hf_output_len, args.seed + bs, device)
            results.append(r)
            print(
                f"[hf] bs {bs}: prefill {fmt_ms(r.prefill_s)} ms, decode step {fmt_ms(r.decode_step_s)} ms",
                flush=True,
            )
        if args.long_prefill:
            r = run_hf(hf, 1, args.long_prefill, 1, args.seed, device)
            results.append(r)
            print(f"[hf] prefill {args.long_prefill}: {fmt_ms(r.prefill_s)} ms", flush=True)
        # Drop the HF weights before our runner sizes its KV pool from the free memory.
        del hf
        release_memory()

    t0 = time.perf_counter()
    runner = make_runner(args, model_path, max(args.batch_size), max_len)
    gr = runner.graph_runner
    print(
        f"[ours] {name}: load+pools+graphs {time.perf_counter() - t0:.1f}s; max_total_num_tokens="
        f"{runner.max_total_num_tokens}, available_mem={runner.sizes.available_mem_gb:.2f} GB, "
        f"attention={type(runner.attn_backend).__name__}, fused_ops={runner.fused_ops}, cuda_graph_bs="
        f"{gr.capture_bs if gr else None} ({gr.capture_time if gr else 0:.1f}s)",
        flush=True,
    )
    facts = model_facts(runner)
    for bs in args.batch_size:
        # Warm-up at this batch size (Triton specialisations, cuBLAS heuristics), then the timed run.
        run_ours(
            runner,
            bs,
            args.input_len,
            2,
            args.seed + 1000 + bs,
            args.max_prefill_tokens,
            args.temperature,
        )
        r = run_ours(
            runner,
            bs,
            args.input_len,
            args.output_len,
            args.seed + bs,
            args.max_prefill_tokens,
            args.temperature,
        )
        results.append(r)
        print(
            f"[ours] bs {bs}: prefill {fmt_ms(r.prefill_s)} ms, decode step {fmt_ms(r.decode_step_s)} ms",
            flush=True,
        )
    if args.long_prefill:
        run_ours(runner, 1, args.long_prefill, 1, args.seed + 7, args.max_prefill_tokens)
        r = run_ours(runner, 1, args.long_prefill, 1, args.seed + 8, args.max_prefill_tokens)
        r.decode_step_s = r.decode_pipelined_s = None
        results.append(r)
    sampler_rows = bench_sampler(runner, args.batch_size) if args.bench_sampler else []
    profiles = [
        profile_decode(runner, bs, args.input_len, 10, args.seed + 99) for bs in args.profile_bs
    ]
    host_rows = (
        [
            host_breakdown(
                runner,
                bs,
                args.input_len,
                args.output_len,
                args.seed + 77,
                args.max_prefill_tokens,
                args.host_profile,
            )
            for bs in args.batch_size
        ]
        if args.host_breakdown
        else []
    )

    summary = report(args, name, device, bw, flops, facts, runner, results, sampler_rows)
    if profiles:
        summary["profiles"] = profiles
    if host_rows:
        summary["host_breakdown"] = host_rows
    if args.result_file:
        with open(args.result_file, "a") as f:
            f.write(json.dumps(summary) + "\n")
    return summary


def report(
    args, name, device, bw, flops, facts: ModelFacts, runner, results: List[Result], sampler_rows
) -> dict:
    floor = facts.weight_bytes / bw
    print()
    print(
        f"model {name} ({args.load_format}{', ' + runner.quantization_name() if runner.quantization else ''}), device {device}"
        + (f" ({torch.cuda.get_device_name()})" if device == "cuda" else "")
        + f", dtype {runner.dtype}, kv {runner.kv_dtype}, max_total_num_tokens {runner.max_total_num_tokens}"
    )
    print(
        f"measured: copy bandwidth {bw / 1e12:.2f} TB/s, matrix rate {flops / 1e12:.1f} TFLOP/s; weights "
        f"{facts.weight_bytes / GB:.2f} GB -> decode floor {1e3 * floor:.2f} ms/step"
    )
    hf_step = {
        r.batch_size: r.decode_step_s
        for r in results
        if r.system == "hf" and r.input_len == args.input_len
    }
    print(
        f"{'system':<6} {'bs':>4} {'in':>6} {'prefill ms':>11} {'prefill tok/s':>14} {'prefill/floor':>13} "
        f"{'step ms':>9} {'pipelined':>9} {'tok/s':>9} {'step/floor':>10} {'(w+kv floor)':>12} {'(roofline)':>10} {'vs HF':>7}"
    )
    rows = []
    for r in results:
        pf_floor = facts.prefill_flops([r.input_len] * r.batch_size) / flops
        step = r.decode_step_s
        # Weights plus the KV this step reads at mid-decode (prompt + half the outputs per request).
        kv = r.batch_size * (r.input_len + r.output_len // 2) * facts.kv_bytes_per_token
        wkv_floor = (facts.weight_bytes + kv) / bw
        roof = facts.decode_roofline_s(r.batch_size, kv, bw, flops)
        vs_hf = (
            hf_step.get(r.batch_size) / step
            if (r.system == "ours" and step and hf_step.get(r.batch_size))
            else None
        )
        row = dict(
            asdict(r),
            prefill_tok_s=r.prefill_tok_s,
            prefill_floor_s=pf_floor,
            prefill_ratio=r.prefill_s / pf_floor,
            decode_tok_s=r.decode_tok_s,
            decode_floor_s=floor,
            decode_ratio=(step / floor) if step else None,
            decode_wkv_floor_s=wkv_floor,
            decode_roofline_s=roof,
            speedup_vs_hf=vs_hf,
        )
        row.pop("decode_steps_s")
        rows.append(row)
        print(
            f"{r.system:<6} {r.batch_size:>4} {r.input_len:>6} {fmt_ms(r.prefill_s):>11} {r.prefill_tok_s:>14.0f} "
            f"{r.prefill_s / pf_floor:>12.2f}x {fmt_ms(step):>9} {fmt_ms(r.decode_pipelined_s):>9} "
            f"{(r.decode_tok_s or 0):>9.0f} {(f'{step / floor:.2f}x' if step else '-'):>10} "
            f"{(f'{step / wkv_floor:.2f}x' if step else '-'):>12} "
            f"{(f'{step / roof:.2f}x' if step else '-'):>10} {(f'{vs_hf:.1f}x' if vs_hf else '-'):>7}"
        )
    for s in sampler_rows:
        print(
            f"sampler bs {s['batch_size']} vocab {s['vocab']}: greedy {s['greedy_ms']:.3f} ms "
            f"(torch {s['greedy_torch_ms']:.3f} ms), "
            f"temperature 1 {s['temp1_ms']:.3f} ms (torch noise path {s['temp1_torch_ms']:.3f} ms)"
        )
    return dict(
        tag=args.tag,
        model=name,
        device=device,
        device_name=torch.cuda.get_device_name() if device == "cuda" else "cpu",
        date=time.strftime("%Y-%m-%d %H:%M"),
        bandwidth=bw,
        matmul_flops=flops,
        weight_bytes=facts.weight_bytes,
        quantization=runner.quantization_name(),
        max_total_num_tokens=runner.max_total_num_tokens,
        kv_dtype=str(runner.kv_dtype),
        cuda_graph=runner.graph_runner is not None,
        rows=rows,
        sampler=sampler_rows,
    )


if __name__ == "__main__":
    main()
