"""Benchmark prompts: corpus text (`random`), random token ids (`random-ids`), groups sharing a
random system prompt (`generated-shared-prefix`), and ShareGPT-format JSON (`sharegpt`).

Every generator returns BenchRequest objects carrying both token ids and text where it can, so the
native backend sends exact ids and the OpenAI backends send text (which the server re-tokenizes;
lengths then drift by a token or two at word boundaries).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

DEFAULT_CORPUS = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "corpus.txt"
)
DATASETS = ("random", "random-ids", "generated-shared-prefix", "sharegpt")


@dataclass
class BenchRequest:
    prompt: str  # the whole prompt as text (system + question for gsp)
    prompt_len: int  # planned prompt tokens
    output_len: int  # max_new_tokens to ask for
    prompt_ids: Optional[List[int]] = None
    system: Optional[str] = (
        None  # chat backends: the system message (gsp); prompt is then the user turn
    )
    user: Optional[str] = None
    group: int = -1  # gsp group index, -1 otherwise
    extra: Dict[str, Any] = field(default_factory=dict)


def _lengths(rng: np.random.Generator, n: int, target: int, range_ratio: float) -> np.ndarray:
    """Uniform in [max(1, target * range_ratio), target]; range_ratio 1.0 means every length is target."""
    lo = max(1, int(target * range_ratio))
    return rng.integers(lo, target + 1, size=n)


def _ordinary_token_ids(tokenizer: Any) -> np.ndarray:
    """Vocabulary ids minus special tokens (a stray EOS or chat marker would change the workload)."""
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    vocab = len(tokenizer)
    return np.array([i for i in range(vocab) if i not in special], dtype=np.int64)


def _decode(tokenizer: Any, ids: Sequence[int]) -> str:
    return tokenizer.decode(list(ids), skip_special_tokens=True)


def load_corpus_ids(tokenizer: Any, path: Optional[str] = None) -> List[int]:
    with open(path or DEFAULT_CORPUS, encoding="utf-8") as f:
        text = f.read()
    ids = tokenizer.encode(text, add_special_tokens=False)
    if not ids:
        raise ValueError(f"corpus {path or DEFAULT_CORPUS} tokenizes to nothing")
    return ids


def sample_random(
    tokenizer: Any,
    num: int,
    input_len: int,
    output_len: int,
    range_ratio: float,
    rng: np.random.Generator,
    corpus: Optional[str] = None,
) -> List[BenchRequest]:
    """Windows of the corpus at random offsets (the corpus repeats when a window is longer)."""
    ids = load_corpus_ids(tokenizer, corpus)
    in_lens = _lengths(rng, num, input_len, range_ratio)
    out_lens = _lengths(rng, num, output_len, range_ratio)
    reqs = []
    for n_in, n_out in zip(in_lens, out_lens):
        start = int(rng.integers(0, len(ids)))
        window = [ids[(start + k) % len(ids)] for k in range(int(n_in))]
        reqs.append(
            BenchRequest(
                prompt=_decode(tokenizer, window),
                prompt_len=int(n_in),
                output_len=int(n_out),
                prompt_ids=window,
            )
        )
    return reqs


def sample_random_ids(
    tokenizer: Any,
    num: int,
    input_len: int,
    output_len: int,
    range_ratio: float,
    rng: np.random.Generator,
) -> List[BenchRequest]:
    pool = _ordinary_token_ids(tokenizer)
    in_lens = _lengths(rng, num, input_len, range_ratio)
    out_lens = _lengths(rng, num, output_len, range_ratio)
    reqs = []
    for n_in, n_out in zip(in_lens, out_lens):
        ids = rng.choice(pool, size=int(n_in)).tolist()
        reqs.append(
            BenchRequest(
                prompt=_decode(tokenizer, ids),
                prompt_len=int(n_in),
                output_len=int(n_out),
                prompt_ids=ids,
            )
        )
    return reqs


def sample_generated_shared_prefix(
    tokenizer: Any,
    num_groups: int,
    prompts_per_group: int,
    system_len: int,
    question_len: int,
    output_len: int,
    rng: np.random.Generator,
    ordered: bool = False,
    num_turns: int = 1,
) -> List[BenchRequest]:
    """Each group: one random-token system prompt shared by its prompts (users), each with its own
    question. With num_turns > 1 every user comes back: turn t's prompt is the system prompt plus
    the user's questions 0..t, so it extends the user's previous prompt. All users' turn t are sent
    before any turn t + 1.

    Shuffled by default (within a turn) so groups interleave the way independent users would;
    --gsp-ordered keeps group after group (the friendliest order for the prefix cache)."""
    pool = _ordinary_token_ids(tokenizer)
    turns: List[List[BenchRequest]] = [[] for _ in range(num_turns)]
    for g in range(num_groups):
        sys_ids = rng.choice(pool, size=system_len).tolist()
        sys_text = _decode(tokenizer, sys_ids)
        for _ in range(prompts_per_group):
            q_ids: List[int] = []
            for t in range(num_turns):
                q_ids = q_ids + rng.choice(pool, size=question_len).tolist()
                q_text = _decode(tokenizer, q_ids)
                turns[t].append(
                    BenchRequest(
                        prompt=sys_text + q_text,
                        prompt_len=system_len + len(q_ids),
                        output_len=output_len,
                        prompt_ids=sys_ids + q_ids,
                        system=sys_text,
                        user=q_text,
                        group=g,
                    )
                )
    reqs: List[BenchRequest] = []
    for turn in turns:
        if not ordered:
            turn = [turn[i] for i in rng.permutation(len(turn))]
        reqs.extend(turn)
    return reqs


def _conversation_pairs(entry: Dict[str, Any]) -> Optional[tuple]:
    """(human text, assistant text) of the first exchange, in ShareGPT or role/content form."""
    turns = entry.get("conversations") or entry.get("messages") or []
    if len(turns) < 2:
        return None

    def text(t: Dict[str, Any]) -> str:
        return t.get("value", t.get("content", "")) or ""

    return text(turns[0]), text(turns[1])


def sample_sharegpt(
    tokenizer: Any,
    path: str,
    num: int,
    rng: np.random.Generator,
    fixed_output_len: Optional[int] = None,
    context_len: Optional[int] = None,
) -> List[BenchRequest]:
    """First exchange of each conversation; the answer's length becomes max_new_tokens.

    Drops pairs too short to measure (< 4 tokens either side) and pairs whose prompt + answer
    exceed context_len (default 2048)."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    limit = context_len or 2048
    order = rng.permutation(len(data))
    reqs: List[BenchRequest] = []
    for i in order:
        pair = _conversation_pairs(data[int(i)])
        if pair is None:
            continue
        prompt, answer = pair
        p_ids = tokenizer.encode(prompt, add_special_tokens=False)
        n_out = (
            fixed_output_len
            if fixed_output_len is not None
            else len(tokenizer.encode(answer, add_special_tokens=False))
        )
        if len(p_ids) < 4 or n_out < 4 or len(p_ids) + n_out > limit:
            continue
        reqs.append(
            BenchRequest(
                prompt=prompt, prompt_len=len(p_ids), output_len=int(n_out), prompt_ids=p_ids
            )
        )
        if len(reqs) == num:
            break
    if len(reqs) < num:
        raise ValueError(f"{path} has only {len(reqs)} usable conversations; asked for {num}")
    return reqs


