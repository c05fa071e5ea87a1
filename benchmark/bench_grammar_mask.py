"""Per-step cost of grammar masking: fill (CPU, per row) + apply (in place on the logits).

Every constrained request pays this on every decode step, on the scheduler's critical path unless
the overlap loop hides the fill behind the forward pass. The batch is kept full of live JSON
matchers in varied states: random logits drive them, and a finished row restarts with a fresh
matcher. Only mask work is timed, not the logits generation or the sampling.

    python benchmark/bench_grammar_mask.py [--batch-sizes 1 8 64] [--steps 200] [--device cpu]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from typing import Dict, List

import torch

from sglang.srt.constrained.xgrammar_backend import XGrammarBackend
from sglang.srt.utils.embedded_model import embedded_model_path
from sglang.srt.utils.hf_tokenizer import get_tokenizer

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer"},
        "role": {"enum": ["admin", "user", "guest"]},
        "address": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "zip": {"type": "string"}},
            "required": ["city", "zip"],
        },
        "tags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["name", "age", "role", "address", "tags"],
}
CLOSE_AFTER = 12  # a row's own step count after which closing tokens are favoured, so rows finish


def _closing_ids(tok, stop_ids) -> torch.Tensor:
    ids = [
        i
        for i, t in enumerate(tok.batch_decode([[i] for i in range(len(tok))]))
        if t and set(t) <= set('"}]')
    ]
    return torch.tensor(ids + list(stop_ids))


def bench(
    backend: XGrammarBackend,
    vocab: int,
    bs: int,
    steps: int,
    warmup: int,
    device: str,
    closing: torch.Tensor,
) -> Dict[str, float]:
    template = backend.compile("json", json.dumps(SCHEMA))
    gen = torch.Generator().manual_seed(bs)
    rows = [template.copy() for _ in range(bs)]
    age = [0] * bs
    logits_cpu = torch.empty(bs, vocab)
    fill_ms: List[float] = []
    apply_ms: List[float] = []
    for step in range(warmup + steps):
        logits_cpu.normal_(0.0, 3.0, generator=gen)
        for i in range(bs):
            if age[i] >= CLOSE_AFTER:
                logits_cpu[i, closing] += 10.0
        logits = logits_cpu.to(device)
        if device == "cuda":
            torch.cuda.synchronize()

        t0 = time.perf_counter()
        mask = template.allocate_vocab_mask(vocab, bs, device)
        for i, g in enumerate(rows):
            g.fill_vocab_mask(mask, i)
        t1 = time.perf_counter()
        mask = type(template).move_vocab_mask(mask, device)
        type(template).apply_vocab_mask(logits, mask)
        if device == "cuda":
            torch.cuda.synchronize()
        t2 = time.perf_counter()
        if step >= warmup:
            fill_ms.append((t1 - t0) * 1e3)
            apply_ms.append((t2 - t1) * 1e3)

        tokens = torch.argmax(
            logits.float().cpu() - torch.empty(bs, vocab).exponential_(generator=gen).log(), dim=-1
        ).tolist()  # Gumbel-max: a temperature-1 sample
        for i, g in enumerate(rows):
            assert g.accept_token(tokens[i])
            age[i] += 1
            if g.is_terminated():
                rows[i], age[i] = template.copy(), 0
    total = [f + a for f, a in zip(fill_ms, apply_ms)]
    return {
        "fill": statistics.median(fill_ms),
        "apply": statistics.median(apply_ms),
        "total": statistics.median(total),
        "p90": sorted(total)[int(0.9 * len(total))],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8, 64])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()

    tok = get_tokenizer(embedded_model_path())
    vocab = len(tok)
    backend = XGrammarBackend(tok, vocab)
    closing = _closing_ids(tok, backend.stop_token_ids)
    # Shared CI machines are noisy; the load average tells a reader how much to trust the table.
    print(
        f"grammar mask cost per decode step, vocab {vocab}, device {args.device}, "
        f"torch threads {torch.get_num_threads()}, load avg {os.getloadavg()[0]:.1f}, "
        f"median of {args.steps} steps (ms)"
    )
    print("| batch | fill (CPU) | move + apply | total | total p90 | total per row |")
    print("|------:|-----------:|-------------:|------:|----------:|--------------:|")
    for bs in args.batch_sizes:
        r = bench(backend, vocab, bs, args.steps, args.warmup, args.device, closing)
        print(
            f"| {bs} | {r['fill']:.3f} | {r['apply']:.3f} | {r['total']:.3f} | {r['p90']:.3f} | {r['total'] / bs:.4f} |"
        )


if __name__ == "__main__":
    main()
