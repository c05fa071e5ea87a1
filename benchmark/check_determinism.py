"""Does a server give one answer per prompt however it batches? (SGLang's test_deterministic modes.)

Against a running server (start it with --enable-deterministic-inference to see 1 everywhere):
    python benchmark/check_determinism.py --test-mode single --n-trials 20
    python benchmark/check_determinism.py --test-mode prefix --n-trials 20 --temperature 0.7

- single: one prompt, each trial inside a batch of a random size of filler prompts;
- mixed: prompts of different lengths, each trial a random subset in a random order;
- prefix: prompts sharing a long prefix with suffixes of different lengths (the radix cache then
  holds different parts of each), random subsets in random orders.
Each prompt's distinct outputs over the trials are counted: "Unique samples: 1" is deterministic.
Sampled runs pass a fixed sampling_seed, so the sampled tokens must repeat too.
"""

from __future__ import annotations

import argparse
import random
from collections import defaultdict
from typing import Dict, List, Set, Tuple

import requests

FILLER = ["Hello", "Tell me a story about a dragon.", "1, 2, 3, 4,", "What is the speed of light?"]
MIXED = [
    "The capital of France is",
    "Write a haiku about autumn leaves falling on a quiet pond in the evening.",
    "def fibonacci(n):",
    "Explain, in a few sentences, why the sky appears blue during the day and red at sunset.",
]
PREFIX = "You are a careful assistant. Answer briefly and precisely. Here is the question: "
SUFFIXES = ["Why?", "What is 2 + 2?", "Name three primary colours and say why they are primary."]


def _generate(url: str, texts: List[str], args) -> List[Tuple[int, ...]]:
    sp = {
        "max_new_tokens": args.max_new_tokens,
        "temperature": args.temperature,
        "sampling_seed": args.sampling_seed,
    }
    r = requests.post(f"{url}/generate", json={"text": texts, "sampling_params": sp}, timeout=600)
    r.raise_for_status()
    return [tuple(o["output_ids"]) for o in r.json()]


def _trials(mode: str, rng: random.Random, n: int) -> List[List[str]]:
    """The batches to send, each a list of prompts."""
    batches = []
    for _ in range(n):
        if mode == "single":
            fill = [rng.choice(FILLER) for _ in range(rng.randint(0, 7))]
            fill.insert(rng.randint(0, len(fill)), MIXED[0])
            batches.append(fill)
        else:
            pool = MIXED if mode == "mixed" else [PREFIX + s for s in SUFFIXES]
            pick = rng.sample(pool, rng.randint(1, len(pool)))
            batches.append(pick)
    return batches


def run(url: str, args) -> Dict[str, int]:
    """Distinct outputs per tracked prompt."""
    rng = random.Random(args.seed)
    tracked = {"single": MIXED[:1], "mixed": MIXED, "prefix": [PREFIX + s for s in SUFFIXES]}
    seen: Dict[str, Set[Tuple[int, ...]]] = defaultdict(set)
    for batch in _trials(args.test_mode, rng, args.n_trials):
        for text, out in zip(batch, _generate(url, batch, args)):
            if text in tracked[args.test_mode]:
                seen[text].add(out)
    return {t: len(seen[t]) for t in tracked[args.test_mode] if t in seen}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=30000)
    ap.add_argument("--test-mode", choices=["single", "mixed", "prefix"], default="single")
    ap.add_argument("--n-trials", type=int, default=50)
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--sampling-seed", type=int, default=42)
    ap.add_argument("--seed", type=int, default=0, help="seed of the batch compositions")
    args = ap.parse_args()
    counts = run(f"http://{args.host}:{args.port}", args)
    for text, n in counts.items():
        print(f"{text[:60]!r:<64} Unique samples: {n}")
    print(f"Unique samples: {max(counts.values())}")


if __name__ == "__main__":
    main()
