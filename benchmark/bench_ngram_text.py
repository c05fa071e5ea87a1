"""NGRAM speculation on real text with a real model: decode time against plain decoding.

The target is a trained checkpoint (default: the embedded SmolLM2-135M-Instruct), so whether its
greedy continuation agrees with what the n-gram table proposes is the model's own behaviour, not
an oracle's. Three chat workloads, each a batch of distinct prompts built from real text:

- quote: copy a passage of benchmark/data/corpus.txt (the drafts come from the prompt itself);
- code: repeat a function of this repository's source with a docstring added (code edits);
- open: open questions with no text to copy (the control, where drafts should seldom land).

Each workload decodes greedily to EOS (or --max-new-tokens) on a plain scheduler and then on NGRAM
schedulers (chains of --num-draft-tokens, optionally trees), in-process, every pass timed with a
device sync. The speed-up is the plain run's decode time per output token over the speculative
run's; tokens per verify and token equality with the plain run are printed beside it.

    python benchmark/bench_ngram_text.py --batch-size 1 8 --num-draft-tokens 4 8
"""

from __future__ import annotations

import argparse
import ast
import inspect
import json
import os
import sys
from dataclasses import asdict, dataclass
from typing import Dict, List, Optional

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench_speculative import run

HERE = os.path.dirname(os.path.abspath(__file__))
OPEN_QUESTIONS = [
    "What makes a good cup of tea?",
    "Give three tips for learning a new language.",
    "Why is the sky blue?",
    "Describe a walk through a forest in autumn.",
    "What should I pack for a weekend trip to the mountains?",
    "How do bees make honey?",
    "Suggest a name for a small bakery and explain it.",
    "What are the benefits of regular exercise?",
]


@dataclass
class Row:
    workload: str
    batch_size: int
    variant: str
    decode_s: float
    steps: int
    output_tokens: int
    tokens_per_verify: float
    speedup: float  # plain decode time per output token / this variant's
    same_tokens: float  # fraction of requests whose tokens equal the plain run's
    first_diff: int  # the earliest output index where a request's tokens part from plain (-1: none)


def passages(n: int) -> List[str]:
    text = open(os.path.join(HERE, "data", "corpus.txt")).read()
    paras = [p.strip() for p in text.split("\n\n") if len(p.strip()) > 200]
    return [paras[i % len(paras)] for i in range(n)]


def functions(n: int) -> List[str]:
    """Short functions of this repository (real code, 6-30 lines), deterministic order."""
    from sglang.srt.mem_cache import radix_cache
    from sglang.srt.speculative import ngram_proposer

    out = []
    for mod in (radix_cache, ngram_proposer):
        src = inspect.getsource(mod)
        for node in ast.walk(ast.parse(src)):
            if isinstance(node, ast.FunctionDef):
                seg = ast.get_source_segment(src, node)
                lines = seg.splitlines() if seg else []
                if 6 <= len(lines) <= 30:
                    out.append(inspect.cleandoc("\n".join(lines)))
    return [out[i % len(out)] for i in range(n)]


def prompts_for(workload: str, n: int) -> List[str]:
    if workload == "quote":
        return [f"Copy the following text exactly, word for word:\n\n{p}" for p in passages(n)]
    if workload == "code":
        return [
            f"Repeat this Python function exactly, adding a one-line docstring:\n\n```python\n{f}\n```"
            for f in functions(n)
        ]
    return [
        OPEN_QUESTIONS[i % len(OPEN_QUESTIONS)] + f" (answer {i // len(OPEN_QUESTIONS) + 1})"
        for i in range(n)
    ]


def make_scheduler(args, spec: Optional[dict]):
    from sglang.srt.managers.scheduler.scheduler import Scheduler
    from sglang.srt.server_args import ServerArgs

    kw = dict(
        model_path=args.model_path,
        skip_tokenizer_init=True,
        grammar_backend="none",
        max_total_tokens=args.max_total_tokens,
        max_running_requests=max(args.batch_size),
        random_seed=1,
        skinny_matmul=args.skinny_matmul,
    )
    if spec:
        kw.update(speculative_algorithm="NGRAM", **spec)
        kw["cuda_graph_max_bs"] = max(args.batch_size) * spec["speculative_num_draft_tokens"]
    return Scheduler(ServerArgs(**kw), None)


