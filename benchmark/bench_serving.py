"""Online serving benchmark: send a dataset of prompts to a running server and measure it.

    python benchmark/bench_serving.py --port 30000 --dataset-name random --num-prompts 50
    python benchmark/bench_serving.py --port 30000 --dataset-name generated-shared-prefix \
        --gsp-num-groups 4 --gsp-prompts-per-group 16 --max-concurrency 8 --flush-cache \
        --output-file runs.jsonl --tag radix-on
    python benchmark/bench_serving.py --compare off.jsonl on.jsonl --plot-file radix.png

Prints a table (throughput, TTFT/TPOT/ITL/E2E, cache hit rate, failures by message), appends one
JSON line per run to --output-file and draws latency CDFs next to it. Defaults are sized for the
2-core CPU development machine (short prompts, short outputs), not for a GPU.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import math
import os
import sys
from typing import Any, Dict, List, Optional

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from serving import server_api
from serving.client import BACKENDS, REQUEST_FUNCS, RequestConfig, RequestResult
from serving.datasets import DATASETS, build_requests
from serving.metrics import format_table, summarize
from serving.runner import run_requests, warmup

# Server flags worth recording next to every run (the peer of a comparison differs in one of them).
SERVER_FLAGS = (
    "disable_radix_cache",
    "disable_overlap_schedule",
    "stream_interval",
    "max_queued_requests",
    "chunked_prefill_size",
    "max_total_num_tokens",
    "schedule_policy",
    "enable_metrics",
    "enable_hierarchical_cache",
    "hicache_write_policy",
)


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    a = p.add_argument
    a("--backend", choices=BACKENDS, default="sglang")
    a("--base-url", default=None, help="Overrides --host/--port, e.g. http://127.0.0.1:30000")
    a("--host", default="127.0.0.1")
    a("--port", type=int, default=30000)
    a("--model", default=None, help="Model name for the OpenAI routes (default: from /v1/models)")
    a("--tokenizer", default=None, help="Tokenizer path (default: the server's tokenizer_path)")
    a("--dataset-name", choices=DATASETS, default="random")
    a("--dataset-path", default=None, help="ShareGPT-format JSON file for --dataset-name sharegpt")
    a(
        "--corpus",
        default=None,
        help="Plain-text file for --dataset-name random (default benchmark/data/corpus.txt)",
    )
    a(
        "--num-prompts",
        type=int,
        default=50,
        help="Requests to send (gsp: groups x prompts per group)",
    )
    a("--random-input-len", type=int, default=256)
    a("--random-output-len", type=int, default=32)
    a(
        "--random-range-ratio",
        type=float,
        default=1.0,
        help="Lengths uniform in [len*ratio, len]; 1.0 = fixed",
    )
    a("--gsp-num-groups", type=int, default=4)
    a("--gsp-prompts-per-group", type=int, default=16)
    a("--gsp-system-prompt-len", type=int, default=2048)
    a("--gsp-question-len", type=int, default=128)
    a("--gsp-output-len", type=int, default=256)
    a("--gsp-ordered", action="store_true", help="Send group after group instead of interleaved")
    a(
        "--gsp-num-turns",
        type=int,
        default=1,
        help="Turns per user: turn t extends the user's turn t-1 prompt by one more question",
    )
    a(
        "--sharegpt-output-len",
        type=int,
        default=None,
        help="Fixed output length instead of the answer's",
    )
    a(
        "--sharegpt-context-len",
        type=int,
        default=None,
        help="Drop pairs longer than this (default 2048)",
    )
    a(
        "--request-rate",
        type=float,
        default=float("inf"),
        help="Requests/s, Poisson arrivals; inf = all at once",
    )
    a("--max-concurrency", type=int, default=None, help="Most requests in flight")
    a("--seed", type=int, default=1)
    a("--warmup-requests", type=int, default=1)
    a(
        "--disable-ignore-eos",
        action="store_true",
        help="Let requests stop at EOS (default: run to max tokens)",
    )
    a("--disable-stream", action="store_true")
    a("--send-text", action="store_true", help="Native backend: send text instead of token ids")
    a("--temperature", type=float, default=0.0)
    a("--extra-request-body", default=None, help="JSON object merged into every request body")
    a("--flush-cache", action="store_true", help="Flush the server's prefix cache after warm-up")
    a("--ready-timeout", type=float, default=60.0)
    a("--output-file", default=None, help="Append one JSON line per run")
    a("--output-details", action="store_true", help="Include per-request arrays in the JSON line")
    a("--plot-file", default=None, help="PNG path (default: next to --output-file)")
    a("--no-plot", action="store_true")
    a("--tag", default=None, help="Label of this run in the JSON line and in --compare charts")
    a("--disable-tqdm", action="store_true")
    a(
        "--compare",
        nargs=2,
        metavar=("A.jsonl", "B.jsonl"),
        default=None,
        help="Draw a bar chart of the last run in each file instead of benchmarking",
    )
    a("--compare-labels", nargs=2, default=None)
    a(
        "--compare-tags",
        nargs=2,
        default=None,
        metavar=("TAG_A", "TAG_B"),
        help="With --compare: take the last run with this tag from each file (the files may be the same)",
    )
    return p.parse_args(argv)


def base_url(args: argparse.Namespace) -> str:
    return (args.base_url or f"http://{args.host}:{args.port}").rstrip("/")


def load_tokenizer(args: argparse.Namespace, url: str) -> Any:
    from sglang.srt.utils.hf_tokenizer import get_tokenizer

    path = args.tokenizer
    if path is None:
        info = server_api.get_model_info(url)
        path = info.get("tokenizer_path") or info.get("model_path")
    if not path:
        raise SystemExit(
            "no tokenizer: pass --tokenizer (the server did not report tokenizer_path)"
        )
    return get_tokenizer(path)


def _json_safe(v: Any) -> Any:
    if isinstance(v, float) and math.isinf(v):
        return "inf"
    return v


def machine_info(load_before: float) -> Dict[str, Any]:
    """This machine is shared: the load average says how much of it the run really had."""
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            model = next(
                (ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), ""
            )
    except OSError:
        pass
    return {
        "nproc": os.cpu_count(),
        "cpu_model": model,
        "loadavg_1m_before": load_before,
        "loadavg_1m_after": os.getloadavg()[0],
    }


def run_record(
    args: argparse.Namespace,
    summary: Dict[str, Any],
    server_info: Dict[str, Any],
    results: List[RequestResult],
    load_before: float = float("nan"),
) -> Dict[str, Any]:
    rec: Dict[str, Any] = {
        "tag": args.tag,
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "backend": args.backend,
        "dataset_name": args.dataset_name,
        "num_prompts": len(results),
        "request_rate": _json_safe(args.request_rate),
        "max_concurrency": args.max_concurrency,
        "ignore_eos": not args.disable_ignore_eos,
        "stream": not args.disable_stream,
        "server": {k: server_info.get(k) for k in SERVER_FLAGS},
        "machine": machine_info(load_before),
    }
    if args.dataset_name == "generated-shared-prefix":
        rec["gsp"] = {
            "num_groups": args.gsp_num_groups,
            "prompts_per_group": args.gsp_prompts_per_group,
            "system_prompt_len": args.gsp_system_prompt_len,
            "question_len": args.gsp_question_len,
            "output_len": args.gsp_output_len,
            "num_turns": args.gsp_num_turns,
        }
    elif args.dataset_name.startswith("random"):
        rec["random"] = {
            "input_len": args.random_input_len,
            "output_len": args.random_output_len,
            "range_ratio": args.random_range_ratio,
        }
    rec.update(summary)
    if args.output_details:
        rec["details"] = {
            "ttfts": [r.ttft for r in results],
            "latencies": [r.latency for r in results],
            "output_lens": [r.output_len for r in results],
            "prompt_lens": [r.prompt_len for r in results],
            "cached_tokens": [r.cached_tokens for r in results],
            "frames": [r.frames for r in results],
            "itls": [r.itl for r in results],
            "errors": [r.error for r in results],
        }
    return rec


def default_plot_path(args: argparse.Namespace) -> Optional[str]:
    if args.no_plot:
        return None
    if args.plot_file:
        return args.plot_file
    if args.output_file:
        stem = os.path.splitext(args.output_file)[0]
        return f"{stem}{'-' + args.tag if args.tag else ''}.png"
    return None


def benchmark(args: argparse.Namespace) -> Dict[str, Any]:
    url = base_url(args)
    server_api.wait_ready(url, args.ready_timeout)
    tokenizer = load_tokenizer(args, url)
    reqs = build_requests(args, tokenizer)
    model = args.model or server_api.get_model_name(url) or "default"
    extra = json.loads(args.extra_request_body) if args.extra_request_body else {}
    cfg = RequestConfig(
        base_url=url,
        model=model,
        stream=not args.disable_stream,
        ignore_eos=not args.disable_ignore_eos,
        temperature=args.temperature,
        extra_body=extra,
        send_token_ids=not args.send_text,
    )
    fn = REQUEST_FUNCS[args.backend]

    warm = asyncio.run(warmup(fn, cfg, reqs, args.warmup_requests))
    bad = [w for w in warm if not w.success]
    if bad:
        print(f"warm-up failed: {bad[0].error}", file=sys.stderr)
    if args.flush_cache and not server_api.flush_cache(url):
        print("warning: /flush_cache did not succeed", file=sys.stderr)

    load_before = os.getloadavg()[0]
    results, duration, _ = asyncio.run(
        run_requests(
            fn,
            cfg,
            reqs,
            args.request_rate,
            args.max_concurrency,
            args.seed,
            show_progress=not args.disable_tqdm,
        )
    )
    info = server_api.get_server_info(url)
    summary = summarize(results, duration, tokenizer, info)
    print(format_table(summary, args.backend, args.request_rate, args.max_concurrency), flush=True)

    rec = run_record(args, summary, info, results, load_before)
    if args.output_file:
        with open(args.output_file, "a", encoding="utf-8") as f:
            f.write(json.dumps(rec) + "\n")
    plot_path = default_plot_path(args)
    if plot_path:
        from serving.plot import plot_latency_cdfs

        title = f"{args.backend} {args.dataset_name} {args.tag or ''} ({len(results)} requests)"
        plot_latency_cdfs(results, plot_path, title)
    return rec


def compare(args: argparse.Namespace) -> None:
    from serving.plot import plot_compare

    runs, labels = [], []
    for i, path in enumerate(args.compare):
        with open(path, encoding="utf-8") as f:
            records = [json.loads(ln) for ln in f if ln.strip()]
        if args.compare_tags:
            records = [r for r in records if r.get("tag") == args.compare_tags[i]]
        if not records:
            raise SystemExit(f"{path} holds no matching runs")
        run = records[-1]
        runs.append(run)
        labels.append(
            (args.compare_labels or [None, None])[i]
            or run.get("tag")
            or os.path.splitext(os.path.basename(path))[0]
        )
    out = args.plot_file or "compare.png"
    plot_compare(runs, labels, out, title=f"{labels[0]} vs {labels[1]}")
    w = max(14, len(labels[0]), len(labels[1]))
    print(f"{'metric':<24} {labels[0]:>{w}} {labels[1]:>{w}} {'B/A':>7}")
    for key in (
        "duration",
        "completed",
        "failed",
        "request_throughput",
        "output_throughput",
        "mean_ttft_ms",
        "median_ttft_ms",
        "p99_ttft_ms",
        "mean_tpot_ms",
        "mean_itl_ms",
        "median_itl_ms",
        "p99_itl_ms",
        "itl_zero_fraction",
        "mean_frames_per_request",
        "mean_e2e_latency_ms",
        "run_cache_hit_rate",
        "server_cache_hit_rate",
    ):
        a, b = runs[0].get(key), runs[1].get(key)
        ratio = (
            f"{b / a:.2f}"
            if isinstance(a, (int, float)) and isinstance(b, (int, float)) and a
            else "-"
        )
        fa = f"{a:.3f}" if isinstance(a, float) else str(a)
        fb = f"{b:.3f}" if isinstance(b, float) else str(b)
        print(f"{key:<24} {fa:>{w}} {fb:>{w}} {ratio:>7}")
    print(f"chart: {out}")


def main(argv: Optional[List[str]] = None) -> None:
    args = parse_args(argv)
    if args.compare:
        compare(args)
    else:
        benchmark(args)


if __name__ == "__main__":
    main()