def build_requests(args: Any, tokenizer: Any) -> List[BenchRequest]:
    rng = np.random.default_rng(args.seed)
    name = args.dataset_name
    if name == "random":
        return sample_random(
            tokenizer,
            args.num_prompts,
            args.random_input_len,
            args.random_output_len,
            args.random_range_ratio,
            rng,
            args.corpus,
        )
    if name == "random-ids":
        return sample_random_ids(
            tokenizer,
            args.num_prompts,
            args.random_input_len,
            args.random_output_len,
            args.random_range_ratio,
            rng,
        )
    if name == "generated-shared-prefix":
        return sample_generated_shared_prefix(
            tokenizer,
            args.gsp_num_groups,
            args.gsp_prompts_per_group,
            args.gsp_system_prompt_len,
            args.gsp_question_len,
            args.gsp_output_len,
            rng,
            args.gsp_ordered,
            args.gsp_num_turns,
        )
    if name == "sharegpt":
        if not args.dataset_path:
            raise ValueError(
                "--dataset-name sharegpt needs --dataset-path FILE.json (no downloads here)"
            )
        return sample_sharegpt(
            tokenizer,
            args.dataset_path,
            args.num_prompts,
            rng,
            args.sharegpt_output_len,
            args.sharegpt_context_len,
        )
    raise ValueError(f"unknown dataset {name!r}; choose from {', '.join(DATASETS)}")