def variants(args) -> Dict[str, dict]:
    out = {}
    for k in args.num_draft_tokens:
        out[f"chain k={k}"] = dict(speculative_num_draft_tokens=k)
    for b in args.tree_breadth:
        k = max(args.num_draft_tokens)
        out[f"tree k={k} breadth={b}"] = dict(
            speculative_num_draft_tokens=k, speculative_ngram_max_bfs_breadth=b
        )
    return out


def main(argv=None) -> List[Row]:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--model-path", default=None, help="default: the embedded SmolLM2")
    p.add_argument("--tokenizer-path", default=None)
    p.add_argument("--workload", nargs="+", default=["quote", "code", "open"])
    p.add_argument("--batch-size", type=int, nargs="+", default=[1, 8])
    p.add_argument("--num-draft-tokens", type=int, nargs="+", default=[4, 8])
    p.add_argument("--tree-breadth", type=int, nargs="*", default=[])
    p.add_argument("--max-new-tokens", type=int, default=256)
    p.add_argument("--max-total-tokens", type=int, default=32768)
    p.add_argument(
        "--skinny-matmul",
        default="auto",
        choices=["auto", "triton", "cublas"],
        help="as the server flag: cublas makes one-row (plain bs 1) and multi-row (verify) "
        "products round alike on CUDA",
    )
    p.add_argument("--result-file", default=None)
    args = p.parse_args(argv)

    from sglang.srt.utils.embedded_model import embedded_model_path
    from sglang.srt.utils.hf_tokenizer import get_tokenizer

    args.model_path = args.model_path or embedded_model_path()
    tok = get_tokenizer(args.tokenizer_path or args.model_path)
    work = {}
    for w in args.workload:
        for bs in args.batch_size:
            texts = prompts_for(w, bs)
            work[(w, bs)] = [
                tok.encode(
                    tok.apply_chat_template(
                        [{"role": "user", "content": t}], add_generation_prompt=True, tokenize=False
                    ),
                    add_special_tokens=False,
                )
                for t in texts
            ]
    plain = make_scheduler(args, None)
    base = {}
    for key, prompts in work.items():
        run(plain, prompts, 8, "warm", ignore_eos=True)
        base[key] = run(plain, prompts, args.max_new_tokens, "plain", ignore_eos=False)
    del plain
    rows = [
        Row(w, bs, "plain", r["decode_s"], r["steps"], r["decode_tokens"], 1.0, 1.0, 1.0, -1)
        for (w, bs), r in base.items()
    ]
    for name, spec in variants(args).items():
        torch.cuda.empty_cache() if torch.cuda.is_available() else None
        sched = make_scheduler(args, spec)
        for (w, bs), prompts in work.items():
            run(sched, prompts, 8, "warm", ignore_eos=True)
            r = run(sched, prompts, args.max_new_tokens, "spec", ignore_eos=False)
            b = base[(w, bs)]
            same = sum(r["outputs"][k] == b["outputs"][k] for k in b["outputs"]) / len(prompts)
            diffs = [first_diff(r["outputs"][k], b["outputs"][k]) for k in b["outputs"]]
            diffs = [d for d in diffs if d >= 0]
            per_tok = r["decode_s"] / max(r["decode_tokens"], 1)
            speedup = b["decode_s"] / max(b["decode_tokens"], 1) / max(per_tok, 1e-12)
            rows.append(
                Row(w, bs, name, r["decode_s"], r["steps"], r["decode_tokens"],
                    r["accept_length"], speedup, same, min(diffs) if diffs else -1)
            )  # fmt: skip
        del sched
    print_table(rows)
    if args.result_file:
        with open(args.result_file, "a") as f:
            for row in rows:
                f.write(json.dumps(dict(asdict(row), device=device_name())) + "\n")
    return rows


def first_diff(a: List[int], b: List[int]) -> int:
    """The first index where two token lists differ (a length difference counts), -1 if equal."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return -1 if len(a) == len(b) else min(len(a), len(b))


def device_name() -> str:
    return torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"


def print_table(rows: List[Row]) -> None:
    print(f"\nNGRAM on real text, {device_name()}")
    print(
        "| workload | bs | variant | decode s | steps | output tok | tok / verify | speed-up | same | first diff |"
    )
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r.workload} | {r.batch_size} | {r.variant} | {r.decode_s:.3f} | {r.steps} | "
            f"{r.output_tokens} | {r.tokens_per_verify:.2f} | {r.speedup:.2f}x | {r.same_tokens:.2f} | "
            f"{r.first_diff} |"
        )


if __name__ == "__main__":
    main()
